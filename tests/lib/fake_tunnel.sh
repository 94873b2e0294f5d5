#!/usr/bin/env bash
# fake_tunnel.sh PORT_LIST_DIR NODE_PORT - a stand-in for a tunnel program
# (cloudflared, bore, ngrok) in tests/test_tunnel.sh: forwards a loopback port
# to the node's port with socat and prints where it is ready, like a real
# tunnel prints its public address. Each start takes the next port of
# DIR/ports (so a restart moves the address), counts itself in
# DIR/tunnel.count and leaves socat's pid in DIR/tunnel.pid.N. Before the
# address it prints lines that must not be taken for one: a timestamp, the
# node's own address, and a URL.
set -u
dir=$1 node_port=$2
n=$(($(cat "$dir/tunnel.count" 2>/dev/null || echo 0) + 1))
echo "$n" >"$dir/tunnel.count"
port=$(sed -n "${n}p" "$dir/ports")
if [ -z "$port" ]; then
    echo "fake tunnel: no port left for start $n" >&2
    exit 3
fi
echo "2024-05-01T10:20:30Z INF start $n: forwarding to 127.0.0.1:$node_port"
echo "INF metrics at http://127.0.0.1:9/metrics" >&2
socat TCP-LISTEN:"$port",fork,reuseaddr,bind=127.0.0.1 TCP:127.0.0.1:"$node_port" &
s=$!
echo "$s" >"$dir/tunnel.pid.$n"
hex=$(printf '%04X' "$port")
for _ in $(seq 1 100); do # until socat listens (state 0A in /proc/net/tcp)
    grep -q ":$hex 00000000:0000 0A" /proc/net/tcp && break
    sleep 0.05
done
echo "tunnel ready at 127.0.0.1:$port"
wait "$s"
