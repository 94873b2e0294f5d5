#!/usr/bin/env bash
# test_spotcheck_cli.sh - spot-checking end to end (docs/spot-checking.md), every
# part its own process on 127.0.0.1: a registry (cell, 2 replicas, 1 spare, an
# admin token) and 5 nodes, one started with --misbehave corrupt-output (testing
# only: it flips bits in every output it returns). Checks:
#   - --spot-check 0 through the corrupting node gives other tokens than
#     `moontail run` (the fault is real);
#   - --spot-check 1 finds it: the requester reports both nodes, the registry's
#     own check finds the corrupting one wrong and quarantines it (status, its
#     text, /metrics), and the tokens equal `run`'s; prints the detection
#     latency (outputs and ms from the node's first corrupted output in that
#     request to the requester's comparison);
#   - the spare takes the quarantined node's shard; then 4 prompts with every
#     stage checked on honest nodes: checks compared, no mismatch, no report,
#     nobody else quarantined, `run`'s tokens each time;
#   - the node's own log says it is quarantined, and later released;
#   - `cell release` refuses another token, releases with the admin token;
#   - bad --spot-check and --misbehave values exit 2 with a message.
# The cell runs a bf16 KV cache (registry --kv-type bf16, handed to every node): the
# reference is `run --kv-type bf16`, and replicas, checkers and the registry's own
# check must all compute with it to agree bit for bit.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
cd "$tmp"

status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 4 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 3 >/dev/null || bad "mkmodel"
cap_mb=$(($(stat -c %s "$M") * 6 / 10 / 1000000 + 1)) # each node holds about half the layers
PROMPT="Every node is checked now and then"
$T "$BIN" run -m "$M" -p "$PROMPT" -n 24 --temp 0 --ignore-eos --kv-type bf16 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")

# ---- bad option values
expect 2 "fraction in \[0, 1\]" "$BIN" prompt --registry http://127.0.0.1:9 --token x -p hi --spot-check 2
expect 2 "fraction in \[0, 1\]" "$BIN" prompt --registry http://127.0.0.1:9 --token x -p hi --spot-check -0.5
expect 2 "needs --registry" "$BIN" prompt --route "$tmp/none.json" -p hi --spot-check 0.5
expect 2 "fraction in \[0, 1\]" "$BIN" serve --registry http://127.0.0.1:9 --token x --no-auth --spot-check 7
expect 2 "corrupt-output\[:RATE\]" "$BIN" node --registry http://127.0.0.1:9 --token x --misbehave flip
expect 2 "corrupt-output\[:RATE\]" "$BIN" node --registry http://127.0.0.1:9 --token x --misbehave corrupt-output:0
expect 2 "corrupt-output\[:RATE\]" "$BIN" node --shard "$M" --key k --authority x --misbehave corrupt-output:1.5

# ---- registry, account, nodes (node 2 corrupts every output)
echo "operator-secret" >"$tmp/admin.token"
start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" \
    --replicas 2 --spares 1 --heartbeat-ms 200 --dead-after-ms 1500 --kv-type bf16 \
    --admin-token-file "$tmp/admin.token" --listen 127.0.0.1:0
URL=$ADDR
expect 0 "token in" "$BIN" account new cafe --registry "$URL" --admin-token-file "$tmp/admin.token" \
    -o "$tmp/cafe.token"
declare -A node_addr
start_node() { # k [extra options]
    local k=$1
    shift
    start_bg "n$k" "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "pc$k" --capacity-mb "$cap_mb" --speed 1 \
        --threads 1 "$@"
    node_addr[$k]=$ADDR
}
for k in 1 2 3 4; do
    if [ "$k" = 2 ]; then start_node 2 --misbehave corrupt-output; else start_node "$k"; fi
