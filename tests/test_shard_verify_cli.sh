#!/usr/bin/env bash
# test_shard_verify_cli.sh - a node never serves a tampered shard: a stage
# shard (`moontail split`) with bytes flipped in one tensor's data is refused
# by `moontail node --shard`, naming the tensor and the file and saying to
# fetch it again, while the intact shard is served (its tensors hashed
# first) and a whole model is served with a log line saying it has nothing to
# verify. Then the background re-check: a served shard corrupted in place
# (dd conv=notrunc: the node maps it) stops the standalone node with the
# error; and under a registry the node's heartbeat reports it, its data
# plane stops, and `moontail status` (text and --json) shows it for that node.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
PATCH="$(cd "$(dirname "$0")" && pwd)/lib/gguf_patch.py"

# flip FILE OFFSET: overwrites 4 bytes at OFFSET with their bitwise complement, in place
flip() {
    python3 -c '
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(4); f.seek(int(sys.argv[2]))
    f.write(bytes(x ^ 0xFF for x in b))' "$1" "$2"
}
# corrupt_all FILE: flips bytes in the middle of every tensor, writing into the file in place
corrupt_all() {
    python3 "$PATCH" "$1" offset '*' | while read -r off n _; do
        head -c 4 /dev/urandom | dd of="$1" bs=1 seek=$((off + n / 2)) conv=notrunc 2>/dev/null
    done
}

M="$tmp/m.gguf"
$T "$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type q8_0 --layers 4 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --seed 3 >/dev/null && ok || bad "mkmodel"
nodekey=$($T "$BIN" keygen -o "$tmp/node.key") && ok || bad "keygen node"
printf '%s node\n' "$nodekey" >"$tmp/auth"
NODE=(node --listen 127.0.0.1:0 --threads 2 --key "$tmp/node.key" --authorized "$tmp/auth")
$T "$BIN" split "$M" --plan cell:2 -o "$tmp/cell" >/dev/null 2>&1 && ok || bad "split cell:2"
S0="$tmp/cell/m-stage-0.gguf"
TN=blk.0.attn_output.weight

# ---- the intact shard is hashed and served; a whole model has nothing to verify
start_bg good "$BIN" "${NODE[@]}" --shard "$S0" && ok
grep -q "all [0-9]* tensors match their stored hashes" "$tmp/good.err" && ok ||
    bad "no verification line for the intact shard: $(cat "$tmp/good.err")"
start_bg whole "$BIN" "${NODE[@]}" --shard "$M" && ok
grep -q "whole model, not a shard: it stores no tensor hashes, so there is nothing to verify" \
    "$tmp/whole.err" && ok || bad "no 'nothing to verify' line for a whole model: $(cat "$tmp/whole.err")"

# ---- one tensor's data changed: refused, naming the tensor and the file
cp "$S0" "$tmp/bad.gguf"
read -r off n < <(python3 "$PATCH" "$tmp/bad.gguf" offset "$TN")
[ "${n:-0}" -gt 8 ] && ok || bad "no offset for $TN in $tmp/bad.gguf"
flip "$tmp/bad.gguf" $((off + n / 2))
cmp -s "$S0" "$tmp/bad.gguf" && bad "the copy was not changed" || ok
expect 1 "bad.gguf: tensor '$TN' does not match its stored hash" "$BIN" "${NODE[@]}" --shard "$tmp/bad.gguf"
grep -q "delete the file, then fetch or split it again" "$tmp/o" && ok || bad "no fix in: $(cat "$tmp/o")"
grep -q "^listening on" "$tmp/o" && bad "the tampered shard was served: $(cat "$tmp/o")" || ok
# `plan check` agrees on the same file
cp "$S0" "$tmp/good-stage-0.gguf"
cp "$tmp/bad.gguf" "$S0"
expect 1 "tensor '$TN' does not match its stored hash" "$BIN" plan check "$M" "$tmp/cell/m-cell-manifest.json"
cp "$tmp/good-stage-0.gguf" "$S0"

# ---- background re-check: the served file changes on disk, the node stops
cp "$S0" "$tmp/served.gguf"
start_bg served "$BIN" "${NODE[@]}" --shard "$tmp/served.gguf" --recheck-s 1 && ok
served_pid=$PID
corrupt_all "$tmp/served.gguf"
for _ in $(seq 1 150); do
    kill -0 "$served_pid" 2>/dev/null || break
    sleep 0.1
done
wait "$served_pid"
rc=$?
[ $rc -eq 1 ] && grep -q "stopping: the shard changed on disk while served: .*served.gguf: tensor '.*'" \
    "$tmp/served.err" && ok || bad "the node went on serving a changed shard (rc $rc): $(tail -3 "$tmp/served.err")"

# ---- under a registry: the heartbeat reports it and `moontail status` shows it
cd "$tmp"
status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }
start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" \
    --replicas 1 --spares 0 --heartbeat-ms 200 --dead-after-ms 1500 --listen 127.0.0.1:0
URL=$ADDR
expect 0 "token in" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token"
start_bg n1 "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n1.key" \
    --data "$tmp/d1" --listen 127.0.0.1:0 --name pc1 --speed 1 --threads 1 --recheck-s 1
wait_for 'o.min_replicas_serving >= 1' 60 && ok || bad "the node did not serve: $(status | head -c 1500)"
status | json 'process.exit(o.nodes.every(n => !n.problem) ? 0 : 1)' && ok ||
    bad "a problem before any change: $(status | head -c 1500)"
for f in "$tmp/d1"/*.gguf; do corrupt_all "$f"; done
wait_for 'o.nodes.some(n => n.name == "pc1" && /changed on disk, not serving.*does not match its stored hash/.test(n.problem || "")
          && n.state != "serving")' 30 && ok ||
    bad "status does not show the changed shard: $(status | head -c 1500)"
expect 0 "problem: changed on disk, not serving shard .*does not match its stored hash" "$BIN" status --registry "$URL"
grep -q "changed on disk while served" "$tmp/n1.err" && ok || bad "the node did not say so: $(tail -3 "$tmp/n1.err")"

finish
