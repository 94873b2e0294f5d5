#!/usr/bin/env bash
# test_tunnel.sh - nodes behind NAT (docs/volunteers.md), every part its own
# process on 127.0.0.1, with socat standing in for a tunnel program.
#   (a) tunnel: a registry and 2 nodes, one with --tunnel running
#       tests/lib/fake_tunnel.sh (socat, prints "tunnel ready at HOST:PORT"
#       after lines that must not be taken for the address). The registry
#       lists the tunnel's address for that node, its own server stays on
#       loopback, a prompt through the registry gives `moontail run`'s tokens
#       and goes through the tunnel; socat killed -> the agent starts the
#       tunnel again, registers its new address, prompts still match;
#       stopping the node kills the tunnel's processes.
#   (b) relay: a registry with --relay-listen and nodes with --relay: each
#       registers a public relay port, prompts match `moontail run`.
#   (c) hostile clients of the relay (tests/lib/relay_hostile.js): garbage,
#       truncated and malformed hellos, wrong proofs, a forged cookie, silent
#       connections, floods of idle connections to the relay port and to a
#       node's public port; each is closed (wrong proofs with a reason), a
#       prompt made while the floods hold their connections matches, the
#       relayed nodes never lose their connection, prompts after still match,
#       a new node still joins through the relay, and a node that leaves
#       frees its port.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
LIB="$(cd "$(dirname "$0")/lib" && pwd)"
cd "$tmp"
if ! command -v socat >/dev/null; then
    bad "socat is not installed (./dev test installs it; or apt-get install socat)"
    finish
    exit 1
fi

