#!/usr/bin/env bash
# test_check_cli.sh - `moontail check` end to end: on the built-in model, on a
# deepseek2 MoE model and on a dense llama model it runs a prompt through a
# local two-stage pipeline and a local expert server, finds every logit
# identical to the local run and exits 0; it leaves no temporary files; a
# missing model is a clear error with exit status 1.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 120"
export TMPDIR="$tmp/scratch"
mkdir -p "$TMPDIR"

# check_model NAME ARGS...: `moontail check ARGS` passes, both cases identical
check_model() {
    local name=$1
    shift
    expect 0 "all logits identical" "$BIN" check -t 2 "$@"
    if grep -q "^pipeline, 2 stages.*identical$" "$tmp/o"; then ok; else bad "$name: pipeline not identical: $(cat "$tmp/o")"; fi
    if grep -q "DIFFERENT\|FAILED" "$tmp/o"; then bad "$name: $(cat "$tmp/o")"; else ok; fi
}

check_model built-in
grep -q "^backbone + expert server (all 8 experts).*identical$" "$tmp/o" && ok || bad "built-in: expert server case: $(cat "$tmp/o")"

$T "$BIN" mkmodel -o "$tmp/ds.gguf" --arch deepseek2 --layers 3 --dense-layers 1 --seed 4 >/dev/null && ok || bad "mkmodel deepseek2"
check_model deepseek2 -m "$tmp/ds.gguf" -p "Hello, world"
grep -q "^backbone + expert server.*identical$" "$tmp/o" && ok || bad "deepseek2: expert server case: $(cat "$tmp/o")"

$T "$BIN" mkmodel -o "$tmp/dense.gguf" --arch llama --dense --layers 4 --seed 6 >/dev/null && ok || bad "mkmodel llama --dense"
check_model "llama dense" -m "$tmp/dense.gguf" -p "a short prompt"
grep -q "^backbone + expert server.*skipped" "$tmp/o" && ok || bad "dense: expert case not skipped: $(cat "$tmp/o")"

# nothing left behind in the temporary directory
left=$(ls -A "$TMPDIR")
[ -z "$left" ] && ok || bad "temporary files left behind: $left"

# errors
expect 1 "moontail check: .*nope.gguf" "$BIN" check -m "$tmp/nope.gguf"
expect 1 "more than the model's context\|no tokens" "$BIN" check -m "$tmp/dense.gguf" -p "$(head -c 20000 /dev/zero | tr '\0' x)"
expect 2 "unknown option\|usage" "$BIN" check --bogus
expect 0 "usage: moontail check" "$BIN" check --help
finish
