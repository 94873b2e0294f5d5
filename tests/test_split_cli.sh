#!/usr/bin/env bash
# test_split_cli.sh - `moontail split` and `moontail plan check` end to end:
# one shard (experts, head, whole model), cell and swarm plans that check
# out, manifests with a missing, duplicated, tampered or foreign shard that
# do not, a llama-3 style model whose rope_freqs every stage needs, and
# clear errors with exit codes (2 = bad arguments, 1 = failure).
set -u
. "$(dirname "$0")/lib/harness.bash"
# edit MANIFEST OUT JS: rewrite a manifest with a node expression on `m`
edit() { node -e "const fs=require('fs'); const m=JSON.parse(fs.readFileSync('$1','utf8')); $3; fs.writeFileSync('$2', JSON.stringify(m))"; }

M="$tmp/m.gguf"
small="--type q8_0 --layers 4 --embd 128 --heads 4 --head-dim 32 --ff 128 --ff-exp 64 --q-lora 64 --kv-lora 64 --nope 32 --rope 16 --v-dim 32"
# shellcheck disable=SC2086
"$BIN" mkmodel -o "$M" --arch deepseek2 $small --seed 1 && ok || bad "mkmodel"
# shellcheck disable=SC2086
"$BIN" mkmodel -o "$tmp/other.gguf" --arch deepseek2 $small --seed 2 && ok || bad "mkmodel other"

# one shard at a time
expect 0 "7 of 16 experts" "$BIN" split "$M" --layers 1:3 --experts 0,3,5-9 --no-attention -o "$tmp/e.gguf"
expect 0 "head on" "$BIN" split "$M" --head -o "$tmp/h.gguf"
expect 0 "all 16 experts" "$BIN" split "$M" --layers 0:4 --head -o "$tmp/all.gguf"
# a shard holding everything is a model like any other: same logits
"$BIN" eval -m "$M" --ids 1,2,3 --top 5 >"$tmp/a.txt" 2>&1 || bad "eval model"
"$BIN" eval -m "$tmp/all.gguf" --ids 1,2,3 --top 5 >"$tmp/b.txt" 2>&1 && cmp -s "$tmp/a.txt" "$tmp/b.txt" && ok || bad "whole shard evaluates differently: $(head -c 300 "$tmp/b.txt")"

# plans
expect 0 "manifest" "$BIN" split "$M" --plan cell:3 -o "$tmp/cell"
expect 0 "ok: 4 shards" "$BIN" plan check "$M" "$tmp/cell/m-cell-manifest.json"
expect 0 "manifest" "$BIN" split "$M" --plan swarm:4 -o "$tmp/swarm"
S="$tmp/swarm/m-swarm-manifest.json"
expect 0 "ok: 5 shards" "$BIN" plan check "$M" "$S"
[ -f "$tmp/swarm/m-backbone-0.gguf" ] && [ -f "$tmp/swarm/m-experts-3.gguf" ] && ok || bad "swarm file names: $(ls "$tmp/swarm")"
edit "$S" /dev/stdout 'if (m.format !== "moontail-manifest-v1" || m.mode !== "swarm" || m.replicas !== 1 || m.shards.length !== 5 || m.shards[1].role !== "experts" || m.shards[1].experts.join() !== "0,1,2,3" || m.shards[0].experts.length !== 0 || typeof m.shards[0].blake2b !== "string") throw new Error("manifest fields")' >/dev/null && ok || bad "manifest fields"

# a llama-3 style model: rope_freqs goes with every shard that computes attention
L="$tmp/l3.gguf"
"$BIN" mkmodel -o "$tmp/l3moe.gguf" --arch llama --type q8_0 --layers 3 --embd 64 --heads 2 --head-dim 32 --ff 64 --ff-exp 32 --rope-freqs >/dev/null || bad "mkmodel l3moe"
expect 0 "all logits identical" timeout 120 "$BIN" check -m "$tmp/l3moe.gguf"
"$BIN" mkmodel -o "$L" --arch llama --dense --type q8_0 --layers 3 --embd 64 --heads 2 --head-dim 32 --ff 64 --rope-freqs >/dev/null && ok || bad "mkmodel --rope-freqs"
expect 0 "manifest" "$BIN" split "$L" --plan cell:3 -o "$tmp/l3"
expect 0 "ok: 4 shards" "$BIN" plan check "$L" "$tmp/l3/l3-cell-manifest.json"
"$BIN" eval -m "$L" --ids 1,2,3 --top 5 >"$tmp/l3a.txt" 2>&1 || bad "eval l3"
"$BIN" split "$L" --layers 0:3 --head -o "$tmp/l3all.gguf" >/dev/null || bad "split l3"
"$BIN" eval -m "$tmp/l3all.gguf" --ids 1,2,3 --top 5 >"$tmp/l3b.txt" 2>&1 && cmp -s "$tmp/l3a.txt" "$tmp/l3b.txt" && ok || bad "l3 whole shard evaluates differently"

