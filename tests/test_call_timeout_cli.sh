#!/usr/bin/env bash
# test_call_timeout_cli.sh - the requester's adaptive call timeout: a route's stage that hangs
# in the middle of a generation (SIGSTOP: alive, connected, silent) is given up after a few
# times the slowest step it has taken so far, not after the whole --call-timeout-ms (60 s
# here). Over 127.0.0.1: a head here, two stage nodes; the stopped stage's failure names the
# wait it was given, which must be a small part of the configured one. Prints how long the
# hang took to detect. (Failing over to another replica after such a failure is what the
# registry tests check; a static route has no other replica, so the prompt ends with an error.)
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 30"


route_nodes_setup
$T "$BIN" split "$M" --plan cell:2 -o "$tmp/cell" >/dev/null && ok || bad "split cell"
start_route_node s0 --shard "$tmp/cell/m-stage-0.gguf" && s0=$ADDR
start_route_node s1 --shard "$tmp/cell/m-stage-1.gguf" && s1=$ADDR
s1_pid=${pids[-1]}
cat >"$tmp/cell.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key",
 "stages": [{"addr": "$s0", "key": "$nodekey"}, {"addr": "$s1", "key": "$nodekey"}]}
EOF

# a long generation, streamed; stage 1 stops once a few dozen tokens came out
timeout 120 "$BIN" prompt --route "$tmp/cell.json" --temp 0 -n 4000 --ignore-eos -p "Hang on" \
    --call-timeout-ms 60000 >"$tmp/out" 2>"$tmp/err" &
prompt_pid=$!
for _ in $(seq 1 400); do
    [ "$(wc -c <"$tmp/out")" -ge 40 ] && break
    sleep 0.05
done
[ "$(wc -c <"$tmp/out")" -ge 40 ] && ok || bad "the prompt produced no text: $(cat "$tmp/err")"
t_stop=$(date +%s%N)
kill -STOP "$s1_pid"
wait "$prompt_pid"
rc=$?
t_end=$(date +%s%N)
kill -CONT "$s1_pid"
detect_ms=$(((t_end - t_stop) / 1000000))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ok || bad "the prompt through a stopped stage exited $rc"
waited=$(sed -n 's/.*no reply within \([0-9]*\) ms.*/\1/p' "$tmp/err" | head -1)
[ -n "$waited" ] && [ "$waited" -lt 60000 ] && grep -q "$s1" "$tmp/err" && ok ||
    bad "the stopped stage was not given up early: $(tail -c 600 "$tmp/err")"
echo "a stage stopped after $(wc -c <"$tmp/out") bytes of output: given up after $detect_ms ms (its wait: ${waited:-?} ms of the configured 60000)"
finish
