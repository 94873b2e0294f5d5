# long_prompt.bash - a long greedy generation through a registry, started in
# the background so a test can do something to the cell while it runs (the
# fault tests test_registry_netns.sh and test_faults_netns.sh, and on loopback
# test_registry_cli.sh and test_oneway_cli.sh). Sourced after harness.bash;
# uses the caller's RQ (the requester's namespace prefix; unset or empty on
# loopback), BIN, P (the `prompt --registry ...` arguments), PROMPT, NLONG
# (tokens; default 600), tmp and pids.

# long_prompt NAME [TIMEOUT_S [ARGS...]]: writes $tmp/NAME.txt and .err, sets
# PPID_ (wait for it). ARGS go to `prompt` (--chain). The generation stops
# itself at position ${PAUSE_AT:-100} (past the prompt, so mid-generation;
# MOONTAIL_TEST_PAUSE_AT_POSITION, docs/testing.md) and this returns once it
# has, with ROUTE (the first route taken: "ADDR[a,b) ..." hops, not a route
# that could not be opened), FIRST and LAST (the addresses of its first and
# last stage) set: the caller does its damage while nothing can race it, then
# calls resume_prompt.
long_prompt() {
    local name=$1 limit=${2:-90}
    shift $(($# < 2 ? $# : 2))
    MOONTAIL_TEST_PAUSE_AT_POSITION=${PAUSE_AT:-100} timeout "$limit" ${RQ[@]+"${RQ[@]}"} "$BIN" "${P[@]}" \
        -p "$PROMPT" -n "${NLONG:-600}" --temp 0 --ignore-eos "$@" >"$tmp/$name.txt" 2>"$tmp/$name.err" &
    PPID_=$!
    pids+=("$PPID_")
    wait_stopped "$PPID_" "$limit" ||
        bad "$name: the generation did not stop at position ${PAUSE_AT:-100}: $(tail -3 "$tmp/$name.err")"
    ROUTE=$(sed -n 's/^[^ ]* [a-z]* requester: route: \([0-9.]*:[0-9]*\[\)/\1/p' "$tmp/$name.err" | head -1)
    FIRST=${ROUTE%%\[*}
    LAST=${ROUTE##* }
    LAST=${LAST%%\[*}
}

# resume_prompt: lets the generation that long_prompt stopped go on
resume_prompt() { [ -n "${STOPPED:-}" ] && kill -CONT "$STOPPED"; }
