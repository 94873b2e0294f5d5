#!/usr/bin/env bash
# test_netns.sh - nodes and routes across separate network stacks. The same
# scenario runs twice: on 127.0.0.1 (always), then with every node in its own
# network namespace behind a bridge, addresses in 10.231.X.0/24 made by this
# test, and the requester in yet another namespace (root only; otherwise a
# "SKIP: network namespaces not available (...)" line and only the loopback
# run counts). Per run: a cell:2 pipeline with one stage behind a 1 ms
# latency relay (tests/lib/latency_relay.mjs) and a swarm:2 plan give the
# same greedy tokens as `moontail run`; a relay that cuts the first
# connection mid-stream makes the requester reconnect and replay, still with
# the same tokens; a stage node killed mid-generation and a dead node give a
# clear error exit, not a hang. Nothing but the test's own namespaces carries
# traffic (no address outside them is used; nothing is added to the root
# namespace). Processes and namespaces are removed on exit, also on failure;
# every command runs under a time limit.
set -u
. "$(dirname "$0")/lib/harness.bash"
RELAY="$(cd "$(dirname "$0")" && pwd)/lib/latency_relay.mjs"
T="timeout 30"
. "$(dirname "$0")/lib/netns.bash"
# the harness kills `pids`; namespaces (and anything left inside) go here
extra_cleanup() { netns_cleanup; }
trap 'exit 1' INT TERM HUP
t_start=$SECONDS

# node NAME NSNAME IP SHARD: a node on IP:0
node_at() {
    bg "$1" "$2" "$BIN" node --listen "$3:0" --threads 1 --key "$tmp/node.key" \
        --authorized "$tmp/auth" --shard "$4"
}
# relay NAME NSNAME IP TARGET ARGS...: a latency relay on IP:0 forwarding to TARGET
relay() {
    local name=$1 ns=$2 ip=$3 target=$4
    shift 4
    bg "$name" "$ns" node "$RELAY" --listen "$ip:0" --target "$target" --lifetime 120 "$@"
}
# route NAME KIND PEER...: a cell (stages) or swarm (experts) route file
route() {
    local name=$1 kind=$2 sep="" peers=""
    shift 2
    for a in "$@"; do
        peers="$peers$sep{\"addr\": \"$a\", \"key\": \"$nodekey\"}"
        sep=", "
    done
    if [ "$kind" = cell ]; then
        echo "{\"head\": \"cell/m-head-0.gguf\", \"key\": \"req.key\", \"stages\": [$peers]}"
    else
        echo "{\"head\": \"swarm/m-backbone-0.gguf\", \"backbone\": \"swarm/m-backbone-0.gguf\","
        echo " \"key\": \"req.key\", \"experts\": [$peers]}"
    fi >"$tmp/$name.json"
}

# ---- the model, keys and shards (shared by both runs)
M="$tmp/m.gguf"
$T "$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 4 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --seed 5 >/dev/null && ok || bad "mkmodel"
req=$($T "$BIN" keygen -o "$tmp/req.key") && ok || bad "keygen requester"
nodekey=$($T "$BIN" keygen -o "$tmp/node.key") && ok || bad "keygen node"
printf '%s requester\n%s node\n' "$req" "$nodekey" >"$tmp/auth"
$T "$BIN" split "$M" --plan cell:2 -o "$tmp/cell" >/dev/null && ok || bad "split cell"
$T "$BIN" split "$M" --plan swarm:2 -o "$tmp/swarm" >/dev/null && ok || bad "split swarm"
P="Hello over the wire"
want=$($T "$BIN" run -m "$M" --json --temp 0 -n 16 -p "$P" 2>/dev/null | tokens)
[ -n "$want" ] && ok || bad "run on the whole model"

