#!/usr/bin/env bash
# test_split_memory.sh - cutting shards takes bounded memory whatever the
# model's size: on a synthetic model of about 0.9 GB (made once, kept in the
# build directory), `split --plan cell:2`, `split` of one shard holding the
# whole model, `plan check` of both and `split --parts 2` (whose identity is
# the model's) each peak under 512 MB of resident memory (GNU time's maximum
# RSS), with the model hashed (not cached) by the splits; the shards check
# out. The figures are printed. Under the sanitizers the bound is not
# judged (their allocator and shadow memory are theirs, not the writer's),
# only printed.
set -u
. "$(dirname "$0")/lib/harness.bash"
BOUND_KB=$((512 * 1024))
TIME=/usr/bin/time
if [ ! -x "$TIME" ]; then
    echo "SKIP: $TIME (Debian package 'time') is missing; './dev test' installs it"
    exit 0
fi

data="${MT_BUILD:-$tmp}/test-data"
mkdir -p "$data"
M="$data/split-memory-q8-l8-e1024-x64.gguf"
if [ ! -s "$M" ]; then
    "$BIN" mkmodel -o "$M.tmp" --type q8_0 --layers 8 --embd 1024 --heads 8 --head-dim 128 \
        --ff 1024 --experts 64 --experts-used 4 --ff-exp 512 >/dev/null && mv "$M.tmp" "$M" ||
        bad "mkmodel"
fi
model_mb=$(($(stat -c %s "$M") / 1000000))
[ "$model_mb" -gt 800 ] && ok || bad "the model is $model_mb MB, want more than the bound"

# peak NAME CMD...: runs CMD under GNU time; its peak RSS (kB) in $tmp/NAME.kb, output in $tmp/NAME.out
peak() {
    local name=$1
    shift
    $TIME -f %M -o "$tmp/$name.kb" "$@" >"$tmp/$name.out" 2>&1
}
judge() { # judge NAME WHAT
    local kb
    kb=$(tail -1 "$tmp/$1.kb")
    printf 'peak RSS %-34s %6.1f MB\n' "$2" "$(node -e "console.log($kb / 1024)")"
    if [ "${MT_SANITIZE:-0}" = 1 ]; then
        echo "  (not judged: the sanitizers' memory is in this figure)"
    elif [ "$kb" -lt "$BOUND_KB" ]; then
        ok
    else
        bad "$2 peaked at $kb kB, over the bound of $BOUND_KB kB"
    fi
}
C=(--hash-cache "$tmp/c.sqlite")

peak plan "$BIN" split "$M" --plan cell:2 -o "$tmp/cell" "${C[@]}" && ok || bad "split --plan: $(cat "$tmp/plan.out")"
judge plan "split --plan cell:2 ($model_mb MB)"
grep -q "model hashes: [1-9][0-9.]* MB read" "$tmp/plan.out" && ok || bad "the split did not hash the model: $(cat "$tmp/plan.out")"
peak check "$BIN" plan check "$M" "$tmp/cell/"*-cell-manifest.json "${C[@]}" && grep -q "ok: 3 shards" "$tmp/check.out" && ok || bad "plan check: $(cat "$tmp/check.out")"
judge check "plan check (cell:2)"
sid=$(json 'console.log(o.source_id)' <"$tmp/cell/"*-cell-manifest.json)
rm -rf "$tmp/cell"

peak one "$BIN" split "$M" --layers 0:8 --head -o "$tmp/all.gguf" "${C[@]}" --rehash && ok || bad "split one shard: $(cat "$tmp/one.out")"
shard_mb=$(($(stat -c %s "$tmp/all.gguf") / 1000000))
judge one "split, one shard of $shard_mb MB"
grep -q "model hashes: [1-9][0-9.]* MB read" "$tmp/one.out" && ok || bad "--rehash did not hash the model: $(cat "$tmp/one.out")"
# a manifest of that one shard: it alone holds every tensor once
printf '{"format": "moontail-manifest-v1", "source_id": "%s", "replicas": 1, "shards": [{"file": "all.gguf"}]}\n' "$sid" >"$tmp/one.json"
peak check1 "$BIN" plan check "$M" "$tmp/one.json" "${C[@]}" && grep -q "ok: 1 shards" "$tmp/check1.out" && ok || bad "plan check of the one shard: $(cat "$tmp/check1.out")"
judge check1 "plan check (one shard)"
rm -f "$tmp/all.gguf"

# the model as a split set: streamed too, its identity taken from the bytes as they are copied
peak parts "$BIN" split "$M" --parts 2 -o "$tmp/p" -t 2 && ok || bad "split --parts 2: $(cat "$tmp/parts.out")"
judge parts "split --parts 2"
grep -q "^model identity $sid\$" "$tmp/parts.out" && ok || bad "the parts' identity is not the model's $sid: $(cat "$tmp/parts.out")"
[ "$(cat "$tmp"/p-0000[12]-of-00002.gguf | wc -c)" -gt $((model_mb * 1000000)) ] && ok || bad "the parts hold less than the model"
rm -f "$tmp"/p-*.gguf

finish
