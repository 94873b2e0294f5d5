#!/usr/bin/env bash
# test_registry_netns.sh - the control plane across real network stacks.
# test_registry_cli.sh runs the same parts on 127.0.0.1; here every part has
# its own network namespace on a bridge (tests/lib/netns.bash, addresses in
# 10.232.X.0/24 made by this test): the registry (off loopback, so over
# HTTPS with its self-signed certificate, which every client pins with
# --registry-pin; test_registry_tls_cli.sh), six nodes (pc1..pc6, each
# --listen on its own address, port 7411), and the requester (which also runs
# `status` and `pause`). pc6 reaches the registry through a 20 ms latency
# relay (tests/lib/latency_relay.mjs), so its heartbeats and its seed fetches
# cross a slow link. (Its data plane cannot sit behind the relay: a node
# advertises the address it binds.) Checks, each on real outcomes:
#   1. all join -> 2 replicas serving and spares; no node holds a file as
#      large as the model;
#   2. a greedy prompt through the registry gives `moontail run`'s tokens;
#   3. a node on the route killed (-9) mid-generation, first the first stage,
#      then in another generation the last stage: the text is the local
#      run's, the requester says "recovered on a new route in X ms" (printed);
#      then a stage cut off by taking its namespace's link down (the process
#      lives on, its peers only see silence): the requester, with
#      --call-timeout-ms 3000, still finishes with the same text;
#   4. after each kill a spare restores 2 replicas; after the cut no spare is
#      left, and the first killed node, restarted with the same --key and
#      --data, restores them (times from the kill / cut printed); the cut
#      node, once its link is back, is alive again and takes no stage;
#   5. a paused node loses its role and new routes avoid it; resumed, it is
#      a spare again, and takes the shard of a serving node paused next
#      (the other spare is paused first, so it must be this one).
# Without root or network namespaces it prints "SKIP: ..." and runs nothing
# (test_registry_cli.sh covers the logic). Processes and namespaces are
# removed on exit, also on failure; every command runs under a time limit.
# KEEPLOGS=DIR keeps a copy of the scratch directory (every process's log).
set -u
. "$(dirname "$0")/lib/harness.bash"
RELAY="$(cd "$(dirname "$0")" && pwd)/lib/latency_relay.mjs"
NETNS_NET=10.232
NETNS_PREFIX=mtrg$$
. "$(dirname "$0")/lib/netns.bash"
. "$(dirname "$0")/lib/long_prompt.bash"
extra_cleanup() { netns_cleanup; [ -n "${KEEPLOGS:-}" ] && cp -r "$tmp" "$KEEPLOGS"; }
trap 'exit 1' INT TERM HUP
t_start=$SECONDS
cd "$tmp" || exit 1

# R: requester (and the bridge); N[1]: registry; N[k+1]: node pc<k>
if ! netns_setup 7; then
    echo "SKIP: network namespaces not available ($why); test_registry_cli.sh covers the control plane on loopback"
    finish
    exit
