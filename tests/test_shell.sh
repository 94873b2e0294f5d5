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
expect 2 "unknown option" "$BIN" --bogus
expect 2 "not both" "$BIN" shell -m "$M" --registry http://127.0.0.1:1
printf 'x\n' | $T "$BIN" shell --registry http://127.0.0.1:1 --token abc >"$tmp/o" 2>&1
[ $? -eq 1 ] && grep -q "127.0.0.1:1" "$tmp/o" && ok || bad "unreachable registry: $(cat "$tmp/o")"
finish