extra_cleanup() { # tunnels left by a failed check (the agents kill them when they stop)
    for f in "$tmp"/tunnel.pid.*; do
        [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
}

status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }
# wait_for JS SECONDS: until JS (on o = status of $URL) is true
wait_for() {
    local js=$1 limit=${2:-30} i
    for i in $(seq 1 $((limit * 5))); do
        status | json "process.exit(($js) ? 0 : 1)" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
addr_of() { status | json "console.log(o.nodes.find(n => n.name == '$1').addr)"; }
# prompt_check TAG: a prompt through $URL gives the reference tokens; its route is in $tmp/TAG.route
prompt_check() {
    $T "$BIN" prompt --registry "$URL" --token-file "$tmp/$ACCT.token" --key "$tmp/req.key" \
        --cache "$tmp/cache" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/$1.json" 2>"$tmp/$1.err"
    local got
    got=$(tokens <"$tmp/$1.json" 2>/dev/null)
    [ -n "$got" ] && [ "$got" = "$ref" ] && ok || bad "$1: prompt tokens '$got' differ from run's '$ref': $(tail -5 "$tmp/$1.err")"
    sed -n 's/^[^ ]* [a-z]* requester: route: //p' "$tmp/$1.err" >"$tmp/$1.route"
}
port_closed() { ! (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 4 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 5 >/dev/null || bad "mkmodel"
cap_mb=$(($(stat -c %s "$M") * 6 / 10 / 1000000 + 1)) # each node holds about half: both serve
PROMPT="Behind the NAT a node still computes"
$T "$BIN" run -m "$M" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")
NODE=(--capacity-mb "$cap_mb" --speed 1 --threads 1 --listen 127.0.0.1:0)
REGOPT=(--replicas 1 --spares 0 --heartbeat-ms 200 --dead-after-ms 1500)

# ==== (a) a node behind a tunnel program ======================================================
start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" \
    "${REGOPT[@]}" --listen 127.0.0.1:0
URL=$ADDR
ACCT=a
"$BIN" account new a --registry "$URL" -o "$tmp/a.token" >/dev/null 2>&1 || bad "account a"
node -e 'const net = require("net"), ports = [];
for (let i = 0; i < 3; i++) { const s = net.createServer(); s.listen(0, "127.0.0.1", () => {
  ports.push(s.address().port); if (ports.length == 3) { console.log(ports.join("\n")); process.exit(0); } }); }' >"$tmp/ports"
P1=$(sed -n 1p "$tmp/ports")
P2=$(sed -n 2p "$tmp/ports")
start_bg plain "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --key "$tmp/plain.key" \
    --data "$tmp/dplain" --name plain "${NODE[@]}"
start_bg tun "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --key "$tmp/tun.key" \
    --data "$tmp/dtun" --name tunneled "${NODE[@]}" --tunnel "$LIB/fake_tunnel.sh $tmp {port}"
TUN_PID=$PID
[ "$ADDR" = "127.0.0.1:$P1" ] && ok || bad "the tunneled node printed '$ADDR', not the tunnel's address 127.0.0.1:$P1: $(cat "$tmp/tun.err")"
local_addr=$(sed -n 's/.*own server on \([0-9.:]*\) (loopback).*/\1/p' "$tmp/tun.err")
case "$local_addr" in
127.0.0.1:*) [ "$local_addr" != "$ADDR" ] && ok || bad "own server and public address are the same" ;;
*) bad "the tunneled node's own server is not on loopback: '$local_addr': $(cat "$tmp/tun.err")" ;;
esac
grep -q "start 1: forwarding to $local_addr" "$tmp/tun.err" && ok ||
    bad "{port} was not replaced by the local port: $(grep tunnel "$tmp/tun.err")"
wait_for 'o.ready && o.nodes_serving == 2' 60 && ok || bad "2 nodes did not serve: $(status | head -c 1500)"
[ "$(addr_of tunneled)" = "127.0.0.1:$P1" ] && ok || bad "the registry lists '$(addr_of tunneled)' for the tunneled node, not 127.0.0.1:$P1"
status | json 'const n = o.nodes.find(n => n.name == "tunneled"); process.exit(n.state == "serving" ? 0 : 1)' &&
    ok || bad "the tunneled node does not serve"
prompt_check a1
grep -q "127.0.0.1:$P1" "$tmp/a1.route" && ok || bad "the route did not go through the tunnel: $(cat "$tmp/a1.route")"

# kill the tunnel: the agent starts it again (the stand-in moves to a new port)
kill -9 "$(cat "$tmp/tunnel.pid.1")"
wait_for "o.nodes.find(n => n.name == 'tunneled').addr == '127.0.0.1:$P2' && o.nodes_serving == 2" 30 &&
    ok || bad "the new tunnel address was not registered: $(addr_of tunneled); $(grep tunnel "$tmp/tun.err" | tail -5)"
[ "$(cat "$tmp/tunnel.count")" = 2 ] && ok || bad "the tunnel was started $(cat "$tmp/tunnel.count") times, not 2"
grep -q "the tunnel program ended (exit status 137" "$tmp/tun.err" && grep -q "starting it again in 1 s" "$tmp/tun.err" &&
    ok || bad "the agent did not log why and when it restarts the tunnel: $(grep tunnel "$tmp/tun.err")"
grep -q "public address now 127.0.0.1:$P2 (was 127.0.0.1:$P1)" "$tmp/tun.err" && ok || bad "no log of the address change"
port_closed "127.0.0.1:$P1" && ok || bad "the old tunnel port still accepts connections"
prompt_check a2
grep -q "127.0.0.1:$P2" "$tmp/a2.route" && ok || bad "the route after the restart: $(cat "$tmp/a2.route")"

# stopping the node kills the tunnel's process group
sock2=$(cat "$tmp/tunnel.pid.2")
kill -TERM "$TUN_PID"
for _ in $(seq 1 50); do kill -0 "$sock2" 2>/dev/null || break; sleep 0.1; done
kill -0 "$sock2" 2>/dev/null && bad "socat (pid $sock2) outlived its node" || ok
wait "$TUN_PID" 2>/dev/null
port_closed "127.0.0.1:$P2" && ok || bad "the tunnel port still accepts connections after the node stopped"

# bad uses are refused with the reason
expect 2 "choose one" "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --relay --tunnel "x {port}"
expect 1 "stays on loopback" "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --key "$tmp/x.key" \
    --data "$tmp/dx" --listen 10.1.2.3:7000 --tunnel "x {port}" --speed 1
expect 1 "no capture group" "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --key "$tmp/x.key" \
    --data "$tmp/dx" --listen 127.0.0.1:0 --tunnel "echo at 1.2.3.4:5" --tunnel-pattern 'at \S+' --speed 1
expect 1 "printed no public address" "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --key "$tmp/x.key" \
    --data "$tmp/dx" --listen 127.0.0.1:0 --tunnel "echo no address here; sleep 30" --tunnel-wait-s 2 --speed 1
grep -q "no address here" "$tmp/o" && ok || bad "the error does not show the tunnel's output: $(cat "$tmp/o")"
expect 1 "runs no relay" "$BIN" node --registry "$URL" --token-file "$tmp/a.token" --key "$tmp/x.key" \
    --data "$tmp/dx" --listen 127.0.0.1:0 --relay --speed 1
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
# a node's heartbeats take the node's own token (from its join), not its account's
[ "$(code -X POST -d '{}' -H "Authorization: Bearer $(cat "$tmp/a.token")" "$URL/v1/nodes/1/heartbeat")" = 403 ] &&
    ok || bad "a heartbeat with the account's token was not refused"
PK=$(printf 'ab%.0s' $(seq 1 32))
curl -s -X POST -H "Authorization: Bearer $(cat "$tmp/a.token")" \
    -d "{\"name\":\"fake\",\"pubkey\":\"$PK\",\"addr\":\"127.0.0.1:9\",\"capacity\":1}" "$URL/v1/nodes" >"$tmp/join.json"
FID=$(json 'console.log(o.node_id)' <"$tmp/join.json")
FTOK=$(json 'console.log(o.token)' <"$tmp/join.json")
[ "$(code -X POST -d '{"addr": "no port"}' -H "Authorization: Bearer $FTOK" "$URL/v1/nodes/$FID/heartbeat")" = 400 ] &&
    ok || bad "a heartbeat with a bad addr was not refused: $(cat "$tmp/join.json")"

# ==== (b) nodes through the registry's relay ===================================================
start_bg rel "$BIN" registry --model "$M" --db "$tmp/rel.db" --key "$tmp/rel.key" --shards "$tmp/relseed" \
    "${REGOPT[@]}" --listen 127.0.0.1:0 --relay-listen 127.0.0.1:0
URL=$ADDR
RELAY=$(sed -n 's/^relay on //p' "$tmp/rel.out")
[ -n "$RELAY" ] && ok || bad "the registry did not print its relay address"
ACCT=b
"$BIN" account new b --registry "$URL" -o "$tmp/b.token" >/dev/null 2>&1 || bad "account b"
declare -A pub_of pid_of
for k in 1 2; do
    start_bg "r$k" "$BIN" node --registry "$URL" --token-file "$tmp/b.token" --key "$tmp/r$k.key" \
        --data "$tmp/dr$k" --name "relayed$k" "${NODE[@]}" --relay
    pub_of[$k]=$ADDR
    pid_of[$k]=$PID
    own=$(sed -n 's/.*own server on \([0-9.:]*\) (loopback).*/\1/p' "$tmp/r$k.err")
    [ -n "$ADDR" ] && [ "$ADDR" != "$own" ] && [ "${ADDR%:*}" = "${RELAY%:*}" ] && ok ||
        bad "relayed node $k: public '$ADDR', own server '$own', relay '$RELAY'"
done
wait_for 'o.ready && o.nodes_serving == 2' 60 && ok || bad "2 relayed nodes did not serve: $(status | head -c 1500)"
for k in 1 2; do
    [ "$(addr_of "relayed$k")" = "${pub_of[$k]}" ] && ok || bad "the registry lists '$(addr_of "relayed$k")' for relayed$k, not ${pub_of[$k]}"
done
prompt_check b1
grep -q "${pub_of[1]}" "$tmp/b1.route" && grep -q "${pub_of[2]}" "$tmp/b1.route" && ok ||
    bad "the route does not go through the relay: $(cat "$tmp/b1.route")"

# ==== (c) hostile clients of the relay ==========================================================
timeout 40 node "$LIB/relay_hostile.js" "$RELAY" "${pub_of[1]}" "$tmp/flooding" \
    >"$tmp/hostile.json" 2>"$tmp/hostile.err" &
hostile=$!
for _ in $(seq 1 200); do [ -e "$tmp/flooding" ] && break; sleep 0.1; done
[ -e "$tmp/flooding" ] && ok || bad "relay_hostile.js did not start its floods: $(cat "$tmp/hostile.err")"
prompt_check c0 # while idle connections flood both ports: real peers still get through
wait $hostile || bad "relay_hostile.js failed: $(cat "$tmp/hostile.err")"
h() { json "$1" <"$tmp/hostile.json"; }
for c in garbage bad_magic bad_kind bad_reserved forged_cookie pong_first truncated_closed; do
    h "const c = o.$c; process.exit(c.how != 'timeout' && c.ms < 2000 && c.bytes <= 40 ? 0 : 1)" && ok ||
        bad "$c was not closed at once: $(h "console.log(JSON.stringify(o.$c))")"
done
for c in truncated silent; do # an incomplete hello is closed after 5 s
    h "const c = o.$c; process.exit(c.how != 'timeout' && c.ms >= 4500 && c.ms < 7500 ? 0 : 1)" && ok ||
        bad "$c was not closed after the 5 s hello limit: $(h "console.log(JSON.stringify(o.$c))")"
done
h 'process.exit(/proof does not match/.test(o.wrong_proof.refusal) ? 0 : 1)' && ok || bad "wrong proof: $(h 'console.log(JSON.stringify(o.wrong_proof))')"
h 'process.exit(/not known/.test(o.unknown_node.refusal) ? 0 : 1)' && ok || bad "unknown node: $(h 'console.log(JSON.stringify(o.unknown_node))')"
h 'process.exit(o.node_zero.refusal && o.huge_node.refusal ? 0 : 1)' && ok || bad "node id 0 / 2^64-1 not refused with a reason"
h 'process.exit(o.public_garbage.how != "timeout" ? 0 : 1)' && ok || bad "garbage through a public port was not closed: $(h 'console.log(JSON.stringify(o.public_garbage))')"
h 'const f = o.relay_flood; process.exit(f.closed == f.n && f.closed_fast >= 100 ? 0 : 1)' &&
    ok || bad "relay port flood: $(h 'console.log(JSON.stringify(o.relay_flood))')"
h 'const f = o.public_flood; process.exit(f.held <= 64 && f.closed_fast >= f.n - 64 ? 0 : 1)' &&
    ok || bad "public port flood: $(h 'console.log(JSON.stringify(o.public_flood))')"
echo "hostile clients: $(cat "$tmp/hostile.json")"
for k in 1 2; do
    grep -q "connecting again" "$tmp/r$k.err" && bad "relayed$k lost its relay connection: $(grep relay: "$tmp/r$k.err")" || ok
done
wait_for 'o.ready && o.nodes_serving == 2' 20 && ok || bad "the relayed nodes stopped serving"
prompt_check c1
# a new node still joins through the relay; a node that leaves frees its port
start_bg r3 "$BIN" node --registry "$URL" --token-file "$tmp/b.token" --key "$tmp/r3.key" \
    --data "$tmp/dr3" --name relayed3 "${NODE[@]}" --relay
[ "${ADDR%:*}" = "${RELAY%:*}" ] && ok || bad "a third node got no relay address after the hostile clients: $(cat "$tmp/r3.err")"
kill -TERM "${pid_of[2]}"
wait "${pid_of[2]}" 2>/dev/null
for _ in $(seq 1 50); do port_closed "${pub_of[2]}" && break; sleep 0.1; done
port_closed "${pub_of[2]}" && ok || bad "the port of a node that left (${pub_of[2]}) still accepts connections"

# every process stops cleanly, with nothing for the sanitizers to report (ASan build)
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()
if grep -l "Sanitizer\|runtime error" "$tmp"/*.err >/dev/null 2>&1; then
    bad "sanitizer reports: $(grep -h -A8 "Sanitizer\|runtime error" "$tmp"/*.err | head -40)"
else
    ok
fi

finish
