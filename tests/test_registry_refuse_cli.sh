#!/usr/bin/env bash
# test_registry_refuse_cli.sh - a model no node could load never gets placed,
# and a node that cannot serve its shard says why. Checks:
#   - `moontail registry` refuses to start on a model with a missing tensor, a
#     misshapen one, head_count 0, more experts used than exist, an unknown
#     gating function, or a NaN / infinite RoPE base, with the loader's message
#     naming the file (the checks of mt_model_load, before hashing or cutting);
#   - a node whose seed shard was damaged after cutting (head_count 0, with a
#     manifest to match, so that the fetch succeeds and the load fails) reports
#     the loader's reason in its heartbeats: `moontail status --json` carries it
#     on the node and on its DOWN layers, the node is "failing", not "loading"
#     (in the JSON, the text status and the page), the text status prints the
#     reason in its banner and under the node, and it is
#     gone once the node serves a good copy; the status page (headless chromium,
#     skipped with a SKIP line when it cannot run) shows it under the layers, in
#     the banner and under the node's row.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 30"
LIB=$(cd "$(dirname "$0")/lib" && pwd)
PATCH=(python3 "$LIB/gguf_patch.py")
cd "$tmp"

status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }
# shown URL: what the status page at URL shows, as JSON (tests/lib/status_dom.mjs); 1 if
# chromium is missing or cannot run here
CHROME=$(command -v chromium || command -v chromium-browser || true)
shown() {
    [ -n "$CHROME" ] || return 1
    rm -rf "$tmp/chrome"
    timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$tmp/chrome" --virtual-time-budget=3000 --dump-dom "$1" \
        >"$tmp/page.html" 2>>"$tmp/chrome.err" && grep -q 'id="banner"' "$tmp/page.html" &&
        node "$LIB/status_dom.mjs" <"$tmp/page.html"
}

M="$tmp/m.gguf" DS="$tmp/ds.gguf"
"$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 2 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 3 >/dev/null || bad "mkmodel qwen3moe"
"$BIN" mkmodel -o "$DS" --arch deepseek2 --type f32 --layers 2 --dense-layers 1 --seed 4 \
    >/dev/null || bad "mkmodel deepseek2"

# ---- the registry refuses each broken model, naming the file and what is wrong
k=0
refuse() { # refuse MODEL MESSAGE PATCH-ARGS...
    local model=$1 msg=$2
    shift 2
    k=$((k + 1))
    cp "$model" "$tmp/bad$k.gguf"
    "${PATCH[@]}" "$tmp/bad$k.gguf" "$@" || bad "gguf_patch $*"
    expect 1 "bad$k.gguf: .*$msg" "$BIN" registry --model "$tmp/bad$k.gguf" --db "$tmp/r$k.db" \
        --key "$tmp/r$k.key" --shards "$tmp/seed$k" --listen 127.0.0.1:0
    [ -z "$(ls -A "$tmp/seed$k" 2>/dev/null)" ] && ok || bad "registry cut shards of bad$k.gguf"
}
refuse "$M" "tensor 'blk.1.ffn_down_exps.weight' is missing" \
    rename blk.1.ffn_down_exps.weight blk.1.ffn_down_exps.weighX
refuse "$M" "tensor 'blk.1.attn_k.weight' has shape \[64, 128, 1, 1\], expected \[128, 64, 1\]" \
    swap blk.1.attn_k.weight
refuse "$M" "n_head 0" set qwen3moe.attention.head_count 0
refuse "$M" "bad expert counts: 9 used of 8" set qwen3moe.expert_used_count 9
refuse "$DS" "expert_gating_func' is 7, a gating function the engine does not know" \
    set deepseek2.expert_gating_func 7
refuse "$M" "rope.freq_base' is nan; it must be a finite number above 0" \
    set qwen3moe.rope.freq_base nan
refuse "$DS" "rope.freq_base' is inf; it must be a finite number above 0" \
    set deepseek2.rope.freq_base inf
