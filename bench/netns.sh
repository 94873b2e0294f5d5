#!/usr/bin/env bash
# netns.sh - the data-plane benchmark across network namespaces: per-hop
# overhead of a 7168-wide hidden state (requester -> N stages -> requester,
# N = 1, 2, 4; f32 and bf16; stages called in turn and chained) against the
# in-process forward of the same layers, and aggregate tokens/s of 1, 4 and
# 16 sessions through a 4-stage pipeline, measured side by side in one run
# (build/bench_dataplane takes turns token by token) four ways:
#   loopback     `moontail node` processes on 127.0.0.1 in the requester's namespace
#   netns        nodes in 4 host namespaces on a bridge (veth pairs), no delay
#   netns+r0     the same nodes, each behind a bench_delay_relay with no delay
#                (what the relay itself costs on this path)
#   netns+0.1ms  each behind a relay delaying every chunk 0.1 ms each way,
#                like `netem delay 0.1ms` on each link (the kernel may lack netem);
#                relays run SCHED_FIFO so that, like netem, a busy CPU does
#                not hold their timing up
# Before that, bench_pingpong measures the relay alone: round trips of 64-byte
# and 28 KB messages to an echo server directly, through a 0 ms and a 0.1 ms
# relay. After it, how late the 0.1 ms relays forwarded chunks.
#
#   sudo bench/netns.sh            (after: cmake --build build)
# Root only; without namespaces it prints "SKIP: ..." and exits 0. Builds
# nothing: uses $MT_BUILD (default build/). Takes about 2 minutes on 2 cores.
# Traffic stays on loopback and inside the namespaces it creates (addresses
# 10.231.X.0/24 on a bridge inside the requester's namespace); every process
# and namespace is removed on exit, also on failure or ^C. Environment:
# TOKENS (timed tokens per latency case, default 64), ROUNDS (concurrency
# rounds, default 3), RELAY_SPIN (bench_delay_relay --spin in us, default 20).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MT_BUILD:-$SRC/build}
for b in moontail bench_dataplane bench_delay_relay bench_pingpong; do
    [ -x "$BUILD/$b" ] || {
        echo "bench/netns.sh: $BUILD/$b is missing; build first (cmake --build build)" >&2
        exit 1
    }
done
export MT_BIN=$BUILD/moontail
. "$SRC/tests/lib/harness.bash"
NETNS_PREFIX="mtb$$"
. "$SRC/tests/lib/netns.bash"
extra_cleanup() { netns_cleanup; }
trap 'exit 1' INT TERM HUP
t_start=$SECONDS
T="timeout 60"
TOKENS=${TOKENS:-64}
ROUNDS=${ROUNDS:-3}
RELAY_SPIN=${RELAY_SPIN:-20}
LIFE=400 # seconds any helper server lives at most

die() {
    echo "bench/netns.sh: $*" >&2
    exit 1
}
# interruptible CMD...: CMD in the background, waited for, so that a signal to this
# script ends it at once (bash runs traps only between foreground commands)
interruptible() {
    "$@" &
    pids+=("$!")
    wait "$!"
}

if ! netns_setup 4; then
    echo "SKIP: network namespaces not available ($why)"
    exit 0
fi
echo "netns: requester in $R, stage hosts ${N[*]} (${IP[*]}) on a bridge"

# ---- the model, its shards and the keys
$T "$BUILD/bench_dataplane" --write-model "$tmp/m.gguf" || die "writing the model"
for n in 1 2 4; do
    $T "$BIN" split "$tmp/m.gguf" --plan "cell:$n" -o "$tmp/cell$n" >/dev/null || die "split cell:$n"
done
req=$($T "$BIN" keygen -o "$tmp/req.key") || die "keygen"
nodekey=$($T "$BIN" keygen -o "$tmp/node.key") || die "keygen"
# chained stages call each other with the node key
printf '%s requester\n%s node\n' "$req" "$nodekey" >"$tmp/auth"

# node NAME NS IP SHARD: a node listening on IP:0 (sets ADDR)
node() {
    bg "$1" "$2" "$BIN" node --listen "$3:0" --threads 1 --ctx 256 --quiet \
        --key "$tmp/node.key" --authorized "$tmp/auth" --shard "$4" || die "node $1 did not start"
}
# relay NAME NS IP TARGET DELAY_MS: a delay relay on IP:0 (sets ADDR)
relay() {
    bg "$1" "$2" "$BUILD/bench_delay_relay" --listen "$3:0" --target "$4" --delay "$5" \
        --spin "$RELAY_SPIN" --realtime --lifetime "$LIFE" || die "relay $1 did not start"
}
# route FILE ADDR...: a route file through these stages (the head of cell:4's split)
route() {
    local f=$1 sep="" peers=""
    shift
    for a in "$@"; do
        peers="$peers$sep{\"addr\": \"$a\", \"key\": \"$nodekey\"}"
        sep=", "
    done
    echo "{\"head\": \"$tmp/cell4/m-head-0.gguf\", \"key\": \"$tmp/req.key\", \"stages\": [$peers]}" >"$f"
}

