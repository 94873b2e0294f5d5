# long_prompt.bash - a long greedy generation through a registry, started in
# the background so a test can do something to the cell while it runs (the
# fault tests test_registry_netns.sh and test_faults_netns.sh). Sourced after
# harness.bash; uses the caller's RQ (the requester's namespace prefix), BIN,
# P (the `prompt --registry ...` arguments), PROMPT, NLONG, tmp and pids.

# long_prompt NAME [TIMEOUT_S]: writes $tmp/NAME.txt and .err, sets PPID_;
# waits until it has a route and has printed some text; sets ROUTE, FIRST and
# LAST (the addresses of the route's first and last stage)
long_prompt() {
    local name=$1 limit=${2:-90}
    timeout "$limit" "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n "$NLONG" --temp 0 --ignore-eos \
        >"$tmp/$name.txt" 2>"$tmp/$name.err" &
    PPID_=$!
    pids+=("$PPID_")
    ROUTE=""
    for _ in $(seq 1 500); do
        ROUTE=$(sed -n 's/^[^ ]* [a-z]* requester: route: //p' "$tmp/$name.err" | head -1)
        [ -n "$ROUTE" ] && [ "$(stat -c %s "$tmp/$name.txt")" -gt 20 ] && break
        kill -0 $PPID_ 2>/dev/null || break
        sleep 0.02
    done
    FIRST=${ROUTE%%\[*}
    LAST=${ROUTE##* }
    LAST=${LAST%%\[*}
}
