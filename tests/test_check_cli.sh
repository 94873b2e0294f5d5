#!/usr/bin/env bash
# test_check_cli.sh - `moontail check` end to end: on the built-in model, on
# kimi-k3 and kimi-linear models, on a deepseek2 MoE model and on a dense
# llama model it runs a prompt through a local two-stage pipeline, a chained
# pipeline cut at the hardest places, a local expert server and a paired
# stage, finds every logit identical to the local run and exits 0; it leaves no temporary files; a
# missing model is a clear error with exit status 1.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 120"
export TMPDIR="$tmp/scratch"
mkdir -p "$TMPDIR"

# check_model NAME ARGS...: `moontail check ARGS` passes, every case identical or skipped
check_model() {
    local name=$1
    shift
    expect 0 "all logits identical" "$BIN" check -t 2 "$@"
    if grep -q "^pipeline, 2 stages.*identical$" "$tmp/o"; then ok; else bad "$name: pipeline not identical: $(cat "$tmp/o")"; fi
    if grep -q "DIFFERENT\|FAILED" "$tmp/o"; then bad "$name: $(cat "$tmp/o")"; else ok; fi
}
# has NAME PATTERN: the last check's output has a line matching PATTERN
has() { grep -q "$2" "$tmp/o" && ok || bad "$1: no line matching '$2' in: $(cat "$tmp/o")"; }

check_model built-in
has built-in "^backbone + expert server (all 8 experts).*identical$"
has built-in "^paired stage: experts 0-3 + partner 4-7 .*identical$"

# kimi-k3: six layers, a checkpoint every 2 (banked by layers 0, 2, 4), MLA at 2 and 5, latent
# experts; the chained pipeline is cut inside a residual block (1), on a block boundary (2) and
# between an MLA and a KDA layer (3), so checkpoints and recurrent state cross every kind of cut
$T "$BIN" mkmodel -o "$tmp/k3.gguf" --arch kimi-k3 --layers 6 --mla-layers 2,5 --res-block 2 \
    --latent 32 --embd 64 --heads 4 --kda-head-dim 16 --experts 16 --experts-used 4 --ff-exp 32 \
    --seed 9 >/dev/null && ok || bad "mkmodel kimi-k3"
check_model kimi-k3 -m "$tmp/k3.gguf" -p "Hello, world"
has kimi-k3 "^chained, cut at 1 (in a residual block), 2 (on a block boundary), 3 (between KDA and MLA) .*identical$"
has kimi-k3 "^backbone + expert server (all 16 experts).*identical$"
has kimi-k3 "^paired stage: experts 0-7 + partner 8-15 .*identical$"
# kimi-linear: no residuals; cut where KDA meets MLA
$T "$BIN" mkmodel -o "$tmp/kl.gguf" --arch kimi-linear --layers 4 --mla-layers 1,3 --experts 16 \
    --seed 10 >/dev/null && ok || bad "mkmodel kimi-linear"
check_model kimi-linear -m "$tmp/kl.gguf" -p "Hello, world"
has kimi-linear "^chained, cut at 1 (between KDA and MLA) .*identical$"
has kimi-linear "^paired stage.*identical$"

$T "$BIN" mkmodel -o "$tmp/ds.gguf" --arch deepseek2 --layers 3 --dense-layers 1 --seed 4 >/dev/null && ok || bad "mkmodel deepseek2"
check_model deepseek2 -m "$tmp/ds.gguf" -p "Hello, world"
grep -q "^backbone + expert server.*identical$" "$tmp/o" && ok || bad "deepseek2: expert server case: $(cat "$tmp/o")"

$T "$BIN" mkmodel -o "$tmp/dense.gguf" --arch llama --dense --layers 4 --seed 6 >/dev/null && ok || bad "mkmodel llama --dense"
check_model "llama dense" -m "$tmp/dense.gguf" -p "a short prompt"
grep -q "^backbone + expert server.*skipped" "$tmp/o" && ok || bad "dense: expert case not skipped: $(cat "$tmp/o")"
has dense "^paired stage .*skipped"

# nothing left behind in the temporary directory
left=$(ls -A "$TMPDIR")
[ -z "$left" ] && ok || bad "temporary files left behind: $left"

# errors
expect 1 "moontail check: .*nope.gguf" "$BIN" check -m "$tmp/nope.gguf"
expect 1 "more than the model's context\|no tokens" "$BIN" check -m "$tmp/dense.gguf" -p "$(head -c 20000 /dev/zero | tr '\0' x)"
expect 2 "unknown option\|usage" "$BIN" check --bogus
expect 0 "usage: moontail check" "$BIN" check --help
finish