done
wait_for 'o.min_replicas_serving >= 2' 60 && ok || bad "4 nodes did not make 2 pipelines: $(status | head -c 1500)"
start_node 5 # the spare
wait_for 'o.spares >= 1 && o.nodes_alive == 5' 30 && ok || bad "no spare: $(status | head -c 1500)"
status | json 'process.exit(o.kv_type == "bf16" ? 0 : 1)' && ok || bad "status does not say the bf16 cache"
grep -q "bf16 KV cache" "$tmp/n1.err" && ok || bad "node 1 does not run the cell's bf16 cache: $(tail -3 "$tmp/n1.err")"
badaddr=${node_addr[2]}
bad_id=$(status | json "const n=o.nodes.find(n=>n.addr=='$badaddr'); console.log(n ? n.node_id : '')")
[ -n "$bad_id" ] && status | json "process.exit(o.nodes.find(n=>n.node_id==$bad_id).state=='serving'?0:1)" &&
    ok || bad "the corrupting node does not serve a stage: $(status | head -c 1500)"

P=(prompt --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache"
    -p "$PROMPT" -n 24 --temp 0 --ignore-eos --json)

# ---- without checks, a route through the corrupting node gives other tokens
through_bad=""
for i in $(seq 1 30); do # each request picks a pipeline at random: 2^-30 to miss it every time
    $T "$BIN" "${P[@]}" --spot-check 0 >"$tmp/p0.json" 2>"$tmp/p0.err" || bad "prompt without checks failed: $(cat "$tmp/p0.err")"
    if grep -q "route: .*$badaddr\[" "$tmp/p0.err"; then
        through_bad=$i
        break
    fi
done
if [ -n "$through_bad" ]; then
    [ "$(tokens <"$tmp/p0.json")" != "$ref" ] && ok || bad "the corrupting node's route gave run's tokens: the fault is not real"
    json 'process.exit(o.spot_check.checks === 0 && o.spot_check.reports === 0 ? 0 : 1)' <"$tmp/p0.json" &&
        ok || bad "--spot-check 0 checked something: $(cat "$tmp/p0.json")"
else
    bad "30 requests never went through the corrupting node"
fi
status | json 'process.exit(o.nodes_quarantined === 0 ? 0 : 1)' && ok || bad "a node was quarantined without checks"

# ---- every stage checked: the corrupting node is found, quarantined, and the text is right
lines_before=$(wc -l <"$tmp/n2.err")
$T "$BIN" "${P[@]}" --spot-check 1 >"$tmp/p1.json" 2>"$tmp/p1.err" || bad "checked prompt failed: $(cat "$tmp/p1.err")"
[ "$(tokens <"$tmp/p1.json")" = "$ref" ] && ok || bad "checked prompt's tokens differ from run's: $(cat "$tmp/p1.err")"
grep -q "spot check: node .* computed layers" "$tmp/p1.err" && ok || bad "no mismatch found: $(cat "$tmp/p1.err")"
grep -q "the registry's own check: confirmed (.*node $bad_id wrong" "$tmp/p1.err" && ok ||
    bad "the registry did not find node $bad_id wrong: $(cat "$tmp/p1.err")"
json 'process.exit(o.spot_check.mismatches >= 1 && o.spot_check.confirmed >= 1 ? 0 : 1)' <"$tmp/p1.json" &&
    ok || bad "the JSON does not count the mismatch: $(cat "$tmp/p1.json")"
grep "^[^ ]* [a-z]* requester: spot check" "$tmp/p1.err"
# detection latency: from the node's first corrupted output in this request to the comparison
det=$(sed -n 's/.*positions \[\([0-9]*\), \([0-9]*\)) differently.*at unix ms \([0-9]*\)).*/\1 \2 \3/p' "$tmp/p1.err" | head -1)
tail -n +"$((lines_before + 1))" "$tmp/n2.err" | sed -n 's/.*corrupted the output of session [0-9a-f]* positions \[\([0-9]*\), \([0-9]*\)) at unix ms \([0-9]*\)/\1 \2 \3/p' >"$tmp/corrupt.txt"
if [ -n "$det" ] && [ -s "$tmp/corrupt.txt" ]; then
    read -r dp dq dms <<<"$det"
    read -r _ _ first_ms <"$tmp/corrupt.txt"
    outputs=$(awk -v p="$dp" -v q="$dq" '$1 == p && $2 == q { print NR - 1; exit }' "$tmp/corrupt.txt")
    echo "detection: ${outputs:-?} corrupted outputs before the one detected (positions [$dp, $dq)), $((dms - first_ms)) ms from the node's first corrupted output"
    ok
