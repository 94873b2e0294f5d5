#!/usr/bin/env bash
# test_hash_cache_cli.sh - the model hash cache end to end (hash_cache.h):
#   - `split` hashes the model once: a second split, and `plan check`, read
#     0 bytes of it (their expert slices too), with the same shards;
#   - --rehash reads it again, --hash-cache none keeps no cache, the default
#     cache lives under $XDG_CACHE_HOME/moontail/;
#   - a touched model, and a model with one byte changed and its size and
#     modification time put back, are read again (and the old shards then
#     fail `plan check`);
#   - a registry restarted on an unchanged model reads none of it (its log
#     says "read 0 bytes", /v1/status model_hashes.bytes_read is 0), and
#     reads it again once touched or with --rehash.
set -u
. "$(dirname "$0")/lib/harness.bash"
status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" --type q8_0 --layers 4 --embd 128 --heads 4 --head-dim 32 --ff 128 \
    --ff-exp 64 --experts 8 --experts-used 2 >/dev/null || bad "mkmodel"
C="$tmp/c.sqlite"
# read_mb OUTFILE: the "model hashes: X MB read" figure of a split or plan check
read_mb() { sed -n 's/.*model hashes: \([0-9.]*\) MB read.*/\1/p' "$1" | tail -1; }

# ---- split and plan check
"$BIN" split "$M" --plan swarm:3 -o "$tmp/s1" --hash-cache "$C" >"$tmp/s1.out" 2>&1 || bad "split 1: $(cat "$tmp/s1.out")"
first=$(read_mb "$tmp/s1.out")
[ -n "$first" ] && [ "$first" != "0.0" ] && ok || bad "the first split read '$first' MB: $(cat "$tmp/s1.out")"
"$BIN" split "$M" --plan swarm:3 -o "$tmp/s2" --hash-cache "$C" >"$tmp/s2.out" 2>&1 || bad "split 2"
[ "$(read_mb "$tmp/s2.out")" = "0.0" ] && ok || bad "the second split read the model again: $(cat "$tmp/s2.out")"
for f in "$tmp"/s1/*; do cmp -s "$f" "$tmp/s2/$(basename "$f")" || bad "$(basename "$f") differs between the splits"; done
ok
expect 0 "0.0 MB read" "$BIN" plan check "$M" "$tmp/s1/m-swarm-manifest.json" --hash-cache "$C"
grep -q "ok: 4 shards" "$tmp/o" && ok || bad "plan check through the cache: $(cat "$tmp/o")"
"$BIN" split "$M" --plan swarm:3 -o "$tmp/s3" --hash-cache "$C" --rehash >"$tmp/s3.out" 2>&1 || bad "split --rehash"
[ "$(read_mb "$tmp/s3.out")" = "$first" ] && ok || bad "--rehash read '$(read_mb "$tmp/s3.out")' MB, want $first"
"$BIN" split "$M" --head -o "$tmp/h.gguf" --hash-cache none >"$tmp/none.out" 2>&1 || bad "split --hash-cache none"
grep -q "from the cache" "$tmp/none.out" && bad "--hash-cache none used a cache: $(cat "$tmp/none.out")" || ok
XDG_CACHE_HOME="$tmp/xdg" "$BIN" split "$M" --head -o "$tmp/h.gguf" >"$tmp/xdg.out" 2>&1 || bad "split with the default cache"
[ -f "$tmp/xdg/moontail/hashes.sqlite" ] && grep -q "$tmp/xdg/moontail/hashes.sqlite" "$tmp/xdg.out" && ok || bad "the default cache is not under XDG_CACHE_HOME: $(cat "$tmp/xdg.out")"
expect 0 "unable to open" "$BIN" split "$M" --head -o "$tmp/h.gguf" --hash-cache /nonexistent/dir/c.sqlite
grep -q "wrote" "$tmp/o" && ok || bad "an unusable cache stopped the split: $(cat "$tmp/o")"

# ---- a changed model is noticed
touch "$M"
"$BIN" split "$M" --head -o "$tmp/h.gguf" --hash-cache "$C" >"$tmp/t.out" 2>&1 || bad "split after touch"
[ "$(read_mb "$tmp/t.out")" = "$first" ] && ok || bad "a touched model was not read again: $(cat "$tmp/t.out")"
cp -p "$M" "$tmp/stamp" # keeps the modification time
size=$(stat -c %s "$M")
printf '\x55' | dd of="$M" bs=1 seek=$((size - 64)) conv=notrunc 2>/dev/null
touch -r "$tmp/stamp" "$M"
[ "$(stat -c %s.%Y "$M")" = "$(stat -c %s.%Y "$tmp/stamp")" ] && ok || bad "size and mtime not restored"
expect 1 "differs from the model's bytes\|different model" "$BIN" plan check "$M" "$tmp/s1/m-swarm-manifest.json" --hash-cache "$C"
[ "$(read_mb "$tmp/o")" = "$first" ] && ok || bad "a byte changed under the same mtime was not read again: $(cat "$tmp/o")"
cp -p "$tmp/stamp" "$M"

# ---- the registry: its cache beside its database
REG=(registry --model "$M" --db "$tmp/r/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" --listen 127.0.0.1:0)
mkdir -p "$tmp/r"
# start_reg NAME [ARGS...]: a registry, its hashing figures in HREAD / HCACHED
start_reg() {
    local name=$1
    shift
    start_bg "$name" "$BIN" "${REG[@]}" "$@"
    URL=$ADDR
    local st
    st=$(status)
    HREAD=$(echo "$st" | json 'console.log(o.model_hashes.bytes_read)')
    HCACHED=$(echo "$st" | json 'console.log(o.model_hashes.bytes_cached)')
    kill -TERM "$PID"
    wait "$PID" 2>/dev/null
}
start_reg reg1
[ "${HREAD:-0}" -gt 0 ] && [ "$HCACHED" = 0 ] && ok || bad "first registry start: read ${HREAD:-?}, cached ${HCACHED:-?}: $(cat "$tmp/reg1.err")"
total=$HREAD
[ -f "$tmp/r/hashes.sqlite" ] && ok || bad "no hashes.sqlite beside the registry's database: $(ls "$tmp/r")"
start_reg reg2
[ "$HREAD" = 0 ] && [ "$HCACHED" = "$total" ] && ok || bad "restart on the same model: read $HREAD, cached $HCACHED of $total"
grep -q "registry: model hashes: read 0 bytes" "$tmp/reg2.err" && ok || bad "the restart's log does not say it read 0 bytes: $(cat "$tmp/reg2.err")"
echo "registry restart: $(grep 'model hashes' "$tmp/reg2.err")"
touch "$M"
start_reg reg3
[ "$HREAD" = "$total" ] && ok || bad "a touched model: read $HREAD of $total"
start_reg reg4 --rehash
[ "$HREAD" = "$total" ] && ok || bad "--rehash: read $HREAD of $total"
start_reg reg5 --hash-cache none
[ "$HREAD" = "$total" ] && grep -q "(none)" "$tmp/reg5.err" && ok || bad "--hash-cache none: read $HREAD of $total"

finish