fi
RQ=(ip netns exec "$R")
declare -a NS NIP NPID NRUN
for k in 1 2 3 4 5 6; do NS[k]=${N[k + 1]} NIP[k]=${IP[k + 1]} NRUN[k]=0; done
echo "netns: requester in $R, registry in ${N[1]} (${IP[1]}), nodes pc1..pc6 at ${NIP[*]}"

ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); } # ms since a `date +%s%N`
kill_node() { { kill -9 "${NPID[$1]}" && wait "${NPID[$1]}"; } 2>/dev/null; }
status() { timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL" --registry-pin "$PIN" --json 2>/dev/null; }
node_id() { status | json "console.log(o.nodes.find(n => n.name == 'pc$1').node_id)"; }
# k of the node at ADDR (nothing when none)
node_k() {
    local k
    for k in 1 2 3 4 5 6; do [ "${NIP[k]}:7411" = "$1" ] && echo "$k"; done
}
# start_node K: pc<K> in its namespace (again after a kill: same key, data, address)
start_node() {
    local k=$1 url=$URL
    [ "$k" = 6 ] && url=$RURL
    NRUN[k]=$((NRUN[k] + 1))
    bg "n$k.${NRUN[k]}" "${NS[k]}" "$BIN" node --registry "$url" --registry-pin "$PIN" \
        --token-file "$tmp/cafe.token" \
        --key "$tmp/n$k.key" --data "$tmp/d$k" --listen "${NIP[k]}:7411" --name "pc$k" \
        --capacity-mb "$cap_mb" --speed 1 --threads 1 && NPID[k]=$PID
}

# ---- the model and the local reference
M="$tmp/m.gguf"
timeout 30 "$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 4 --embd 128 --heads 4 \
    --head-dim 32 --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 7 >/dev/null || bad "mkmodel"
msize=$(stat -c %s "$M")
cap_mb=$((msize * 6 / 10 / 1000000 + 1)) # room for about half the model: 2 stages a pipeline
PROMPT="Every machine of the cell holds a part"
NLONG=800
timeout 60 "$BIN" run -m "$M" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")
timeout 60 "$BIN" run -m "$M" -p "$PROMPT" -n $NLONG --temp 0 --ignore-eos >"$tmp/ref_long.txt" 2>/dev/null ||
    bad "long reference run"

# ---- 1. registry, the relay in front of it for pc6, the account, six nodes
bg reg "${N[1]}" "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" \
    --shards "$tmp/seed" --replicas 2 --spares 1 --heartbeat-ms 200 --dead-after-ms 1500 \
    --listen "${IP[1]}:0" || { finish; exit; }
URL=$ADDR
# off loopback the registry serves HTTPS (a self-signed certificate); every client pins its key
PIN=$(sed -n 's/^TLS certificate \(sha256\/\/[^ ]*\) .*/\1/p' "$tmp/reg.out")
[[ "$URL" == https://* ]] && [ -n "$PIN" ] && ok || bad "the registry off loopback does not serve TLS: $URL, pin '$PIN'"
bg relay "${N[1]}" node "$RELAY" --listen "${IP[1]}:0" --target "${URL#https://}" --delay 20 --lifetime 600 ||
    { finish; exit; }
RURL=https://$ADDR
timeout 30 "${RQ[@]}" "$BIN" account new cafe --registry "$URL" --registry-pin "$PIN" -o "$tmp/cafe.token" >/dev/null 2>&1 || bad "account new"
t0=$(date +%s%N)
for k in 1 2 3 4 5 6; do start_node $k || { finish; exit; }; done
wait_for 'o.min_replicas_serving == 2 && o.spares >= 1 && o.nodes_alive == 6' 60 && ok ||
    bad "6 nodes did not reach 2 serving replicas and a spare: $(status | head -c 1500)"
echo "join: 2 replicas serving $(ms_since "$t0") ms after the first node started"
timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL" --registry-pin "$PIN"
status | json "const n = o.nodes.find(n => n.name == 'pc6');
    process.exit(n && n.state != 'dead' && n.state != 'joining' ? 0 : 1)" && ok ||
    bad "pc6 (behind the 20 ms relay) is not alive: $(cat "$tmp"/n6.1.err)"
grep -q "bytes up" "$tmp/relay.err" && ok || bad "pc6's registry traffic did not cross the relay"
# nobody fetched the whole model
for k in 1 2 3 4 5 6; do
    for f in "$tmp/d$k"/*; do
        [ -e "$f" ] || continue
        [ "$(stat -c %s "$f")" -lt "$msize" ] && ok || bad "pc$k holds $f, as large as the model"
    done
done

# ---- 2. a greedy prompt through the registry gives the local tokens
P=(prompt --registry "$URL" --registry-pin "$PIN" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache"
    --call-timeout-ms 3000)
timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p1.json" 2>"$tmp/p1.err" ||
    bad "prompt: $(cat "$tmp/p1.err")"
got=$(tokens <"$tmp/p1.json" 2>/dev/null)
[ -n "$got" ] && [ "$got" = "$ref" ] && ok || bad "registry prompt tokens differ: $got vs $ref"
json "process.exit(/^10\.232\.\d+\.\d+:7411\[0,\d+\) .*:7411\[\d+,4\)$/.test(o.route) ? 0 : 1)" \
    <"$tmp/p1.json" && ok || bad "unexpected route: $(head -c 400 "$tmp/p1.json")"

# ---- 3. failures during a generation
# after_failure NAME WHAT T: the generation NAME finished with the local text
# and a failover; prints the recovery time (RECOVERY_MS)
after_failure() {
    local name=$1 what=$2 rc
    wait $PPID_
    rc=$?
    [ $rc -eq 0 ] && ok || bad "$what: prompt exit $rc after $(ms_since "$3") ms: $(tail -5 "$tmp/$name.err")"
    cmp -s "$tmp/$name.txt" "$tmp/ref_long.txt" && ok || bad "$what: the text differs from the local run"
    local line
    line=$(sed -n 's/^[^ ]* [a-z]* requester: \(recovered on a new route in .*\)/\1/p' "$tmp/$name.err" | head -1)
    RECOVERY_MS=$(echo "$line" | sed -n 's/^recovered on a new route in \([0-9]*\) ms.*/\1/p')
    FAILED_CALL_MS=$(echo "$line" | sed -n 's/.*the failed call took \([0-9]*\) ms.*/\1/p')
    [ -n "$RECOVERY_MS" ] && ok || bad "$what: no failover (did the generation end first?): $(cat "$tmp/$name.err")"
    echo "$what: the local run's text, prompt done $(ms_since "$3") ms after the failure;" \
        "$(sed -n 's/^[^ ]* [a-z]* requester: \(route failed.*\)/\1/p' "$tmp/$name.err" | head -1 | head -c 300); $line"
}

# kill_during NAME WHICH ADDR: kill -9 the node at ADDR (WHICH: "first" or "last" stage of
# the route) while NAME generates; the text must not change and a spare must restore 2
# replicas. Sets KILLED and KILLED_ID (the node's k and id), REC (recovery ms) and
# RESTORE (ms from the kill to 2 replicas).
kill_during() {
    local name=$1 which=$2 k id dead t_kill
    k=$(node_k "$3")
    REC="" RESTORE="" KILLED="" KILLED_ID=""
    if [ -z "$k" ] || ! kill -0 $PPID_ 2>/dev/null; then
        bad "could not find the route's $which node in '$ROUTE' while generating: $(cat "$tmp/$name.err")"
        resume_prompt
        wait $PPID_
        return
    fi
    kill_node "$k"
    t_kill=$(date +%s%N)
    resume_prompt
    id=$(node_id "$k")
    KILLED=$k KILLED_ID=$id
    wait_for "o.nodes.find(n => n.node_id == $id).state == 'dead'" 30 && dead=$(ms_since "$t_kill")
    after_failure "$name" "kill -9 of the $which stage (pc$k)" "$t_kill"
    REC=$RECOVERY_MS
    wait_for "o.nodes.find(n => n.node_id == $id).state == 'dead' && o.min_replicas_serving == 2" 30 && ok ||
        bad "2 replicas not restored after pc$k died: $(status | head -c 1500)"
    RESTORE=$(ms_since "$t_kill")
    echo "pc$k killed: the registry saw it dead after ${dead:-?} ms; a spare restored 2 replicas" \
        "$RESTORE ms after the kill"
}

# 3a/4a: the first stage of the route; 3b/4b: the last stage (the other spare takes it)
long_prompt kill1
kill_during kill1 first "$FIRST"
rec_first=$REC restore1=$RESTORE A=$KILLED A_ID=$KILLED_ID
long_prompt kill2
kill_during kill2 last "$LAST"
rec_last=$REC restore2=$RESTORE B=$KILLED
timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL" --registry-pin "$PIN"

# 3c: cut a stage's link (its process lives on); the requester must still finish
long_prompt cut
C=$(node_k "$FIRST")
if [ -n "$C" ] && kill -0 $PPID_ 2>/dev/null; then
    timeout 5 ip -n "${NS[C]}" link set eth0 down
    t_cut=$(date +%s%N)
    resume_prompt
    C_ID=$(node_id "$C")
    # the registry only sees silence: dead after --dead-after-ms; no spare is left
    wait_for "o.nodes.find(n => n.node_id == $C_ID).state == 'dead' && o.min_replicas_serving == 1" 30 && ok ||
        bad "the registry did not mark the cut pc$C dead: $(status | head -c 1500)"
    dead3=$(ms_since "$t_cut")
    after_failure cut "link of the first stage (pc$C) cut" "$t_cut"
    rec_cut=$RECOVERY_MS stall_cut=$FAILED_CALL_MS
    grep -q "no frame from" "$tmp/cut.err" && ok || bad "the cut was not seen as a reply timeout: $(cat "$tmp/cut.err")"
    kill -0 "${NPID[C]}" && ok || bad "pc$C's process died when its link went down"
    echo "pc$C cut off: the registry marked it dead $dead3 ms after the cut"
    # 4c: the node killed first comes back (same key and data) and restores 2 replicas
    t_back=$(date +%s%N)
    start_node "$A" && ok
    wait_for "o.nodes.find(n => n.node_id == $A_ID).state == 'serving' && o.min_replicas_serving == 2" 30 && ok ||
        bad "pc$A came back but 2 replicas were not restored: $(status | head -c 1500)"
    [ "$(node_id "$A")" = "$A_ID" ] && ok || bad "pc$A came back under another id"
    restore3=$(ms_since "$t_back")
    echo "pc$A restarted: 2 replicas again $restore3 ms after its restart," \
        "$(ms_since "$t_cut") ms after the cut"
    # the cut node's link comes back: alive again, no stage (its shard moved to pc$A)
    timeout 5 ip -n "${NS[C]}" link set eth0 up
    t_up=$(date +%s%N)
    wait_for "['spare', 'idle'].includes(o.nodes.find(n => n.node_id == $C_ID).state)" 30 && ok ||
        bad "pc$C did not come back as a spare after its link came back: $(status | head -c 1500)"
    echo "pc$C link up: $(status | json "const n = o.nodes.find(n => n.node_id == $C_ID); console.log(n.state + ' (role ' + n.role + ')')")" \
        "$(ms_since "$t_up") ms later"
    timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p3.json" 2>"$tmp/p3.err"
    [ "$(tokens <"$tmp/p3.json" 2>/dev/null)" = "$ref" ] && ok || bad "prompt after the link came back: $(cat "$tmp/p3.err")"
else
    bad "could not find the route's first node in '$ROUTE' while generating: $(cat "$tmp/cut.err")"
    resume_prompt
    wait $PPID_
fi
[ -n "${B:-}" ] && start_node "$B" # the last killed node comes back too: a spare
timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL" --registry-pin "$PIN"

# ---- 5. pause a serving node: no role, no new routes; resumed: can get work again
V=$(status | json "const n = o.nodes.find(n => n.state == 'serving'); console.log(n.name.slice(2))")
V_ID=$(node_id "$V")
expect 0 "draining\|paused" "${RQ[@]}" "$BIN" pause --registry "$URL" --registry-pin "$PIN" --node "$V_ID" --token-file "$tmp/cafe.token"
wait_for "o.nodes.find(n => n.node_id == $V_ID).role == 'none' && o.min_replicas_serving == 2" 20 && ok ||
    bad "paused pc$V kept its work, or 2 replicas were not kept: $(status | head -c 1500)"
for i in 1 2 3; do # routes are spread by session: several prompts
    timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/pp$i.json" 2>"$tmp/pp$i.err"
    json "process.exit(o.route.includes('${NIP[V]}:') ? 1 : 0)" <"$tmp/pp$i.json" && ok ||
        bad "paused pc$V was routed to: $(head -c 400 "$tmp/pp$i.json") $(cat "$tmp/pp$i.err")"
    [ "$(tokens <"$tmp/pp$i.json" 2>/dev/null)" = "$ref" ] && ok || bad "tokens with pc$V paused differ"
done
# resumed: it can get work again. Made certain: the other spare is paused
# too, so when a serving node is then paused, the resumed one must take over.
pause() { timeout 30 "${RQ[@]}" "$BIN" pause --registry "$URL" --registry-pin "$PIN" --node "$1" --token-file "$tmp/cafe.token" "${@:2}" >/dev/null 2>&1; }
S_ID=$(status | json "console.log(o.nodes.find(n => n.state == 'spare').node_id)")
pause "$S_ID" && wait_for "o.nodes.find(n => n.node_id == $S_ID).state == 'paused'" 20 && ok ||
    bad "the other spare (node $S_ID) could not be paused: $(status | head -c 1500)"
expect 0 "node $V_ID:" "${RQ[@]}" "$BIN" pause --registry "$URL" --registry-pin "$PIN" --node "$V_ID" --token-file "$tmp/cafe.token" --resume
wait_for "o.nodes.find(n => n.node_id == $V_ID).state == 'spare'" 20 && ok ||
    bad "resumed pc$V is not a spare: $(status | head -c 1500)"
W_ID=$(status | json "console.log(o.nodes.find(n => n.state == 'serving').node_id)")
t_w=$(date +%s%N)
pause "$W_ID" || bad "pause node $W_ID"
wait_for "o.nodes.find(n => n.node_id == $V_ID).state == 'serving' && o.min_replicas_serving == 2" 20 && ok ||
    bad "resumed pc$V got no work when node $W_ID was paused: $(status | head -c 1500)"
echo "pause: pc$V paused, routed around, resumed; it took paused node $W_ID's shard $(ms_since "$t_w") ms after that pause"
timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL" --registry-pin "$PIN"
timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p4.json" 2>"$tmp/p4.err"
[ "$(tokens <"$tmp/p4.json" 2>/dev/null)" = "$ref" ] && ok || bad "prompt at the end: $(cat "$tmp/p4.err")"

echo "summary: new route after kill -9 of the first stage ${rec_first:-?} ms, of the last stage" \
    "${rec_last:-?} ms; after a cut link ${rec_cut:-?} ms, once the failed call gave up after" \
    "${stall_cut:-?} ms (--call-timeout-ms 3000, then one reconnect attempt); 2 replicas restored" \
    "by a spare ${restore1:-?} / ${restore2:-?} ms after a kill, by the restarted node" \
    "${restore3:-?} ms after its restart"
echo "total $((SECONDS - t_start)) s"
finish