else
    bad "no detection line or no corrupted output logged: det='$det' $(head -3 "$tmp/corrupt.txt")"
fi
status | json "process.exit(o.nodes.find(n=>n.node_id==$bad_id).state=='quarantined' && o.nodes_quarantined===1 && o.reports.confirmed===1 ? 0 : 1)" &&
    ok || bad "node $bad_id is not quarantined: $(status | head -c 1500)"
expect 0 "quarantined: computed layers" "$BIN" status --registry "$URL"
in_log() { # FILE PATTERN: within 10 s
    for _ in $(seq 1 50); do grep -q "$2" "$1" && return 0; sleep 0.2; done
    return 1
}
in_log "$tmp/n2.err" "the registry quarantined this node" && ok || bad "the node was not told it is quarantined"

curl -s "$URL/metrics" >"$tmp/metrics.txt"
grep -q '^moontail_nodes{state="quarantined"} 1$' "$tmp/metrics.txt" &&
    grep -q "^moontail_node_quarantined{node_id=\"$bad_id\",name=\"pc2\"} 1$" "$tmp/metrics.txt" &&
    grep -q '^moontail_spot_check_reports_total{verdict="confirmed"} 1$' "$tmp/metrics.txt" &&
    ok || bad "/metrics does not show the quarantine: $(grep -i quarant "$tmp/metrics.txt")"

# ---- the spare takes its shard; honest nodes checked again and again: no false positive
wait_for "o.min_replicas_serving >= 2 && o.nodes.find(n=>n.node_id==$bad_id).role=='none'" 30 && ok ||
    bad "the spare did not take the quarantined node's shard: $(status | head -c 1500)"
for i in 1 2 3 4; do
    $T "$BIN" "${P[@]}" --spot-check 1 >"$tmp/h$i.json" 2>"$tmp/h$i.err" || bad "honest prompt $i failed: $(cat "$tmp/h$i.err")"
    [ "$(tokens <"$tmp/h$i.json")" = "$ref" ] && ok || bad "honest prompt $i: tokens differ"
    # (a check dropped because a checker was slow on a loaded machine is not a false positive)
    json 'process.exit(o.spot_check.compared > 0 && o.spot_check.mismatches === 0 && o.spot_check.reports === 0 ? 0 : 1)' <"$tmp/h$i.json" &&
        ok || bad "honest prompt $i: $(json 'console.log(JSON.stringify(o.spot_check))' <"$tmp/h$i.json") $(cat "$tmp/h$i.err")"
    json "process.exit(o.route.includes('$badaddr[') ? 1 : 0)" <"$tmp/h$i.json" && ok || bad "a quarantined node was routed to"
done
json 'console.log("honest prompt: " + o.spot_check.compared + " passes compared, " + o.spot_check.dropped + " checks dropped, route " + o.route)' <"$tmp/h4.json"
status | json 'process.exit(o.nodes_quarantined === 1 && o.reports.total === 1 ? 0 : 1)' && ok ||
    bad "honest nodes were reported or quarantined: $(status | head -c 1500)"

# ---- only the operator releases it
echo "not-the-admin" >"$tmp/wrong.token"
expect 1 "admin token" "$BIN" cell release --registry "$URL" --node "$bad_id" --admin-token-file "$tmp/wrong.token"
expect 1 "admin token" "$BIN" cell release --registry "$URL" --node "$bad_id" --admin-token-file "$tmp/cafe.token"
expect 0 "node $bad_id released" "$BIN" cell release --registry "$URL" --node "$bad_id" --admin-token-file "$tmp/admin.token"
expect 1 "not quarantined" "$BIN" cell release --registry "$URL" --node "$bad_id" --admin-token-file "$tmp/admin.token"
wait_for "o.nodes.find(n=>n.node_id==$bad_id).state != 'quarantined' && o.nodes_quarantined === 0" 10 && ok ||
    bad "the released node is still quarantined: $(status | head -c 1500)"
in_log "$tmp/n2.err" "released from quarantine" && ok || bad "the node was not told it is released"
finish
