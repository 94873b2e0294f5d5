#!/usr/bin/env bash
# test_paired_cli.sh - paired layers placed by the registry: four nodes that
# each have room for only part of a layer are paired (a stage holding the
# attention part and some experts, a partner holding the other experts of
# the same layers), the stage calls its partner, and a prompt through the
# registry gives the tokens `moontail run` gives. Separate processes on
# 127.0.0.1. Another process takes pc1's data-plane port (picked with
# --listen 127.0.0.1:0) before pc1 serves there, as any program's port 0 or a
# closed connection's TIME_WAIT can: pc1 moves to a free port and tells the
# registry instead of staying 'loading' (a CI failure).
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 2 --embd 256 --heads 4 --head-dim 64 \
    --ff 256 --ff-exp 128 --experts 16 --experts-used 2 --seed 3 >/dev/null || bad "mkmodel"
# one layer is about half the model: a node gets room for 60% of a layer
layer_mb=$(($(stat -c %s "$M") / 2 / 1000000))
cap_mb=$((layer_mb * 6 / 10))
start_bg reg "$BIN" registry --model "$M" --db "$tmp/r.db" --key "$tmp/r.key" --shards "$tmp/seed" \
    --replicas 1 --spares 0 --heartbeat-ms 200 --dead-after-ms 1500 --listen 127.0.0.1:0
URL=$ADDR
"$BIN" account new lab --registry "$URL" -o "$tmp/t" 2>/dev/null || bad "account"
for k in 1 2 3 4; do
    start_bg "n$k" "$BIN" node --registry "$URL" --token-file "$tmp/t" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "pc$k" --capacity-mb "$cap_mb" --speed 1 --threads 1
    [ "$k" = 1 ] || continue
    # pc1 serves nothing before pc4 joins: take its port now, and hold it
    pc1_addr=$ADDR
    node -e 'require("net").createServer().listen(+process.argv[1], "127.0.0.1", () => console.log("held"))' \
        "${pc1_addr##*:}" >"$tmp/thief.out" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do grep -q held "$tmp/thief.out" && break; sleep 0.05; done
    grep -q held "$tmp/thief.out" || bad "could not take pc1's port ${pc1_addr##*:}: $(cat "$tmp/thief.out")"
done
wait_for 'o.ready && o.nodes_serving == 4' 60 && ok || bad "4 nodes did not serve: $(status | head -c 1200)"
status | json "const n = o.nodes.find(n => n.name == 'pc1'); if (n.addr == '$pc1_addr') throw new Error(n.addr)" &&
    grep -q "data-plane port $pc1_addr is held by another process; serving on" "$tmp/n1.err" &&
    ok || bad "pc1 did not move off its taken port $pc1_addr: $(status | head -c 600); $(tail -3 "$tmp/n1.err")"
status | json 'const r = o.nodes.map(n => n.role).sort().join(); if (r !== "partner,partner,stage,stage") throw new Error(r)' &&
    ok || bad "no stage + partner pairs: $(status | head -c 1200)"
status | json 'for (const n of o.nodes.filter(n => n.role == "partner")) { const s = o.nodes.find(x => x.node_id == n.paired_with); if (!s || s.role != "stage" || s.layers.join() != n.layers.join()) throw new Error("partner " + n.node_id) }' &&
    ok || bad "a partner is not paired with a stage of the same layers"
"$BIN" run -m "$M" -p "Paired layers" -n 16 --temp 0 --json 2>/dev/null | tokens >"$tmp/ref"
$T "$BIN" prompt --registry "$URL" --token-file "$tmp/t" --key "$tmp/rq.key" --cache "$tmp/c" \
    -p "Paired layers" -n 16 --temp 0 --json 2>"$tmp/p.err" | tokens >"$tmp/got"
[ -s "$tmp/ref" ] && cmp -s "$tmp/ref" "$tmp/got" && ok || bad "paired prompt differs: $(cat "$tmp/got") vs $(cat "$tmp/ref"); $(cat "$tmp/p.err")"
# the partners did the experts' work: they were credited expert rows
wait_for 'o.nodes.filter(n => n.role == "partner").every(n => n.served_expert_rows > 0)' 10 &&
    ok || bad "partners served no expert rows: $(status | head -c 1500)"
finish