# broken sets
edit "$S" "$tmp/swarm/missing.json" 'm.shards.pop()'
expect 1 "held by no shard" "$BIN" plan check "$M" "$tmp/swarm/missing.json"
edit "$S" "$tmp/swarm/dup.json" 'm.shards.push(m.shards[2])'
expect 1 "held 2 times, want 1" "$BIN" plan check "$M" "$tmp/swarm/dup.json"
edit "$S" "$tmp/swarm/twice.json" 'm.shards = m.shards.concat(m.shards); m.replicas = 2'
expect 0 "exactly 2 times" "$BIN" plan check "$M" "$tmp/swarm/twice.json"
"$BIN" split "$tmp/other.gguf" --plan swarm:4 -o "$tmp/oswarm" >/dev/null || bad "split other"
edit "$S" "$tmp/swarm/foreign.json" "m.shards[1].file = '$tmp/oswarm/other-experts-0.gguf'"
expect 1 "different model" "$BIN" plan check "$M" "$tmp/swarm/foreign.json"
cp "$tmp/swarm/m-experts-2.gguf" "$tmp/keep.gguf"
size=$(stat -c %s "$tmp/swarm/m-experts-2.gguf")
printf '\x55' | dd of="$tmp/swarm/m-experts-2.gguf" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
expect 1 "stored hash" "$BIN" plan check "$M" "$S"
cp "$tmp/keep.gguf" "$tmp/swarm/m-experts-2.gguf"
expect 0 "ok:" "$BIN" plan check "$M" "$S"

# bad arguments
expect 2 "outside the model's layers; it has 4 layers" "$BIN" split "$M" --layers 2:9 -o "$tmp/x.gguf"
expect 2 "is empty" "$BIN" split "$M" --layers 2:2 -o "$tmp/x.gguf"
expect 2 "expert id 16 is out of range" "$BIN" split "$M" --layers 1:2 --experts 3,16 -o "$tmp/x.gguf"
expect 2 "expert id 4 is listed twice" "$BIN" split "$M" --layers 1:2 --experts 1-5,4 -o "$tmp/x.gguf"
expect 2 "expects A:B" "$BIN" split "$M" --layers 3 -o "$tmp/x.gguf"
expect 2 "holds no tensors" "$BIN" split "$M" --layers 0:1 --no-attention -o "$tmp/x.gguf"
expect 2 "contradict" "$BIN" split "$M" --layers 0:1 --attention --no-attention -o "$tmp/x.gguf"
expect 2 "-o FILE is required" "$BIN" split "$M" --layers 0:1
expect 2 "give --layers" "$BIN" split "$M" -o "$tmp/x.gguf"
expect 2 "model file first" "$BIN" split --layers 0:1 -o "$tmp/x.gguf"
expect 2 "unknown option" "$BIN" split "$M" --frob
expect 2 "cell:N or swarm:N" "$BIN" split "$M" --plan mesh:2 -o "$tmp/p"
expect 2 "drop --layers" "$BIN" split "$M" --plan cell:2 --layers 0:1 -o "$tmp/p"
expect 1 "1 to 4 stages" "$BIN" split "$M" --plan cell:5 -o "$tmp/p"
expect 1 "1 to 16 expert shards" "$BIN" split "$M" --plan swarm:17 -o "$tmp/p"
expect 1 "already a shard" "$BIN" split "$tmp/e.gguf" --layers 1:2 -o "$tmp/x.gguf"
expect 1 "/nonexistent.gguf" "$BIN" split /nonexistent.gguf --layers 0:1 -o "$tmp/x.gguf"
expect 2 "expects MODEL MANIFEST" "$BIN" plan check "$M"
expect 2 "unknown subcommand" "$BIN" plan frob
expect 1 "not valid JSON" "$BIN" plan check "$M" "$M"
expect 1 "nonexistent" "$BIN" plan check "/nonexistent/m.gguf" "$S"
mkfifo "$tmp/fifo"
expect 1 "not a regular file" "$BIN" split "$M" --head -o "$tmp/fifo"
[ -p "$tmp/fifo" ] && ok || bad "split replaced a fifo"
[ ! -e "$tmp/x.gguf" ] && ok || bad "a failed split left a file behind"

finish