# scenario LABEL REQ_NS NS1 IP1 NS2 IP2 NS3 IP3 NS4 IP4: the requester runs in
# REQ_NS; cell stages in NS1 and NS2, expert servers in NS3 and NS4
scenario() {
    local L=$1 rq=$2 n1=$3 ip1=$4 n2=$5 ip2=$6 n3=$7 ip3=$8 n4=$9 ip4=${10}
    local t0=$SECONDS c0 c0pid c1 r1 x0 x1 rx cut slow got rc RQ=()
    [ -n "$rq" ] && RQ=(ip netns exec "$rq") # the requester's command prefix
    node_at "$L-c0" "$n1" "$ip1" "$tmp/cell/m-stage-0.gguf" && c0=$ADDR c0pid=$PID || return
    node_at "$L-c1" "$n2" "$ip2" "$tmp/cell/m-stage-1.gguf" && c1=$ADDR || return
    node_at "$L-x0" "$n3" "$ip3" "$tmp/swarm/m-experts-0.gguf" && x0=$ADDR || return
    node_at "$L-x1" "$n4" "$ip4" "$tmp/swarm/m-experts-1.gguf" && x1=$ADDR || return
    relay "$L-r1" "$n2" "$ip2" "$c1" --delay 1 && r1=$ADDR || return
    relay "$L-rx" "$n4" "$ip4" "$x1" --delay 1 && rx=$ADDR || return

    # cell: stage 0 direct, stage 1 behind the 1 ms relay
    route "$L-cell" cell "$c0" "$r1"
    local t1
    t1=$(date +%s%N)
    got=$($T "${RQ[@]+"${RQ[@]}"}" "$BIN" prompt --route "$tmp/$L-cell.json" --json --temp 0 -n 16 -p "$P" 2>"$tmp/e" | tokens)
    echo "$L: cell route (1 ms relay on stage 1): $((($(date +%s%N) - t1) / 1000000)) ms"
    [ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "$L: cell tokens '$got' differ from run's '$want': $(cat "$tmp/e")"
    grep -q "bytes up" "$tmp/$L-r1.err" && ok || bad "$L: the cell route did not go through the relay"

    # swarm: expert server 1 behind the 1 ms relay
    route "$L-swarm" swarm "$x0" "$rx"
    t1=$(date +%s%N)
    got=$($T "${RQ[@]+"${RQ[@]}"}" "$BIN" prompt --route "$tmp/$L-swarm.json" --json --temp 0 -n 16 -p "$P" 2>"$tmp/e" | tokens)
    echo "$L: swarm route (1 ms relay on experts 1): $((($(date +%s%N) - t1) / 1000000)) ms"
    [ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "$L: swarm tokens '$got' differ from run's '$want': $(cat "$tmp/e")"

    # a cut: the first connection to stage 0 is closed mid-generation (the
    # prompt pass is ~20 KB both ways, each token ~1 KB more); the requester
    # reconnects, replays the history and still gives the same tokens
    relay "$L-cut" "$n1" "$ip1" "$c0" --delay 1 --cut-after 24000 && cut=$ADDR || return
    route "$L-cutr" cell "$cut" "$r1"
    $T "${RQ[@]+"${RQ[@]}"}" "$BIN" prompt --route "$tmp/$L-cutr.json" --json --temp 0 -n 16 -p "$P" >"$tmp/o" 2>"$tmp/e"
    got=$(tokens <"$tmp/o")
    [ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "$L: tokens after a cut '$got' differ from '$want': $(cat "$tmp/e")"
    grep -q ", cut" "$tmp/$L-cut.err" && ok || bad "$L: the relay did not cut: $(cat "$tmp/$L-cut.err")"
    local replays
    replays=$(json 'console.log(o.replays)' <"$tmp/o" 2>/dev/null)
    [ "${replays:-0}" -ge 1 ] 2>/dev/null && ok || bad "$L: no replay after the cut: $(head -c 300 "$tmp/o")"
    echo "$L: cut relay: $(grep -c . "$tmp/$L-cut.err") connections ($(grep ', cut' "$tmp/$L-cut.err" | sed 's/^latency_relay: //')), $replays replay(s)"

    # stage 0 killed mid-generation (the prompt stops itself at position 50, past the
    # prompt, while the node dies): a clear error, no hang
    relay "$L-slow" "$n2" "$ip2" "$c1" --delay 5 && slow=$ADDR || return
    route "$L-slowr" cell "$c0" "$slow"
    t1=$(date +%s%N)
    MOONTAIL_TEST_PAUSE_AT_POSITION=50 $T "${RQ[@]+"${RQ[@]}"}" "$BIN" prompt --route "$tmp/$L-slowr.json" \
        --temp 0 -n 400 --ignore-eos -p "$P" >"$tmp/o" 2>"$tmp/e" &
    local ppid=$!
    if wait_stopped "$ppid"; then
        { kill -9 "$c0pid" && wait "$c0pid"; } 2>/dev/null
        kill -CONT "$STOPPED"
        wait "$ppid"
        rc=$?
        echo "$L: node killed mid-way after $(wc -c <"$tmp/o") bytes of text; prompt exit $rc" \
            "$((($(date +%s%N) - t1) / 1000000)) ms after it started: $(head -c 300 "$tmp/e")"
        [ $rc -eq 1 ] && grep -q "$c0" "$tmp/e" && ok || bad "$L: killed node: exit $rc (wanted 1, 124 = hung), '$(cat "$tmp/e")'"
    else
        wait "$ppid"
        bad "$L: the prompt did not stop at position 50: $(head -c 300 "$tmp/e")"
        { kill -9 "$c0pid" && wait "$c0pid"; } 2>/dev/null
    fi
    # and a route to the dead node fails at once
    t1=$(date +%s%N)
    $T "${RQ[@]+"${RQ[@]}"}" "$BIN" prompt --route "$tmp/$L-cell.json" --temp 0 -n 4 -p "$P" >/dev/null 2>"$tmp/e"
    rc=$?
    [ $rc -eq 1 ] && grep -q "$c0" "$tmp/e" && ok || bad "$L: dead node: exit $rc, '$(cat "$tmp/e")'"
    echo "$L: route to a dead node failed in $((($(date +%s%N) - t1) / 1000000)) ms: $(head -c 200 "$tmp/e")"
    echo "$L: scenario took $((SECONDS - t0)) s"
}

# ---- 1. loopback, always
scenario lo "" "" 127.0.0.1 "" 127.0.0.1 "" 127.0.0.1 "" 127.0.0.1

# ---- 2. namespaces: the requester's namespace holds the bridge, each node
# namespace one end of a veth pair whose other end is on the bridge
if netns_setup 4; then
    echo "netns: requester in $R, nodes in ${N[*]} (${IP[*]})"
    scenario ns "$R" "${N[1]}" "${IP[1]}" "${N[2]}" "${IP[2]}" "${N[3]}" "${IP[3]}" "${N[4]}" "${IP[4]}"
else
    echo "SKIP: network namespaces not available ($why); only the loopback run counted"
fi
echo "total $((SECONDS - t_start)) s"
finish
