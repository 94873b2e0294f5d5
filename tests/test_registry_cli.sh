#!/usr/bin/env bash
# test_registry_cli.sh - the control plane end to end, every part its own
# process on 127.0.0.1: a registry (cell mode, 2 replicas, 1 spare) and 5
# nodes that join it with an account token, each offering room for about
# half the model. Checks:
#   - join -> full coverage with 2 replicas serving, and one spare;
#   - `moontail prompt --registry` gives the tokens `moontail run` gives, also
#     with --chain (the stages pass each pass along);
#   - killing a node that serves the route while it generates leaves the
#     output unchanged (the requester fails over and replays; recovery time
#     printed), and the spare restores 2 replicas; the same in a chain whose
#     last stage is killed, after which a sixth node joins; through `serve`,
#     whose answer's usage then reports the failover and its recovery time;
#   - a paused node gets no new work and is not routed to;
#   - with --max-active 1 a second request waits in line and is told its place;
#   - a registry restart loses no node, ledger row or credit;
#   - `moontail cell earnings` reports served tokens per node from the ledger;
#   - swarm mode with --require-volunteer refuses an account that has not
#     volunteered, saying how to volunteer, and serves one whose node serves;
#     an expert server killed mid-generation leaves the text unchanged;
#   - bad requests get 4xx answers and the registry keeps serving;
#   - --latency-goal-ms: bad values refused, a goal shown by the status and a
#     missed one logged.
set -u
. "$(dirname "$0")/lib/harness.bash"
. "$(dirname "$0")/lib/long_prompt.bash"
T="timeout 60"
cd "$tmp"

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 4 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 3 >/dev/null || bad "mkmodel"
# each node can hold about half of the layers
cap_mb=$(($(stat -c %s "$M") * 6 / 10 / 1000000 + 1))
PROMPT="The cell computes one layer at a time"
$T "$BIN" run -m "$M" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")
$T "$BIN" run -m "$M" -p "$PROMPT" -n 600 --temp 0 --ignore-eos >"$tmp/ref_long.txt" 2>/dev/null || bad "long reference"

# ---- registry, account, nodes
expect 2 "--objective must be throughput, latency or balanced, not 'fast'" \
    "$BIN" registry --model "$M" --db "$tmp/bad.db" --objective fast
# a per-user latency goal: refused when negative, not a number or in a swarm; accepted,
# logged when it is missed, and shown by the status (no node yet: no pipeline meets it)
expect 2 "--latency-goal-ms must be in 0..1e9 ms per token (0: no goal), not -5" \
    "$BIN" registry --model "$M" --db "$tmp/bad.db" --latency-goal-ms -5
expect 2 "--latency-goal-ms expects a number, got 'nan'" \
    "$BIN" registry --model "$M" --db "$tmp/bad.db" --latency-goal-ms nan
expect 2 "--latency-goal-ms expects a number, got 'fast'" \
    "$BIN" registry --model "$M" --db "$tmp/bad.db" --latency-goal-ms fast
expect 2 "--latency-goal-ms applies to --mode cell only" \
    "$BIN" registry --model "$M" --db "$tmp/bad.db" --mode swarm --latency-goal-ms 100
start_bg goalreg "$BIN" registry --model "$M" --db "$tmp/goal.db" --key "$tmp/goal.key" \
    --shards "$tmp/goal-seed" --latency-goal-ms 1500 --listen 127.0.0.1:0
GOAL_PID=$PID
"$BIN" status --registry "$ADDR" --json 2>/dev/null | json '
  if (o.latency_goal_ms !== 1500 || o.latency_goal_met !== false ||
      !/latency goal 1500 ms per token: no complete pipeline/.test(o.latency_goal_note)) process.exit(1)' &&
    ok || bad "the goal in the status: $("$BIN" status --registry "$ADDR" --json 2>&1 | head -c 800)"
grep -q "warn.*registry: placement: latency goal 1500 ms per token: no complete pipeline" "$tmp/goalreg.err" &&
    ok || bad "no warning of the missed goal: $(head -c 800 "$tmp/goalreg.err")"
