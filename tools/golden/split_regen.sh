#!/usr/bin/env bash
# split_regen.sh - rebuilds tests/golden/split.json: for a few synthetic
# models, the sha256 of each file of the split set that llama.cpp's own GGUF
# library writes (split_ref.c, gguf-split's procedure on libggml-base.so of
# node-llama-cpp) when given the cut and model identity `moontail split
# --parts` chose. tests/test_split_cli.sh checks that moontail writes the same
# bytes. Each set is also loaded by llama.cpp (gen.mjs), which must give the
# same greedy continuation and top-5 at every position as for the single
# file. Needs the node-llama-cpp install of regen.sh and a built moontail
# (MT_BIN, default build/moontail). Commit the regenerated JSON.
set -euo pipefail
cd "$(dirname "$0")"
BIN=$(realpath "${MT_BIN:-../../build/moontail}")
LIB=$PWD/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
[ -f "$LIB" ] || {
    echo "split_regen: $LIB is missing; install node-llama-cpp first (see regen.sh)" >&2
    exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O1 -Wall -Wextra -o "$tmp/split_ref" split_ref.c -ldl

# name parts mkmodel-arguments...
cases=(
    "qwen3moe-q8_0 3 --arch qwen3moe --type q8_0 --seed 1"
    "kimi-k3-q8_0 3 --arch kimi-k3 --type q8_0 --layers 4 --mla-layers 1,3 --embd 64 --heads 4 --kda-head-dim 16 --experts 8 --experts-used 2 --res-block 2 --latent 32 --seed 5"
    "deepseek2-f32 4 --arch deepseek2 --type f32 --layers 3 --seed 2"
)
out="$tmp/split.json"
echo '{"format": "moontail-split-golden-v1",' >"$out"
echo ' "generator": "tools/golden/split_ref.c on llama.cpp v0.4.0 libggml-base.so (node-llama-cpp 3.21.1)",' >>"$out"
echo ' "cases": [' >>"$out"
first=1
for c in "${cases[@]}"; do
    read -r name parts args <<<"$c"
    # shellcheck disable=SC2086
    "$BIN" mkmodel -o "$tmp/$name.gguf" $args
    "$BIN" split "$tmp/$name.gguf" --parts "$parts" -o "$tmp/ours-$name" >"$tmp/split.out" 2>/dev/null
    counts=$(sed -n 's/^wrote .*: \([0-9]*\) tensors,.*/\1/p' "$tmp/split.out" | tr '\n' ' ')
    id=$(sed -n 's/^model identity //p' "$tmp/split.out")
    # shellcheck disable=SC2086
    "$tmp/split_ref" "$LIB" "$tmp/$name.gguf" "$tmp/ref-$name" "$id" $counts
    first_part="$tmp/ref-$name-00001-of-$(printf %05d "$parts").gguf"
    cat >"$tmp/job.json" <<EOF
{"top_k": 5, "models": [
 {"name": "single", "path": "$tmp/$name.gguf", "prompts": [{"name": "p", "tokens": [1, 2, 3, 4, 5], "n_predict": 8}]},
 {"name": "split", "path": "$first_part", "prompts": [{"name": "p", "tokens": [1, 2, 3, 4, 5], "n_predict": 8}]}]}
EOF
    node gen.mjs "$tmp/job.json" --out "$tmp/gold.json" --quiet
    node -e '
const o = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
if (JSON.stringify(o.models[0].prompts) !== JSON.stringify(o.models[1].prompts))
    throw new Error("llama.cpp computes the split set differently from the single file");
' "$tmp/gold.json"
    hashes=""
    for k in $(seq 1 "$parts"); do
        h=$(sha256sum "$tmp/ref-$name-$(printf %05d "$k")-of-$(printf %05d "$parts").gguf" | cut -d' ' -f1)
        hashes="$hashes${hashes:+, }\"$h\""
    done
    argv=$(printf '"%s", ' $args)
    [ $first = 1 ] || echo ',' >>"$out"
    first=0
    printf '  {"name": "%s", "mkmodel": [%s], "model_sha256": "%s", "parts": %s,\n   "tensors": [%s], "source_id": "%s",\n   "sha256": [%s]}' \
        "$name" "${argv%, }" "$(sha256sum "$tmp/$name.gguf" | cut -d' ' -f1)" "$parts" \
        "$(echo $counts | sed 's/ /, /g')" "$id" "$hashes" >>"$out"
    echo "split_regen: $name: $parts parts ($counts tensors), llama.cpp: same results" >&2
done
printf '\n]}\n' >>"$out"
cp "$out" ../../tests/golden/split.json
echo "split_regen: wrote tests/golden/split.json" >&2