# the node's loader says the same (one code path)
cp "$M" "$tmp/nan.gguf" && "${PATCH[@]}" "$tmp/nan.gguf" set qwen3moe.rope.freq_base nan
expect 1 "nan.gguf: key 'qwen3moe.rope.freq_base' is nan" "$BIN" run -m "$tmp/nan.gguf" -p hi -n 1

# ---- a node that cannot load its shard says why
start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" \
    --shards "$tmp/seed" --replicas 1 --spares 0 --heartbeat-ms 200 --listen 127.0.0.1:0
URL=$ADDR
S=L0-1A-E0-7 # one node with room for the whole model: one stage
curl -sf "$URL/v1/shards/$S/manifest" >/dev/null && ok || bad "the registry did not cut $S"
cp "$tmp/seed/$S.gguf" "$tmp/good.gguf"
"${PATCH[@]}" "$tmp/seed/$S.gguf" set qwen3moe.attention.head_count 0 &&
    "${PATCH[@]}" "$tmp/seed/$S.gguf" manifest "$tmp/seed/$S.json" || bad "damaging $S"
expect 0 "token in" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token"
start_bg n1 "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n1.key" \
    --data "$tmp/d1" --listen 127.0.0.1:0 --name pc1 --capacity-mb 100 --threads 1
wait_for 'o.nodes[0].problem.includes("cannot serve shard '$S': node: ") &&
          o.nodes[0].problem.includes("'$S'.gguf: bad shape:") &&
          o.nodes[0].problem.includes("n_head 0") && o.nodes[0].state == "failing" &&
          o.layers.every(l => l.serving == 0 && l.problem == "node 1 '"'pc1'"': " + o.nodes[0].problem)' 20 &&
    ok || bad "no reason for the node that cannot load: $(status | head -c 1500)"
expect 0 "L0-1 not served: node 1 'pc1': cannot serve shard $S: .*n_head 0" \
    "$BIN" status --registry "$URL"
grep -q "problem: cannot serve shard $S: .*n_head 0" "$tmp/o" && ok ||
    bad "the node's line has no problem: $(cat "$tmp/o")"
# not "loading" (it would load forever): the state says it fails, the line under it why
grep -Eq "^ +1  pc1 +failing +stage +$S " "$tmp/o" && ok || bad "the node's row is not 'failing': $(cat "$tmp/o")"
grep -q "^cell $URL: NOT READY: no replica serving layers 0-1; node 1 'pc1': cannot serve shard $S" "$tmp/o" &&
    ok || bad "the banner does not give the node's reason: $(head -1 "$tmp/o")"
grep -q "node 1 'pc1' cannot serve shard $S" "$tmp/reg.err" && ok || bad "the registry's log has no reason"
if shown "$URL/status" >"$tmp/page.json"; then
    json 'const why = "cannot serve shard '$S': node: ";
      if (!o.banner.why.includes(why) || o.layer_problems.length != 1 ||
          !o.layer_problems[0].startsWith("L0-1 not served: node 1 '"'pc1'"': " + why) ||
          !o.layers.every(l => l.class.includes("down") && l.problem.includes("n_head 0")) ||
          !o.nodes[0].problem.startsWith("problem: " + why) || !o.nodes[0].problem.includes("n_head 0") ||
          o.nodes[0].state != "failing" || o.nodes[0].cells[2] != "failing")
        process.exit(1)' <"$tmp/page.json" && ok || bad "the page shows no reason: $(cat "$tmp/page.json")"
else
    echo "SKIP: the status page in a browser: chromium is missing or does not run here"
fi
# a good copy where the node keeps it: it serves, and the reason is gone
cp "$tmp/good.gguf" "$tmp/d1/$S.gguf"
wait_for 'o.nodes[0].state == "serving" && o.nodes[0].problem == "" &&
          o.layers.every(l => l.serving == 1 && !("problem" in l))' 20 &&
    ok || bad "the reason stayed after the node served: $(status | head -c 1500)"
expect 0 "READY" "$BIN" status --registry "$URL"
! grep -q "not served\|problem:" "$tmp/o" && ok || bad "text status still has a reason: $(cat "$tmp/o")"
finish