# ---- nodes: stage k of an N-stage pipeline on host k+1; the loopback ones in the requester's namespace
routes=()
for n in 1 2 4; do
    lo=() ns=() r0=() rd=()
    for k in $(seq 0 $((n - 1))); do
        h=$((k + 1)) shard="$tmp/cell$n/m-stage-$k.gguf"
        node "lo$n-$k" "$R" 127.0.0.1 "$shard"
        lo+=("$ADDR")
        node "ns$n-$k" "${N[$h]}" "${IP[$h]}" "$shard"
        target=$ADDR
        ns+=("$ADDR")
        relay "r0-$n-$k" "${N[$h]}" "${IP[$h]}" "$target" 0
        r0+=("$ADDR")
        relay "rd-$n-$k" "${N[$h]}" "${IP[$h]}" "$target" 0.1
        rd+=("$ADDR")
    done
    route "$tmp/lo$n.json" "${lo[@]}"
    route "$tmp/ns$n.json" "${ns[@]}"
    route "$tmp/r0$n.json" "${r0[@]}"
    route "$tmp/rd$n.json" "${rd[@]}"
    routes+=(--route "loopback=$tmp/lo$n.json" --route "netns=$tmp/ns$n.json"
        --route "netns+r0=$tmp/r0$n.json" --route "netns+0.1ms=$tmp/rd$n.json")
done
echo "nodes: 7 on loopback, 7 on the hosts, 14 relays; setup took $((SECONDS - t_start)) s"

# ---- the relay alone: an echo server on host 4, reached from the requester's namespace
bg echo "${N[4]}" "$BUILD/bench_pingpong" --echo "${IP[4]}:0" --lifetime "$LIFE" || die "echo server"
echo_addr=$ADDR
relay pr0 "${N[4]}" "${IP[4]}" "$echo_addr" 0
p0=$ADDR
relay prd "${N[4]}" "${IP[4]}" "$echo_addr" 0.1
pd=$ADDR
bg echo-lo "$R" "$BUILD/bench_pingpong" --echo 127.0.0.1:0 --lifetime "$LIFE" || die "echo server"
echo_lo=$ADDR
echo
echo "== relay cost: TCP round trips from the requester's namespace to an echo server on host 4"
for size in 64 28719; do # 28719: one f32 STAGE_FORWARD frame of 7168 floats
    count=$([ $size -gt 64 ] && echo 500 || echo 2000)
    interruptible inns "$R" $T "$BUILD/bench_pingpong" --size "$size" --count "$count" "netns direct=$echo_addr" \
        "netns+r0=$p0" "netns+0.1ms=$pd" "loopback direct=$echo_lo" || die "ping-pong"
done
echo "(netns+0.1ms - netns+r0 should be 200 us: 0.1 ms each way; the rest is relay wake-up lateness)"

# ---- the benchmark, all four ways in turn
echo
echo "== bench_dataplane from the requester's namespace (nodes: 1 compute thread each)"
t_bench=$SECONDS
interruptible inns "$R" timeout 300 "$BUILD/bench_dataplane" --model "$tmp/m.gguf" --tokens "$TOKENS" \
    --rounds "$ROUNDS" "${routes[@]}" || die "bench_dataplane failed"
echo "(bench_dataplane took $((SECONDS - t_bench)) s)"

# ---- how precisely the 0.1 ms relays kept time (each writes a line per closed connection)
for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
pids=()
# "... late by median A us, p99 B us (up), C us, D us (down)"
late=$(cat "$tmp"/rd-*.err | grep -v " 0 chunks" |
    sed -n 's/.*late by median \([0-9]*\) us, p99 \([0-9]*\) us (up), \([0-9]*\) us, \([0-9]*\) us (down)/\1 \2\n\3 \4/p')
med() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
if [ -n "$late" ]; then
    echo "0.1 ms relays, $(cat "$tmp"/rd-*.err | grep -c "late by") connections (both directions):" \
        "chunks left a median $(echo "$late" | cut -d' ' -f1 | med) us after they were due;" \
        "99th percentile: median $(echo "$late" | cut -d' ' -f2 | med) us, worst" \
        "$(echo "$late" | cut -d' ' -f2 | sort -n | tail -1) us (999 = 1 ms or more)"
fi
echo "total $((SECONDS - t_start)) s"
