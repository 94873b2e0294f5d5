#!/usr/bin/env bash
# test_shell.sh - `moontail` with no command: a chat in the terminal, driven
# here through a pipe. Greedy answers are deterministic; the second turn of
# a conversation differs from the same message asked fresh (the model sees
# the earlier turns); after /reset it is asked fresh again; /help, /status
# and unknown commands answer; end of input leaves with status 0; bad
# options exit 2; an unreachable registry is a clear error.
set -u
. "$(dirname "$0")/lib/harness.bash"
export MOONTAIL_HOME="$tmp/home" # no setup: no registry from a config
T="timeout 60"
M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 2 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 9 --readable >/dev/null || bad "mkmodel"
chat() { printf '%b' "$1" | $T "$BIN" -m "$M" -n 8 --temp 0 2>"$tmp/err"; }
# the answers: each is the line before "(N tokens, ...)"
answers() { awk '/^\([0-9]+ tokens, /{print prev} {prev=$0}'; }

chat 'Hello\nHi again\n' >"$tmp/a" && ok || bad "shell exited non-zero: $(cat "$tmp/err")"
chat 'Hi again\n' >"$tmp/b" || bad "shell (fresh) failed"
chat 'Hello\n/reset\nHi again\n/help\n/status\n/bogus\n/quit\nnot read\n' >"$tmp/c" || bad "shell with commands failed"
mapfile -t A < <(answers <"$tmp/a")
mapfile -t B < <(answers <"$tmp/b")
mapfile -t C < <(answers <"$tmp/c")
[ ${#A[@]} -eq 2 ] && [ ${#B[@]} -eq 1 ] && [ ${#C[@]} -eq 2 ] && ok || bad "answer counts ${#A[@]} ${#B[@]} ${#C[@]}: $(cat "$tmp/c")"
[ "${A[0]}" = "${C[0]}" ] && ok || bad "greedy answers differ between runs: '${A[0]}' vs '${C[0]}'"
[ "${A[1]}" != "${B[0]}" ] && ok || bad "the second turn ignores the first (same answer as asked fresh: '${B[0]}')"
[ "${C[1]}" = "${B[0]}" ] && ok || bad "after /reset the answer is not the fresh one: '${C[1]}' vs '${B[0]}'"
grep -q "conversation forgotten" "$tmp/c" && ok || bad "/reset did not answer"
grep -q "/quit     leave" "$tmp/c" && ok || bad "/help did not answer"
grep -q "messages in the conversation" "$tmp/c" && ok || bad "/status did not answer"
grep -q "unknown command /bogus" "$tmp/c" && ok || bad "unknown command not reported"
grep -q "chat template chatml" "$tmp/c" && ok || bad "the banner does not name the chat template"
# ---- Ctrl-C while an answer streams: "(stopped)" (the text so far is the greedy answer's
# beginning), and the shell goes on: the next line is answered (and stopped the same way),
# /status counts both turns, /quit leaves with 0. The model has mkmodel's default widths
# (milliseconds a token), so -n 3000 keeps an answer streaming for seconds after it began.
S="$tmp/slow.gguf"
"$BIN" mkmodel -o "$S" "${MODEL_ARCH[@]}" --readable >/dev/null || bad "mkmodel (default widths)"
FIRST="Tell me a long story" SECOND="And another one"
printf '%s\n' "$FIRST" | $T "$BIN" -m "$S" -n 60 --temp 0 -t 1 >"$tmp/full" 2>/dev/null ||
    bad "a 60-token answer failed"
mkfifo "$tmp/in"
"$BIN" -m "$S" -n 3000 --temp 0 -t 1 <"$tmp/in" >"$tmp/int" 2>"$tmp/int.err" &
spid=$!
pids+=("$spid")
exec 3>"$tmp/in"
after() { sed -n "/^you> $1\$/,\$p" "$tmp/int" | tail -n +2; } # what follows a turn's line
streamed() { # TURN: until its answer has streamed 40 bytes (up to 60 s)
    for _ in $(seq 1 1200); do
        [ "$(after "$1" | wc -c)" -ge 40 ] && return 0
        sleep 0.05
    done
    return 1
}
stopped() { # N: until N answers were stopped (up to 60 s)
    for _ in $(seq 1 1200); do
        [ "$(grep -c '^(stopped)$' "$tmp/int")" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
printf '%s\n' "$FIRST" >&3
streamed "$FIRST" && kill -INT $spid && stopped 1 && ok ||
    bad "Ctrl-C did not stop the first answer: $(tail -c 300 "$tmp/int")"
printf '%s\n' "$SECOND" >&3
streamed "$SECOND" && kill -INT $spid && stopped 2 && ok ||
    bad "the shell did not answer (or stop) the line after a Ctrl-C: $(tail -c 300 "$tmp/int")"
printf '/status\n/quit\n' >&3
exec 3>&-
wait $spid
rc=$?
[ $rc -eq 0 ] && ok || bad "the shell exited $rc after Ctrl-C: $(tail -3 "$tmp/int.err")"
! grep -q '^(failed' "$tmp/int" && ok || bad "a stopped answer reported as failed: $(grep '^(failed' "$tmp/int")"
STOPPED=$(after "$FIRST" | head -1)
mapfile -t F < <(answers <"$tmp/full")
[ -n "$STOPPED" ] && { [[ "${F[0]}" == "$STOPPED"* ]] || [[ "$STOPPED" == "${F[0]}"* ]]; } && ok ||
    bad "the stopped answer '$STOPPED' is not the greedy answer's beginning '${F[0]}'"
grep -q "4 messages in the conversation" "$tmp/int" && ok ||
    bad "/status after two stopped answers: $(grep messages "$tmp/int")"

expect 2 "unknown option" "$BIN" --bogus
expect 2 "not both" "$BIN" shell -m "$M" --registry http://127.0.0.1:1
printf 'x\n' | $T "$BIN" shell --registry http://127.0.0.1:1 --token abc >"$tmp/o" 2>&1
[ $? -eq 1 ] && grep -q "cannot use the cell of the registry http://127.0.0.1:1 (check" "$tmp/o" && ok ||
    bad "unreachable registry: $(cat "$tmp/o")"
finish
