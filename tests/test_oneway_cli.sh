#!/usr/bin/env bash
# test_oneway_cli.sh - one-way passes (`--chain`, proto.h) through a registry's
# three-stage pipelines, every part its own process on 127.0.0.1: a registry
# (cell mode, 2 replicas) and 10 nodes each offering room for about a third
# of a 6-layer model (pipelines of 3 stages, 4 for kimi-k3's uneven layers;
# the rest spares). Checks:
#   - `moontail prompt --chain` gives the tokens `moontail run` gives (each
#     stage sends its output straight to the next, the last one answers);
#   - a 600-token chained generation whose route's stage 1 (a middle one) is killed with
#     SIGKILL at position 100 gives the same text: the stage before it cannot
#     reach it, the last stage answers the requester with the abort naming it,
#     and the requester recovers on the other pipeline (replaying the session);
#   - once a spare restored 2 pipelines, the same with the new route's stage 1
#     frozen (SIGSTOP: its connections stay open, it just says nothing): the
#     last stage's answer never comes, the requester's adaptive wait runs out,
#     it asks every stage for its INFO at once, names the silent one and
#     recovers on a route without it, with the same text.
set -u
. "$(dirname "$0")/lib/harness.bash"
. "$(dirname "$0")/lib/long_prompt.bash"
T="timeout 60"
cd "$tmp"

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 6 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 5 >/dev/null || bad "mkmodel"
# each node can hold about a third of the layers: pipelines of 3 stages
cap_mb=$(($(stat -c %s "$M") * 3 / 10 / 1000000 + 1))
PROMPT="Each stage passes its rows straight on"
$T "$BIN" run -m "$M" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")
$T "$BIN" run -m "$M" -p "$PROMPT" -n 600 --temp 0 --ignore-eos >"$tmp/ref_long.txt" 2>/dev/null || bad "long reference"

REG=(registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed"
    --replicas 2 --heartbeat-ms 200 --dead-after-ms 1500)
start_bg reg "$BIN" "${REG[@]}" --listen 127.0.0.1:0
URL=$ADDR
expect 0 "token in" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token"
declare -A node_pid node_addr
for k in 1 2 3 4 5 6 7 8 9 10; do
    start_bg "n$k" "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "pc$k" --capacity-mb "$cap_mb" \
        --speed 1 --threads 1
    node_pid[$k]=$PID
    node_addr[$k]=$ADDR
done
wait_for 'o.min_replicas_serving >= 2 && o.nodes_alive == 10 && o.pipelines.every(p => p.stages >= 3)' 60 &&
    ok || bad "10 nodes did not make 2 pipelines of 3 or more stages: $(status | head -c 1500)"

P=(prompt --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache")
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json --chain >"$tmp/pc.json" 2>"$tmp/pc.err" ||
    bad "prompt --chain: $(cat "$tmp/pc.err")"
[ "$(tokens <"$tmp/pc.json" 2>/dev/null)" = "$ref" ] && ok ||
    bad "one-way registry prompt tokens differ: $(cat "$tmp/pc.err")"

# ---- the route's middle stage killed mid-generation (600 tokens stopped at position 100)
long_prompt long 300 --chain
route=$ROUTE
read -r -a hops <<<"$route"
middle=${hops[1]:-}
middle=${middle%%\[*}
victim=""
for k in 1 2 3 4 5 6 7 8 9 10; do [ -n "$middle" ] && [ "${node_addr[$k]}" = "$middle" ] && victim=$k; done
if [ -n "$victim" ] && [ "${#hops[@]}" -ge 3 ]; then
    { kill -9 "${node_pid[$victim]}" && wait "${node_pid[$victim]}"; } 2>/dev/null
else
    bad "could not find stage 1 of a route of 3 or more stages ($route)"
fi
resume_prompt
wait $PPID_ && ok || bad "one-way prompt after its middle node died failed: $(tail -5 "$tmp/long.err")"
cmp -s "$tmp/long.txt" "$tmp/ref_long.txt" && ok || bad "text after the failover differs from the local run"
grep -q "recovered on a new route" "$tmp/long.err" && ok || bad "no failover happened: $(cat "$tmp/long.err")"
# the node that was avoided is the one killed: named by the abort (or the probe)
grep -q "stage 1 (${middle}" "$tmp/long.err" && ok ||
    bad "the failure does not name the middle stage $middle: $(grep -i "fail" "$tmp/long.err" | head -5)"
sed -n 's/^[^ ]* [a-z]* requester: \(recovered.*\)/one-way failover: \1/p' "$tmp/long.err"

# ---- a silent stage 1 (SIGSTOP), once a spare made 2 pipelines again
frozen=""
wait_for 'o.min_replicas_serving >= 2 && o.nodes_alive == 9 && o.pipelines.every(p => p.stages >= 3)' 60 &&
    ok || bad "the killed node was not seen dead and replaced: $(status | head -c 1500)"
long_prompt stop 300 --chain
route=$ROUTE
read -r -a hops <<<"$route"
middle=${hops[1]:-}
middle=${middle%%\[*}
for k in 1 2 3 4 5 6 7 8 9 10; do [ -n "$middle" ] && [ "${node_addr[$k]}" = "$middle" ] && frozen=${node_pid[$k]}; done
if [ -n "$frozen" ] && [ "${#hops[@]}" -ge 3 ]; then
    kill -STOP "$frozen"
else
    bad "could not find stage 1 of a route of 3 or more stages ($route)"
fi
resume_prompt
wait $PPID_ && ok || bad "one-way prompt with a silent stage failed: $(tail -5 "$tmp/stop.err")"
[ -n "$frozen" ] && kill -CONT "$frozen" # (a stopped process would hold up the cleanup's wait)
cmp -s "$tmp/stop.txt" "$tmp/ref_long.txt" && ok || bad "text after the silent stage differs from the local run"
grep -q "did not answer: stage 1 (${middle})" "$tmp/stop.err" && ok ||
    bad "the probe did not name the silent stage $middle: $(grep -i "fail" "$tmp/stop.err" | head -5)"
sed -n 's/^[^ ]* [a-z]* requester: \(recovered.*\)/silent stage failover: \1/p' "$tmp/stop.err"
finish