grep -q "cell mode, at least 2 replicas, throughput objective, latency goal 1500 ms, key" "$tmp/goalreg.err" &&
    ok || bad "no start line with the goal: $(head -c 800 "$tmp/goalreg.err")"
expect 0 "^latency goal 1500 ms per token: no complete pipeline to meet it" \
    "$BIN" status --registry "$ADDR"
kill "$GOAL_PID" && wait "$GOAL_PID" 2>/dev/null
REG=(registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed"
    --replicas 2 --spares 1 --heartbeat-ms 200 --dead-after-ms 1500 --max-active 1)
start_bg reg "$BIN" "${REG[@]}" --listen 127.0.0.1:0
URL=$ADDR
REG_PID=$PID
PORT=${URL##*:}
expect 0 "token in" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token"
declare -A node_pid node_addr
for k in 1 2 3 4 5; do
    start_bg "n$k" "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "pc$k" --capacity-mb "$cap_mb" \
        --speed 1 --threads 1 $([ $k = 3 ] && echo --ctx 2048)
    node_pid[$k]=$PID
    node_addr[$k]=$ADDR
done
wait_for 'o.min_replicas_serving >= 2 && o.spares >= 1 && o.nodes_alive == 5' 60 &&
    ok || bad "5 nodes did not reach 2 serving replicas and a spare: $(status | head -c 1500)"
expect 0 "READY" "$BIN" status --registry "$URL"
# sessions offered: the model's 4096 positions (memory is ample), pc3 was given 2048; a
# pipeline's context is the smallest of its stages'; each node reports the session memory
# it offers and uses (sessions are limited by it, node.h)
status | json '
  for (const n of o.nodes.filter(n => n.state == "serving")) {
    if (n.ctx != (n.name == "pc3" ? 2048 : 4096)) { console.error("ctx of", n.name, n.ctx); process.exit(1); }
    if (!(n.kv_budget > 0 && n.kv_used >= 0 && n.kv_used <= n.kv_budget)) { console.error("kv of", n.name, n.kv_budget, n.kv_used); process.exit(1); }
  }
  for (const p of o.pipelines) {
    const st = o.nodes.filter(n => n.state == "serving" && n.role == "stage" && n.replica == p.replica);
    const want = st.some(n => n.name == "pc3") ? 2048 : 4096;
    if (p.context != want || p.stages != st.length) { console.error("pipeline", JSON.stringify(p)); process.exit(1); }
  }
  if (o.context != 4096) process.exit(1)' &&
    ok || bad "contexts in the status: $(status | head -c 1500)"
expect 0 "context:  pipeline 0 " "$BIN" status --registry "$URL"
cat "$tmp/o"
# nobody fetched the whole model: every node holds one shard smaller than the model
for k in 1 2 3 4 5; do
    for f in "$tmp/d$k"/*.gguf; do
        [ -e "$f" ] || continue
        [ "$(stat -c %s "$f")" -lt "$(stat -c %s "$M")" ] && ok || bad "node $k holds a whole-model file"
    done
done

# ---- a prompt through the registry gives the local tokens
P=(prompt --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache")
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p1.json" 2>"$tmp/p1.err" || bad "prompt: $(cat "$tmp/p1.err")"
got=$(tokens <"$tmp/p1.json" 2>/dev/null)
[ -n "$got" ] && [ "$got" = "$ref" ] && ok || bad "registry prompt tokens differ: $got vs $ref"
# chained: one call per pass to the first stage, which passes it along the others
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json --chain >"$tmp/pc.json" 2>"$tmp/pc.err" || bad "prompt --chain: $(cat "$tmp/pc.err")"
[ "$(tokens <"$tmp/pc.json" 2>/dev/null)" = "$ref" ] && ok || bad "chained registry prompt tokens differ: $(cat "$tmp/pc.err")"

# ---- kill a node of the route mid-generation (600 tokens stopped at position 100, lib/long_prompt.bash):
# same text, failover measured
long_prompt long 300
victim=""
for k in 1 2 3 4 5; do [ "${node_addr[$k]}" = "$FIRST" ] && victim=$k; done
if [ -n "$victim" ]; then
    { kill -9 "${node_pid[$victim]}" && wait "${node_pid[$victim]}"; } 2>/dev/null
    t_kill=$(date +%s.%N)
else
    bad "could not find the route's first node ($ROUTE)"
fi
resume_prompt
wait $PPID_ && ok || bad "prompt after a node died failed: $(tail -5 "$tmp/long.err")"
cmp -s "$tmp/long.txt" "$tmp/ref_long.txt" && ok || bad "text after failover differs from the local run"
grep -q "recovered on a new route" "$tmp/long.err" && ok || bad "no failover happened (the generation may have ended before the kill): $(cat "$tmp/long.err")"
sed -n 's/^[^ ]* [a-z]* requester: \(recovered.*\)/failover: \1/p' "$tmp/long.err"
# the spare takes the lost shard: 2 replicas serving again
wait_for 'o.min_replicas_serving >= 2 && o.nodes_alive == 4' 30 && ok ||
    bad "2 replicas were not restored after a node died: $(status | head -c 1500)"
echo "replicas restored $(node -e "console.log(($(date +%s.%N) - ${t_kill:-0}).toFixed(2))") s after the kill"

# ---- the same in a chain, the route's last stage killed: the first stage reports its next hop
long_prompt clong 300 --chain
cvictim=""
for k in 1 2 3 4 5; do [ "${node_addr[$k]}" = "$LAST" ] && kill -0 "${node_pid[$k]}" 2>/dev/null && cvictim=$k; done
if [ -n "$cvictim" ]; then
    { kill -9 "${node_pid[$cvictim]}" && wait "${node_pid[$cvictim]}"; } 2>/dev/null
else
    bad "could not find the chained route's last node ($ROUTE)"
fi
resume_prompt
wait $PPID_ && ok || bad "chained prompt after a node died failed: $(tail -5 "$tmp/clong.err")"
cmp -s "$tmp/clong.txt" "$tmp/ref_long.txt" && ok || bad "chained text after failover differs from the local run"
grep -q "recovered on a new route" "$tmp/clong.err" && ok || bad "no chained failover happened: $(cat "$tmp/clong.err")"
sed -n 's/^[^ ]* [a-z]* requester: \(recovered.*\)/chained failover: \1/p' "$tmp/clong.err"
# a new machine joins in its place: 2 replicas serving again
start_bg n6 "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n6.key" \
    --data "$tmp/d6" --listen 127.0.0.1:0 --name pc6 --capacity-mb "$cap_mb" --speed 1 --threads 1
node_pid[6]=$PID
node_addr[6]=$ADDR
wait_for 'o.min_replicas_serving >= 2 && o.nodes_alive == 4' 30 && ok ||
    bad "2 replicas were not restored after a second node died and pc6 joined: $(status | head -c 1500)"

# ---- serve through the cell: a node of its route killed mid-answer; the same text, and the
# answer's usage says how long the recovery took (x_moontail)
$T "$BIN" run -m "$M" -p "$PROMPT" -n 300 --temp 0 --json >"$tmp/sref.json" 2>/dev/null || bad "serve reference"
spause=$(json 'console.log(o.prompt_tokens.length + Math.max(1, Math.floor(o.tokens.length / 2)))' <"$tmp/sref.json")
start_bg srv env MOONTAIL_TEST_PAUSE_AT_POSITION="$spause" "$BIN" serve --registry "$URL" \
    --token-file "$tmp/cafe.token" --key "$tmp/srv.key" --cache "$tmp/scache" --no-auth \
    --listen 127.0.0.1:0 --model-name tiny -t 1
SRV_PID=$PID
sbody=$(P=$PROMPT node -e 'process.stdout.write(JSON.stringify({model: "tiny", prompt: process.env.P,
    max_tokens: 300, temperature: 0}))')
curl -s -X POST -H 'Content-Type: application/json' -d "$sbody" "$ADDR/v1/completions" >"$tmp/srv.json" &
scurl=$!
if wait_stopped "$SRV_PID"; then
    sroute=$(sed -n 's/^.*requester: route: //p' "$tmp/srv.err" | tail -1)
    sfirst=${sroute%%\[*}
    skill=""
    for k in 1 2 3 4 5 6; do [ "${node_addr[$k]:-}" = "$sfirst" ] && kill -0 "${node_pid[$k]}" 2>/dev/null && skill=$k; done
    if [ -n "$skill" ]; then
        { kill -9 "${node_pid[$skill]}" && wait "${node_pid[$skill]}"; } 2>/dev/null
    else
        bad "could not find serve's route's first node ($sroute)"
    fi
    resume_prompt
else
    bad "serve did not stop at position $spause: $(tail -3 "$tmp/srv.err")"
fi
wait $scurl
STEXT=$(json 'console.log(JSON.stringify(o.text))' <"$tmp/sref.json") json '
  const u = o.usage || {}, x = u.x_moontail || {};
  if (JSON.stringify(o.choices[0].text) !== process.env.STEXT) { console.error("text differs"); process.exit(1); }
  if (!(x.failovers >= 1 && x.recovery_ms > 0)) { console.error("usage", JSON.stringify(u)); process.exit(1); }
  console.log("serve failover: " + x.failovers + " new route(s), recovery " + x.recovery_ms + " ms")' \
    <"$tmp/srv.json" && ok || bad "serve's answer after a node died: $(head -c 600 "$tmp/srv.json")"
grep -q "recovered on a new route" "$tmp/srv.err" && ok || bad "serve logged no recovery: $(tail -5 "$tmp/srv.err")"
kill -TERM "$SRV_PID" 2>/dev/null
start_bg n7 "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n7.key" \
    --data "$tmp/d7" --listen 127.0.0.1:0 --name pc7 --capacity-mb "$cap_mb" --speed 1 --threads 1
node_pid[7]=$PID
node_addr[7]=$ADDR
wait_for 'o.min_replicas_serving >= 2 && o.nodes_alive == 4' 30 && ok ||
    bad "2 replicas were not restored after serve's node died and pc7 joined: $(status | head -c 1500)"

# ---- pause a serving node: no new work, not routed to
pid_of_paused=""
nid=$(status | json 'const n=o.nodes.find(n=>n.state=="serving"); console.log(n.node_id + " " + n.addr)')
paused_id=${nid%% *}
paused_addr=${nid##* }
expect 0 "draining\|paused" "$BIN" pause --registry "$URL" --node "$paused_id" --token-file "$tmp/cafe.token"
wait_for "o.nodes.find(n=>n.node_id==$paused_id).role == 'none'" 20 && ok || bad "paused node kept its work"
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p2.json" 2>"$tmp/p2.err"
json "if (o.route.includes('$paused_addr')) process.exit(1)" <"$tmp/p2.json" && ok || bad "a paused node was routed to: $(cat "$tmp/p2.json")"
[ "$(tokens <"$tmp/p2.json")" = "$ref" ] && ok || bad "tokens with a paused node differ"
expect 0 "node $paused_id:" "$BIN" pause --registry "$URL" --node "$paused_id" --token-file "$tmp/cafe.token" --resume

# ---- admission: with --max-active 1 a second request waits in line, told its place
"$BIN" "${P[@]}" -p "$PROMPT" -n 600 --temp 0 --ignore-eos >"$tmp/qa.txt" 2>"$tmp/qa.err" &
qa=$!
for _ in $(seq 1 500); do grep -q "route:" "$tmp/qa.err" && break; sleep 0.02; done
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/qb.json" 2>"$tmp/qb.err" || bad "queued prompt failed: $(cat "$tmp/qb.err")"
wait $qa || bad "first prompt failed while another waited: $(tail -5 "$tmp/qa.err")"
grep -q "waiting in line: position 1" "$tmp/qb.err" && ok || bad "the second request was not told its place: $(cat "$tmp/qb.err")"
[ "$(tokens <"$tmp/qb.json")" = "$ref" ] && ok || bad "queued prompt differs"
cmp -s "$tmp/qa.txt" "$tmp/ref_long.txt" && ok || bad "the running prompt's text changed while another waited"
status | json 'if (o.requests_active !== 0 || o.requests_waiting !== 0) process.exit(1)' && ok || bad "tickets left behind: $(status | head -c 300)"

# ---- bad requests: 4xx, and the registry keeps serving
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code -X POST -d '{nope' "$URL/v1/accounts")" = 400 ] && ok || bad "malformed JSON not 400"
[ "$(code -X POST -d '{"name": 5}' "$URL/v1/accounts")" = 400 ] && ok || bad "bad field type not 400"
[ "$(code -X POST -d '{"name":"x","pubkey":"zz","addr":"1:2","capacity":1}' -H 'Authorization: Bearer nope' "$URL/v1/nodes")" = 401 ] && ok || bad "unknown token not 401"
[ "$(code -X POST -d '{}' "$URL/v1/nodes/1/heartbeat")" = 401 ] && ok || bad "heartbeat without token not 401"
[ "$(code "$URL/v1/shards/..%2F..%2Fetc%2Fpasswd")" = 404 ] && ok || bad "path trick not 404"
[ "$(code -H 'Range: bytes=999999999-' "$URL/v1/shards/head")" = 416 ] && ok || bad "unsatisfiable range not 416"
[ "$(code -X POST --data-binary @"$M" "$URL/v1/routes")" = 413 ] && ok || bad "huge body not 413"
status | json 'if (!o.nodes_alive) process.exit(1)' && ok || bad "registry stopped answering after bad requests"

# ---- the ledger and a registry restart
sleep 0.5
before=$(curl -s "$URL/v1/ledger/nodes")
credits_before=$("$BIN" account show --registry "$URL" --token-file "$tmp/cafe.token" --json | json 'console.log(o.credits.served_token_layers)')
kill -TERM "$REG_PID"
wait "$REG_PID" 2>/dev/null
start_bg reg2 "$BIN" "${REG[@]}" --listen "127.0.0.1:$PORT"
[ "$ADDR" = "$URL" ] && ok || bad "registry came back on $ADDR, not $URL"
after=$(curl -s "$URL/v1/ledger/nodes")
node -e "
const b=JSON.parse(process.argv[1]), a=JSON.parse(process.argv[2]);
if (a.nodes.length !== b.nodes.length) throw new Error('nodes ' + b.nodes.length + ' -> ' + a.nodes.length);
if (a.ledger_rows < b.ledger_rows) throw new Error('ledger rows ' + b.ledger_rows + ' -> ' + a.ledger_rows);
for (const n of b.nodes) { const m=a.nodes.find(x=>x.node_id===n.node_id);
  if (!m || m.token_layers < n.token_layers) throw new Error('node ' + n.node_id + ' lost work'); }
" "$before" "$after" && ok || bad "registry restart lost something"
credits_after=$("$BIN" account show --registry "$URL" --token-file "$tmp/cafe.token" --json | json 'console.log(o.credits.served_token_layers)')
[ "$credits_after" -ge "$credits_before" ] && [ "$credits_before" -gt 0 ] && ok || bad "credits $credits_before -> $credits_after"
wait_for 'o.min_replicas_serving >= 2 && o.nodes_alive == 4' 30 && ok || bad "nodes did not come back to the restarted registry"
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p3.json" 2>"$tmp/p3.err"
[ "$(tokens <"$tmp/p3.json")" = "$ref" ] && ok || bad "prompt after registry restart differs: $(cat "$tmp/p3.err")"

# ---- earnings from the ledger
"$BIN" cell earnings --registry "$URL" --price-per-mtok 2 --share 0.5 --json >"$tmp/earn.json" && ok || bad "cell earnings"
json 'if (!(o.tokens > 0 && o.earnings > 0 && o.nodes.length == 7)) process.exit(1)' <"$tmp/earn.json" && ok || bad "earnings: $(cat "$tmp/earn.json")"
"$BIN" cell earnings --registry "$URL" --price-per-mtok 2 --share 0.5

# ---- swarm mode: lend before you prompt
SW=(registry --model "$M" --mode swarm --require-volunteer --db "$tmp/sw.db" --key "$tmp/sw.key"
    --shards "$tmp/swseed" --replicas 2 --heartbeat-ms 200 --dead-after-ms 1500)
start_bg sw "$BIN" "${SW[@]}" --listen 127.0.0.1:0
SURL=$ADDR
"$BIN" account new taker --registry "$SURL" -o "$tmp/taker.token" 2>/dev/null || bad "account taker"
"$BIN" account new giver --registry "$SURL" -o "$tmp/giver.token" 2>/dev/null || bad "account giver"
declare -A snode_pid snode_addr
for k in 1 2 3 4; do
    start_bg "sn$k" "$BIN" node --registry "$SURL" --token-file "$tmp/giver.token" --key "$tmp/s$k.key" \
        --data "$tmp/s$k" --listen 127.0.0.1:0 --capacity-mb "$cap_mb" --speed 1 --threads 1
    snode_pid[$k]=$PID
    snode_addr[$k]=$ADDR
done
for _ in $(seq 1 150); do
    "$BIN" status --registry "$SURL" --json | json 'process.exit(o.min_replicas_serving >= 2 ? 0 : 1)' 2>/dev/null && break
    sleep 0.2
done
SP=(prompt --registry "$SURL" --key "$tmp/req2.key" --cache "$tmp/cache2" -p "$PROMPT" -n 24 --temp 0 --json)
expect 1 "not volunteered" "$BIN" "${SP[@]}" --token-file "$tmp/taker.token"
grep -q "moontail setup --accept-terms --registry" "$tmp/o" && ok || bad "the refusal does not say how to volunteer"
$T "$BIN" "${SP[@]}" --token-file "$tmp/giver.token" >"$tmp/sw.json" 2>"$tmp/sw.err"
[ "$(tokens <"$tmp/sw.json")" = "$ref" ] && ok || bad "swarm prompt differs: $(cat "$tmp/sw.err")"
# an expert server of the route dies mid-generation: the other replica's experts take over
MOONTAIL_TEST_PAUSE_AT_POSITION=100 "$BIN" prompt --registry "$SURL" --token-file "$tmp/giver.token" \
    --key "$tmp/req2.key" --cache "$tmp/cache2" -p "$PROMPT" -n 600 --temp 0 --ignore-eos \
    >"$tmp/swl.txt" 2>"$tmp/swl.err" &
spid=$!
wait_stopped $spid || bad "the swarm prompt did not stop at position 100: $(tail -3 "$tmp/swl.err")"
sroute=$(sed -n 's/^[^ ]* [a-z]* requester: route: //p' "$tmp/swl.err" | head -1)
sfirst=${sroute%%e\[*}
svictim=""
for k in 1 2 3 4; do [ "${snode_addr[$k]}" = "$sfirst" ] && svictim=$k; done
if [ -n "$svictim" ]; then
    { kill -9 "${snode_pid[$svictim]}" && wait "${snode_pid[$svictim]}"; } 2>/dev/null
else
    bad "could not find the swarm route's first expert server ($sroute)"
fi
resume_prompt
wait $spid && ok || bad "swarm prompt after an expert server died failed: $(tail -5 "$tmp/swl.err")"
cmp -s "$tmp/swl.txt" "$tmp/ref_long.txt" && ok || bad "swarm text after failover differs from the local run"
grep -q "recovered on a new route" "$tmp/swl.err" && ok || bad "no swarm failover happened: $(cat "$tmp/swl.err")"
sed -n 's/^[^ ]* [a-z]* requester: \(recovered.*\)/swarm failover: \1/p' "$tmp/swl.err"

finish
