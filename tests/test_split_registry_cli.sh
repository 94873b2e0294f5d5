#!/usr/bin/env bash
# test_split_registry_cli.sh - the registry on a split model, every part its
# own process on 127.0.0.1. Checks:
#   - a registry given the middle file of a 3-part model (gguf-split's
#     layout, written by `moontail split --parts`) cuts shards from it, two
#     nodes that join fetch and serve them, and `prompt --registry` gives
#     the tokens `moontail run` gives on the single file;
#   - the registry restarted on the single file with the same database starts
#     (the model's identity is the same), the nodes serve again, same tokens;
#   - a registry on a model with a stray tensor, on one of an unknown
#     architecture, or on a split set with a part missing, exits 1 at once
#     naming the tensor, the architecture or the file.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
cd "$tmp" || exit 1

status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }

M="$tmp/m.gguf"
MODEL=("${MODEL_ARCH[@]}" --type f32 --layers 4 --embd 128 --heads 4 --head-dim 32 --ff 128
    --ff-exp 64 --experts 8 --experts-used 2 --seed 3)
"$BIN" mkmodel -o "$M" "${MODEL[@]}" >/dev/null || bad "mkmodel"
mkdir -p "$tmp/sp"
"$BIN" split "$M" --parts 3 -o "$tmp/sp/m" >/dev/null 2>&1 || bad "split --parts 3"
S2="$tmp/sp/m-00002-of-00003.gguf"
cap_mb=$(($(stat -c %s "$M") * 6 / 10 / 1000000 + 1))
PROMPT="The cell computes one layer at a time"
$T "$BIN" run -m "$M" -p "$PROMPT" -n 16 --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")

# ---- a registry on the split model, two nodes
REG=(registry --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" --replicas 1
    --heartbeat-ms 200 --dead-after-ms 1500)
start_bg reg "$BIN" "${REG[@]}" --model "$S2" --listen 127.0.0.1:0
URL=$ADDR
REG_PID=$PID
PORT=${URL##*:}
expect 0 "token in" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token"
for k in 1 2; do
    start_bg "n$k" "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --capacity-mb "$cap_mb" --speed 1 --threads 1
done
wait_for 'o.min_replicas_serving >= 1 && o.nodes_alive == 2' 60 && ok ||
    bad "2 nodes did not reach a serving replica: $(status | head -c 1500)"
P=(prompt --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache"
    -p "$PROMPT" -n 16 --temp 0 --json)
$T "$BIN" "${P[@]}" >"$tmp/p1.json" 2>"$tmp/p1.err" || bad "prompt: $(cat "$tmp/p1.err")"
got=$(tokens <"$tmp/p1.json" 2>/dev/null)
[ -n "$got" ] && [ "$got" = "$ref" ] && ok || bad "prompt through the split model's registry: $got vs $ref"

# ---- restarted on the single file: the same model to the database
kill -TERM "$REG_PID"
wait "$REG_PID" 2>/dev/null
start_bg reg2 "$BIN" "${REG[@]}" --model "$M" --listen "127.0.0.1:$PORT"
[ "$ADDR" = "$URL" ] && ok || bad "registry came back on $ADDR, not $URL: $(cat "$tmp/reg2.err")"
wait_for 'o.min_replicas_serving >= 1 && o.nodes_alive == 2' 30 && ok ||
    bad "nodes did not serve the registry on the single file: $(status | head -c 1500)"
$T "$BIN" "${P[@]}" >"$tmp/p2.json" 2>"$tmp/p2.err" || bad "prompt after restart: $(cat "$tmp/p2.err")"
[ "$(tokens <"$tmp/p2.json" 2>/dev/null)" = "$ref" ] && ok || bad "prompt after the restart on the single file differs"

# ---- refused at start: what a node would refuse, and a broken set
"$BIN" mkmodel -o "$tmp/stray.gguf" "${MODEL[@]}" --extra-tensor blk.0.ffn_stray.weight >/dev/null || bad "mkmodel stray"
"$BIN" mkmodel -o "$tmp/arch.gguf" "${MODEL[@]}" --arch-name mystery >/dev/null || bad "mkmodel arch"
BAD=(registry --db "$tmp/bad.db" --key "$tmp/bad.key" --shards "$tmp/badseed" --listen 127.0.0.1:0)
expect 1 "stray.gguf: tensor 'blk.0.ffn_stray.weight' is not used" "$BIN" "${BAD[@]}" --model "$tmp/stray.gguf"
expect 1 "arch.gguf: architecture 'mystery' is not supported" "$BIN" "${BAD[@]}" --model "$tmp/arch.gguf"
rm "$tmp/sp/m-00003-of-00003.gguf"
expect 1 "m-00003-of-00003.gguf: part 3 of 3 of the split model is missing" "$BIN" "${BAD[@]}" --model "$tmp/sp/m-00001-of-00003.gguf"

finish
