#!/usr/bin/env bash
# test_split_cli.sh - `moontail split` and `moontail plan check` end to end:
# one shard (experts, head, whole model), cell and swarm plans that check
# out, manifests with a missing, duplicated, tampered or foreign shard that
# do not, a llama-3 style model whose rope_freqs every stage needs, and
# clear errors with exit codes (2 = bad arguments, 1 = failure).
# Split models (NAME-0000k-of-0000N.gguf): `split --parts` writes the bytes
# llama.cpp's own GGUF library writes (tests/golden/split.json); a 3-part
# model, given by any part, gives the single file's results in run, eval,
# tokenize, check, bench, serve, a node with its prompt, split --layers and
# --plan (the same shard bytes) and plan check (the same identity); broken
# sets and files with a stray tensor or an unknown architecture are refused
# by every command that opens them, naming the file and the problem.
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

# ---- split models
# llama.cpp's GGUF library wrote these sets from the same cut and identity: the same bytes
node -e '
const o = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
for (const c of o.cases)
    console.log([c.name, c.parts, c.model_sha256, c.source_id, c.tensors.join(","), c.sha256.join(","), ...c.mkmodel].join(" "));
' "${MT_SRC:-.}/tests/golden/split.json" >"$tmp/golden_split.txt" || bad "reading tests/golden/split.json"
while read -r name parts msha id counts hashes args; do
    # shellcheck disable=SC2086
    "$BIN" mkmodel -o "$tmp/g-$name.gguf" $args >/dev/null || bad "mkmodel $name"
    [ "$(sha256sum <"$tmp/g-$name.gguf" | cut -d' ' -f1)" = "$msha" ] && ok || bad "$name: mkmodel wrote another model than the golden set's"
    "$BIN" split "$tmp/g-$name.gguf" --parts "$parts" -o "$tmp/g-$name-split.gguf" >"$tmp/gs.out" 2>"$tmp/gs.err" || bad "split --parts $name: $(cat "$tmp/gs.err")"
    grep -q "^model identity $id\$" "$tmp/gs.out" && ok || bad "$name: identity differs: $(cat "$tmp/gs.out")"
    [ "$(sed -n 's/^wrote .*: \([0-9]*\) tensors,.*/\1/p' "$tmp/gs.out" | paste -sd,)" = "$counts" ] && ok || bad "$name: tensors per part differ from $counts: $(cat "$tmp/gs.out")"
    k=0
    for h in ${hashes//,/ }; do
        k=$((k + 1))
        f=$tmp/g-$name-split-$(printf %05d $k)-of-$(printf %05d "$parts").gguf
        [ "$(sha256sum <"$f" | cut -d' ' -f1)" = "$h" ] && ok || bad "$name: part $k differs from llama.cpp's bytes"
    done
    [ $k = "$parts" ] && ok || bad "$name: $k hashes for $parts parts"
done <"$tmp/golden_split.txt"
[ "$(wc -l <"$tmp/golden_split.txt")" -ge 3 ] && ok || bad "tests/golden/split.json has too few cases"

# a 3-part model, given by its middle file: every command gives the single file's results
mkdir -p "$tmp/sp"
expect 0 "model identity" "$BIN" split "$M" --parts 3 -o "$tmp/sp/m.gguf"
S1="$tmp/sp/m-00001-of-00003.gguf" S2="$tmp/sp/m-00002-of-00003.gguf" S3="$tmp/sp/m-00003-of-00003.gguf"
[ -f "$S1" ] && [ -f "$S2" ] && [ -f "$S3" ] && [ "$(ls "$tmp/sp" | wc -l)" = 3 ] && ok || bad "split --parts files: $(ls "$tmp/sp")"
split_id=$(sed -n 's/^model identity //p' "$tmp/o")
[ "$split_id" = "$(json 'process.stdout.write(o.source_id)' <"$S")" ] && ok || bad "the parts' identity is not the model's source_id"
for part in "$S1" "$S2" "$S3"; do
    "$BIN" eval -m "$part" --ids 1,2,3 --top 5 >"$tmp/sa.txt" 2>&1 && cmp -s "$tmp/a.txt" "$tmp/sa.txt" && ok || bad "eval of the split model from $part: $(head -c 300 "$tmp/sa.txt")"
done
"$BIN" run -m "$M" -p "Hello" -n 8 --temp 0 --json 2>/dev/null | tokens >"$tmp/run1.txt"
"$BIN" run -m "$S2" -p "Hello" -n 8 --temp 0 --json 2>/dev/null | tokens >"$tmp/run2.txt"
[ -s "$tmp/run1.txt" ] && cmp -s "$tmp/run1.txt" "$tmp/run2.txt" && ok || bad "run differs on the split model: $(cat "$tmp/run1.txt") vs $(cat "$tmp/run2.txt")"
[ "$("$BIN" tokenize -m "$S3" -p "Hello, split world")" = "$("$BIN" tokenize -m "$M" -p "Hello, split world")" ] && ok || bad "tokenize differs on the split model"
T="timeout 120" expect 0 "all logits identical" "$BIN" check -m "$S2" -t 2
grep -q "DIFFERENT\|FAILED" "$tmp/o" && bad "check on the split model: $(cat "$tmp/o")" || ok
"$BIN" bench -m "$S2" -p 4 -n 2 -r 1 --stream-mib 0 --json >"$tmp/bench.json" 2>"$tmp/bench.err" || bad "bench on the split model: $(cat "$tmp/bench.err")"
total=$(($(stat -c %s "$S1") + $(stat -c %s "$S2") + $(stat -c %s "$S3")))
json "if (o.file_bytes !== $total) throw new Error(o.file_bytes)" <"$tmp/bench.json" && ok || bad "bench file_bytes is not the parts' $total bytes: $(head -c 300 "$tmp/bench.json")"
expect 0 "decode" "$BIN" bench -m "$S2" --layer-times --batches 1 -p 4 -r 1
# shards cut from the split model are the single file's, byte for byte; plans check against either
expect 0 "7 of 16 experts" "$BIN" split "$S3" --layers 1:3 --experts 0,3,5-9 --no-attention -o "$tmp/se.gguf"
cmp -s "$tmp/e.gguf" "$tmp/se.gguf" && ok || bad "an expert shard cut from the split model differs"
expect 0 "manifest" "$BIN" split "$S1" --plan swarm:4 -o "$tmp/sswarm"
for f in "$tmp"/swarm/m-backbone-0.gguf "$tmp"/swarm/m-experts-*.gguf; do
    cmp -s "$f" "$tmp/sswarm/$(basename "$f")" && ok || bad "swarm shard $(basename "$f") from the split model differs"
done
expect 0 "ok: 5 shards" "$BIN" plan check "$S2" "$S"
expect 0 "ok: 5 shards" "$BIN" plan check "$M" "$tmp/sswarm/m-swarm-manifest.json"
# a node serving the whole split model, prompted through a route whose head is the split model
"$BIN" keygen -o "$tmp/req.key" >"$tmp/req.pub" && "$BIN" keygen -o "$tmp/node.key" >"$tmp/node.pub" || bad "keygen"
printf '%s requester\n' "$(cat "$tmp/req.pub")" >"$tmp/auth"
start_bg node "$BIN" node --shard "$S3" --listen 127.0.0.1:0 --threads 1 --key "$tmp/node.key" --authorized "$tmp/auth"
printf '{"head": "%s", "key": "%s", "stages": [{"addr": "%s", "key": "%s"}]}\n' "$S1" "$tmp/req.key" "$ADDR" "$(cat "$tmp/node.pub")" >"$tmp/route.json"
T="timeout 60" "$BIN" prompt --route "$tmp/route.json" -p "Hello" -n 8 --temp 0 --json 2>"$tmp/p.err" | tokens >"$tmp/run3.txt"
[ -s "$tmp/run3.txt" ] && cmp -s "$tmp/run1.txt" "$tmp/run3.txt" && ok || bad "prompt through a node on the split model: $(cat "$tmp/run3.txt") $(cat "$tmp/p.err")"
# serve: the same completion
start_bg serve "$BIN" serve --model "$S2" --no-auth --listen 127.0.0.1:0 -t 1 --model-name split
want=$("$BIN" run -m "$M" -p "Hello" -n 8 --temp 0 --json 2>/dev/null | json 'process.stdout.write(o.text)')
got=$(curl -s "$ADDR/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "split", "prompt": "Hello", "max_tokens": 8, "temperature": 0}' | json 'process.stdout.write(o.choices[0].text)')
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "serve on the split model: '$got' vs run's '$want'"
# a merge (--parts 1) gives back a model with the same identity
expect 0 "model identity $split_id" "$BIN" split "$S2" --parts 1 -o "$tmp/merged"
"$BIN" eval -m "$tmp/merged-00001-of-00001.gguf" --ids 1,2,3 --top 5 >"$tmp/sm.txt" 2>&1 && cmp -s "$tmp/a.txt" "$tmp/sm.txt" && ok || bad "the merged model evaluates differently"

# broken sets: each refused by name
cp -r "$tmp/sp" "$tmp/bk"
B1="$tmp/bk/m-00001-of-00003.gguf" B2="$tmp/bk/m-00002-of-00003.gguf" B3="$tmp/bk/m-00003-of-00003.gguf"
mv "$B2" "$tmp/bk/keep"
expect 1 "m-00002-of-00003.gguf: part 2 of 3 of the split model is missing" "$BIN" eval -m "$B3" --ids 1
"$BIN" split "$tmp/other.gguf" --parts 3 -o "$tmp/bk/o" >/dev/null 2>&1 || bad "split --parts other"
cp "$tmp/bk/o-00002-of-00003.gguf" "$B2"
expect 1 "m-00002-of-00003.gguf: is a part of another model" "$BIN" run -m "$B1" -p x -n 1
"$BIN" split "$M" --parts 2 -o "$tmp/bk/two" >/dev/null 2>&1 || bad "split --parts 2"
cp "$tmp/bk/two-00002-of-00002.gguf" "$B2"
expect 1 "m-00002-of-00003.gguf: belongs to a model split into 2 files" "$BIN" split "$B1" --plan cell:2 -o "$tmp/x"
cp "$B3" "$B2"
expect 1 "m-00002-of-00003.gguf: holds part 3 of 3" "$BIN" tokenize -m "$B1" -p x
head -c 100000 "$tmp/bk/keep" >"$B2"
expect 1 "m-00002-of-00003.gguf.*truncated" "$BIN" plan check "$B1" "$S"
cp "$tmp/bk/keep" "$B2"
cp "$B1" "$tmp/bk/renamed.gguf"
expect 1 "renamed.gguf: is part 1 of a model split into 3 files, but its name" "$BIN" eval -m "$tmp/bk/renamed.gguf" --ids 1
expect 0 "" "$BIN" eval -m "$B1" --ids 1

# guards at open: a stray tensor and an unknown architecture, whatever the command
"$BIN" mkmodel -o "$tmp/stray.gguf" --arch deepseek2 $small --extra-tensor blk.1.ffn_stray.weight >/dev/null || bad "mkmodel --extra-tensor"
"$BIN" mkmodel -o "$tmp/arch.gguf" --arch deepseek2 $small --arch-name deepseek9 >/dev/null || bad "mkmodel --arch-name"
"$BIN" split "$tmp/stray.gguf" --parts 2 -o "$tmp/sstray" 2>/dev/null && bad "split --parts wrote a model with a stray tensor" || ok
stray="tensor 'blk.1.ffn_stray.weight' is not used by the deepseek2 loader"
for cmd in "split --plan cell:2 -o $tmp/x" "split --layers 0:1 -o $tmp/x.gguf" "split --parts 2 -o $tmp/x"; do
    # shellcheck disable=SC2086
    expect 1 "stray.gguf: $stray" "$BIN" split "$tmp/stray.gguf" ${cmd#split }
    # shellcheck disable=SC2086
    expect 1 "arch.gguf: architecture 'deepseek9' is not supported" "$BIN" split "$tmp/arch.gguf" ${cmd#split }
done
expect 1 "$stray" "$BIN" plan check "$tmp/stray.gguf" "$S"
expect 1 "$stray" "$BIN" tokenize -m "$tmp/stray.gguf" -p x
expect 1 "$stray" "$BIN" eval -m "$tmp/stray.gguf" --ids 1
expect 1 "architecture 'deepseek9' is not supported (supported: llama" "$BIN" tokenize -m "$tmp/arch.gguf" -p x

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
expect 2 "drop --plan" "$BIN" split "$M" --parts 2 --layers 0:1 -o "$tmp/x"
expect 2 "whole number" "$BIN" split "$M" --parts 0 -o "$tmp/x"
expect 2 "every part needs one; use at most" "$BIN" split "$M" --parts 60000 -o "$tmp/x"
expect 2 "-o PREFIX is required" "$BIN" split "$M" --parts 2
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
left=$(find "$tmp" -maxdepth 1 -type f \( -name 'x*' -o -name 'sstray*' \))
[ -z "$left" ] && ok || bad "a failed split left a file behind: $left"

finish
