#!/usr/bin/env bash
# test_serve.sh - `moontail serve`, the OpenAI-compatible API, end to end on
# 127.0.0.1, driven by a client nobody here wrote: the official `openai` npm
# package (pinned in tests/api, script tests/api/openai_client.mjs). Checks:
#   - models, completions and chat completions, streamed and not: greedy text
#     equals `moontail run --temp 0` (chat: run on the ChatML text), streamed
#     deltas add up to the whole answer, usage equals `moontail tokenize`;
#   - stop strings, seeds, 6 concurrent requests giving the texts of lone ones;
#   - a bad key -> 401, bad fields -> 400 naming the field, the rate limit -> 429
#     with Retry-After, GET /v1/usage counts what the key used;
#   - at the curl level: malformed JSON, oversized bodies, unknown paths, wrong
#     methods, a full queue (503), a client that hangs up mid-stream; the
#     server keeps serving and stops cleanly on SIGTERM;
#   - refusals at start: no keys, --no-auth off loopback, a bad key file;
#   - the same API over a cell: a registry and 2 nodes (1 replica), serve
#     --registry gives the local model's text;
#   - one generation loop: a seeded, sampled completion cut by a stop string is
#     the same text from `moontail run --stop`, from `moontail prompt --stop`
#     through the cell, and from serve here and through the cell;
#   - a model that thinks (a DeepSeek-R1-style template and vocabulary):
#     reasoning_content and content are `moontail run`'s text before and after
#     </think>, streamed deltas add up to them, stop strings end the answer only,
#     chat_template_kwargs.enable_thinking false, reasoning_content in the
#     history, and bad fields named.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
SRC=${MT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
CLIENT="$SRC/tests/api/openai_client.mjs"
if [ ! -f "$SRC/tests/api/node_modules/openai/package.json" ]; then
    echo "test_serve: the openai client is not installed; './dev test' installs it" \
        "(npm ci in tests/api)" >&2
    exit 1
fi
cd "$tmp"

code() { curl -s -o "$tmp/body" -w '%{http_code}' "$@"; }

M="$tmp/tiny.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 2 --embd 64 --heads 4 --head-dim 16 \
    --ff 64 --ff-exp 32 --experts 4 --experts-used 2 --seed 3 --readable >/dev/null || bad "mkmodel"
KEY=sk-moontail-test-alice-4f1c0a
printf '# test keys\n%s alice\n\nsk-moontail-test-bob-77e0d1 bob\n' "$KEY" >"$tmp/keys"

# ---- references from the command line
PROMPT="Once upon a time"
N=12
$T "$BIN" run -m "$M" -p "$PROMPT" -n $N --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
REF_TEXT=$(json 'process.stdout.write(o.text)' <"$tmp/ref.json")
REF_COMPLETION=$(json 'console.log(o.tokens.length)' <"$tmp/ref.json")
REF_PROMPT=$("$BIN" tokenize -m "$M" -p "$PROMPT" --json | json 'console.log(o.tokens.length)')
SYSTEM="You are terse."
USER="Name a colour."
CHAT_N=10
CHATML=$(printf '<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant' "$SYSTEM" "$USER")$'\n'
$T "$BIN" run -m "$M" -p "$CHATML" -n $CHAT_N --temp 0 --json >"$tmp/chatref.json" 2>/dev/null || bad "chat reference run"
CHAT_REF=$(json 'process.stdout.write(o.text)' <"$tmp/chatref.json")
CHAT_PROMPT=$("$BIN" tokenize -m "$M" -p "$CHATML" --json | json 'console.log(o.tokens.length)')
STOP=${REF_TEXT:4:2}
# a sampled completion (an API completion's sampler: no top-k, top-p or min-p, penalties
# over the whole text) and a stop string from its middle: what it should be cut to is
# the text before the string's first occurrence
SAMPLED=(--temp 0.9 --top-k 0 --top-p 1 --min-p 0 --repeat-last-n -1 --seed 7)
$T "$BIN" run -m "$M" -p "$PROMPT" -n $N "${SAMPLED[@]}" --json >"$tmp/sampled.json" 2>/dev/null ||
    bad "sampled reference run"
SAMPLED_TEXT=$(json 'process.stdout.write(o.text)' <"$tmp/sampled.json")
SSTOP=${SAMPLED_TEXT:5:2}
SAMPLED_CUT=${SAMPLED_TEXT%%"$SSTOP"*}
[ ${#SAMPLED_TEXT} -ge 8 ] && [ -n "$SSTOP" ] && ok || bad "sampled text too short: '$SAMPLED_TEXT'"
# FILE (a run/prompt --json): the sampled text cut at the stop string, said to be so
is_cut() { CUT=$SAMPLED_CUT json 'process.exit(o.text === process.env.CUT && o.stop === "stop" ? 0 : 1)' <"$1"; }
# URL: a completion with the same seed, sampling and stop string gives the cut text
api_cut() {
    local body
    body=$(P=$PROMPT S=$SSTOP node -e 'process.stdout.write(JSON.stringify({model: "tiny",
        prompt: process.env.P, max_tokens: '$N', temperature: 0.9, seed: 7, stop: process.env.S}))')
    [ "$(curl -s -o "$tmp/cut.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" -d "$body" \
        "$1/v1/completions")" = 200 ] &&
        CUT=$SAMPLED_CUT json 'const c = o.choices[0];
            process.exit(c.text === process.env.CUT && c.finish_reason === "stop" ? 0 : 1)' <"$tmp/cut.json"
}
$T "$BIN" run -m "$M" -p "$PROMPT" -n $N "${SAMPLED[@]}" --stop "$SSTOP" --json >"$tmp/run_cut.json" 2>"$tmp/run_cut.err" &&
    is_cut "$tmp/run_cut.json" && ok ||
    bad "run --stop '$SSTOP' did not end before it ('$SAMPLED_CUT'): $(cat "$tmp/run_cut.json" "$tmp/run_cut.err")"
[ ${#REF_TEXT} -ge 8 ] && [ "$REF_COMPLETION" = $N ] && ok || bad "reference text too short: '$REF_TEXT'"

# ---- servers: A (2 slots, context 256), L (2 requests a minute), C (1 slot, no queue, no keys)
start_bg a "$BIN" serve --model "$M" --api-keys "$tmp/keys" --listen 127.0.0.1:0 --parallel 2 --queue 8 \
    --ctx 256 -t 1
URL=$ADDR
A_PID=$PID
start_bg l "$BIN" serve --model "$M" --api-keys "$tmp/keys" --listen 127.0.0.1:0 --rate-limit 2/min -t 1
LURL=$ADDR
# C's model is larger (mkmodel's default sizes, ~5 ms a token) so that its long request stays busy
"$BIN" mkmodel -o "$tmp/c.gguf" --readable >/dev/null || bad "mkmodel c"
start_bg c "$BIN" serve --model "$tmp/c.gguf" --no-auth --listen 127.0.0.1:0 --parallel 1 --queue 0 -t 1 \
    --model-name tiny-c
CURL_C=$ADDR
C_PID=$PID
# D decodes speculatively (n-gram guesses checked in one pass): the same texts as run's
start_bg d "$BIN" serve --model "$M" --api-keys "$tmp/keys" --listen 127.0.0.1:0 --parallel 2 \
    --draft ngram --draft-k 4 -t 1
api_cut "$ADDR" && ok || bad "serve --draft ngram's sampled completion with stop '$SSTOP': $(cat "$tmp/cut.json")"
dbody=$(P=$PROMPT node -e 'process.stdout.write(JSON.stringify({model: "tiny", prompt: process.env.P,
    max_tokens: '$N', temperature: 0}))')
curl -s -H "Authorization: Bearer $KEY" -d "$dbody" "$ADDR/v1/completions" >"$tmp/draft.json"
REF=$REF_TEXT json 'process.exit(o.choices[0].text === process.env.REF ? 0 : 1)' <"$tmp/draft.json" && ok ||
    bad "serve --draft ngram's greedy completion differs from run's: $(cat "$tmp/draft.json")"
grep -q "guesses taken" "$tmp/d.err" && ok || bad "serve --draft made no guesses: $(cat "$tmp/d.err")"
expect 2 "--draft takes 'ngram'" "$BIN" serve --model "$M" --no-auth --listen 127.0.0.1:0 --draft "$M"
grep -q "no chat template.*ChatML" "$tmp/a.err" && ok || bad "no log line about the ChatML fallback: $(cat "$tmp/a.err")"

# ---- the official client
run_client() { # MODE URL: runs openai_client.mjs, counts its PASS/FAIL lines
    MT_MODE=$1 MT_URL=$2 MT_KEY=$KEY MT_MODEL=tiny MT_PROMPT=$PROMPT MT_N=$N MT_REF_TEXT=$REF_TEXT \
        MT_REF_PROMPT_TOKENS=$REF_PROMPT MT_REF_COMPLETION_TOKENS=$REF_COMPLETION \
        MT_CHAT_SYSTEM=$SYSTEM MT_CHAT_USER=$USER MT_CHAT_N=$CHAT_N MT_CHAT_REF_TEXT=$CHAT_REF \
        MT_CHAT_PROMPT_TOKENS=$CHAT_PROMPT MT_STOP=$STOP MT_CTX=256 MT_LIMITED_URL=$LURL \
        MT_LIMITED_KEY=sk-moontail-test-bob-77e0d1 $T node "$CLIENT" >"$tmp/client.out" 2>&1
    local rc=$? line
    while IFS= read -r line; do
        case "$line" in
            PASS*) ok ;;
            FAIL*) bad "openai client: ${line#FAIL }" ;;
        esac
    done <"$tmp/client.out"
    [ $rc -eq 0 ] && ok || bad "openai_client.mjs ($1) exited $rc: $(tail -5 "$tmp/client.out")"
    grep -c '^PASS' "$tmp/client.out" | sed "s/^/openai client ($1): /; s/$/ checks passed/"
}
run_client full "$URL"

# ---- a model that thinks: DeepSeek R1's turn markers as control tokens, <think> and </think>
# user-defined (as in R1's own files), and a template with R1's markers, which the server
# runs as Jinja and recognises as R1's family (the prompt opens the reasoning with <think>\n,
# closed at once when enable_thinking is false)
DS_USER='<｜User｜>' DS_ASST='<｜Assistant｜>' DS_EOS='<｜end▁of▁sentence｜>'
cat >"$tmp/think.jinja" <<'TEMPLATE'
{%- for m in messages -%}
{%- if m['role'] == 'user' -%}{{ '<｜User｜>' + m['content'] }}
{%- elif m['role'] == 'assistant' -%}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}
{%- endif -%}
{%- endfor -%}
{{ '<｜Assistant｜><think>\n' }}
{%- if enable_thinking is defined and not enable_thinking %}{{ '</think>' }}{% endif -%}
TEMPLATE
TM="$tmp/think.gguf"
"$BIN" mkmodel -o "$TM" "${MODEL_ARCH[@]}" --type f32 --layers 2 --embd 64 --heads 4 --head-dim 16 \
    --ff 64 --ff-exp 32 --experts 4 --experts-used 2 --seed 1 --special-token "$DS_EOS" \
    --special-token "$DS_USER" --special-token "$DS_ASST" --added-token '<think>' \
    --added-token '</think>' --chat-template "$tmp/think.jinja" >/dev/null || bad "mkmodel think"
THINK_N=40
think_prompt() { printf '%s%s%s<think>' "$DS_USER" "$1" "$DS_ASST"; } # then $'\n'
NL=$'\n'
n_tokens() { "$BIN" tokenize -m "$TM" -p "$1" --json | json 'console.log(o.tokens.length)'; }
# the random weights' greedy answers to "Question K" until one closes its reasoning with room
# to answer too (with these weights, a third of them do for either architecture)
THINK_USER=""
for k in $(seq 1 40); do
    $T "$BIN" run -m "$TM" -p "$(think_prompt "Question $k")$NL" -n $THINK_N --temp 0 --json \
        >"$tmp/think_ref.json" 2>/dev/null || break
    if json 'const i = o.text.indexOf("</think>");
             process.exit(o.stop === "length" && i > 0 && i + 11 < o.text.length ? 0 : 1)' \
        <"$tmp/think_ref.json"; then
        THINK_USER="Question $k"
        break
    fi
done
if [ -n "$THINK_USER" ]; then
    ok
    $T "$BIN" run -m "$TM" -p "$(think_prompt "$THINK_USER")$NL</think>" -n $THINK_N --temp 0 --json \
        >"$tmp/nothink_ref.json" 2>/dev/null || bad "enable_thinking false reference run"
    start_bg t "$BIN" serve --model "$TM" --api-keys "$tmp/keys" --listen 127.0.0.1:0 -t 1 \
        --model-name tiny
    grep -q "chat template: the model's own.*Jinja; deepseek-r1.*reasoning_content" "$tmp/t.err" && ok ||
        bad "the thinking template not recognised: $(cat "$tmp/t.err")"
    MT_THINK_PROMPT_TOKENS=$(n_tokens "$(think_prompt "$THINK_USER")$NL")
    MT_NOTHINK_PROMPT_TOKENS=$(n_tokens "$(think_prompt "$THINK_USER")$NL</think>")
    MT_HISTORY_PROMPT_TOKENS=$(n_tokens "$DS_USER$THINK_USER${DS_ASST}A$DS_EOS$(think_prompt Q2)$NL")
    export MT_THINK_USER="$THINK_USER" MT_THINK_N=$THINK_N MT_THINK_REF="$tmp/think_ref.json" \
        MT_NOTHINK_REF="$tmp/nothink_ref.json" MT_THINK_PROMPT_TOKENS MT_NOTHINK_PROMPT_TOKENS \
        MT_HISTORY_PROMPT_TOKENS
    [ -n "$ADDR" ] && run_client think "$ADDR"
else
    bad "no greedy answer to 'Question 1..40' closed its reasoning within $THINK_N tokens"
fi

# ---- curl: what a hand-written client may send
H=(-H "Authorization: Bearer $KEY" -H "Content-Type: application/json")
is_error() { # STATUS TYPE_OR_CODE: $tmp/body is {"error": {...}} naming it
    json "const e=o.error; if (!e || typeof e.message !== 'string' || !('param' in e) ||
          !('code' in e) || (e.type !== '$2' && e.code !== '$2')) process.exit(1)" <"$tmp/body"
}
[ "$(code "${H[@]}" -d '{"model": "tiny", "prompt": ' "$URL/v1/completions")" = 400 ] && is_error 400 invalid_json &&
    ok || bad "malformed JSON not an OpenAI 400: $(cat "$tmp/body")"
[ "$(code "${H[@]}" -d '[1,2]' "$URL/v1/chat/completions")" = 400 ] && ok || bad "a JSON array body not 400"
[ "$(code "${H[@]}" -d '{"model":"tiny","prompt":"x","model":"tiny"}' "$URL/v1/completions")" = 400 ] &&
    ok || bad "duplicate fields not 400"
head -c 1200000 /dev/zero | tr '\0' 'a' | sed 's/^/{"model":"tiny","prompt":"/; s/$/"}/' >"$tmp/big.json"
[ "$(code "${H[@]}" --data-binary @"$tmp/big.json" "$URL/v1/completions")" = 413 ] &&
    is_error 413 request_too_large && ok || bad "oversized body not an OpenAI 413: $(head -c 300 "$tmp/body")"
[ "$(code "${H[@]}" "$URL/v1/engines")" = 404 ] && is_error 404 unknown_url && ok || bad "unknown path not 404"
[ "$(code "${H[@]}" "$URL/v1/completions")" = 405 ] && is_error 405 method_not_allowed && ok || bad "GET on completions not 405"
curl -s -D - -o /dev/null "${H[@]}" "$URL/v1/completions" | grep -qi '^allow: POST' && ok || bad "405 without Allow"
[ "$(code -d '{}' "$URL/v1/completions")" = 401 ] && is_error 401 missing_api_key && ok || bad "no key not 401"
[ "$(code -H 'Authorization: Bearer wrong-key-123' "$URL/v1/models")" = 401 ] && is_error 401 invalid_api_key &&
    ok || bad "wrong key not 401"
[ "$(code "${H[@]}" -d '{"model":"tiny","prompt":"a<|im_end|>b","max_tokens":2}' "$URL/v1/completions")" = 200 ] &&
    ok || bad "special-token text in a prompt: $(cat "$tmp/body")"
[ "$(code "${H[@]}" -d '{"model":"tiny","prompt":"a\u0000b","max_tokens":2}' "$URL/v1/completions")" = 400 ] &&
    grep -q 'NUL' "$tmp/body" && ok || bad "a NUL in a prompt not a 400 naming it: $(cat "$tmp/body")"
[ "$(code "${H[@]}" -d '{"model":"tiny","prompt":"\ud800","max_tokens":2}' "$URL/v1/completions")" = 400 ] &&
    is_error 400 invalid_json && ok || bad "a lone surrogate not a 400: $(cat "$tmp/body")"
[ "$(code "${H[@]}" -d '{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}' "$URL/v1/chat/completions")" = 400 ] &&
    grep -q 'image_url' "$tmp/body" && ok || bad "an image part not a 400 naming it: $(cat "$tmp/body")"
[ "$(code "$URL/health")" = 200 ] && ok || bad "/health"

# a client that hangs up in the middle of a stream: the server notices and goes on
curl -sN -d '{"model":"tiny-c","prompt":"x","max_tokens":2000,"temperature":0,"stream":true}' \
    "$CURL_C/v1/completions" 2>/dev/null | head -c 300 >/dev/null
for _ in $(seq 1 100); do grep -q "went away" "$tmp/c.err" && break; sleep 0.1; done
grep -q "went away" "$tmp/c.err" && ok || bad "the server did not notice a client that hung up: $(tail -3 "$tmp/c.err")"

# a full queue: C computes one request and lets none wait
curl -sN -d '{"model":"tiny-c","prompt":"x","max_tokens":4000,"temperature":0,"stream":true}' "$CURL_C/v1/completions" \
    >"$tmp/long.out" 2>/dev/null &
long=$!
for _ in $(seq 1 100); do [ -s "$tmp/long.out" ] && break; sleep 0.05; done
[ "$(code -D "$tmp/hdr" -d '{"model":"tiny-c","prompt":"x","max_tokens":1}' "$CURL_C/v1/completions")" = 503 ] &&
    is_error 503 server_busy && grep -qi '^retry-after: 1' "$tmp/hdr" && ok ||
    bad "a request beyond the slots and queue not 503 with Retry-After: $(cat "$tmp/body")"
[ "$(code "$CURL_C/v1/models")" = 200 ] && ok || bad "--no-auth server wants a key"
# SIGTERM while a stream is open: the stream is cut, the server exits 0 at once
kill -TERM "$C_PID"
t0=$(date +%s%N)
wait "$C_PID"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ $rc -eq 0 ] && [ $ms -lt 5000 ] && ok || bad "serve after SIGTERM with an open stream: exit $rc after $ms ms"
wait $long 2>/dev/null
grep -q '"text"' "$tmp/long.out" && ! grep -q '\[DONE\]' "$tmp/long.out" && ok || bad "the long stream was not cut short"

# the sampled completion with a stop string: run's text
api_cut "$URL" && ok || bad "serve's sampled completion with stop '$SSTOP' is not run's '$SAMPLED_CUT': $(cat "$tmp/cut.json")"

# after all that, A still answers
[ "$(code "${H[@]}" -d '{"model":"tiny","prompt":"'"$PROMPT"'","max_tokens":'$N',"temperature":0}' "$URL/v1/completions")" = 200 ] &&
    REF_TEXT=$REF_TEXT json "if (o.choices[0].text !== process.env.REF_TEXT) process.exit(1)" <"$tmp/body" &&
    ok || bad "server A stopped serving after bad requests: $(cat "$tmp/body")"
kill -0 "$A_PID" 2>/dev/null && ok || bad "server A died"
# after everything it served, A stops cleanly (under ASan: nothing leaked)
kill -TERM "$A_PID"
wait "$A_PID" && ok || bad "server A exited $? on SIGTERM: $(tail -5 "$tmp/a.err")"

# ---- refusals at start
expect 1 "no API keys: give --api-keys FILE" "$BIN" serve --model "$M" --listen 127.0.0.1:0
expect 1 "only allowed on a loopback address" "$BIN" serve --model "$M" --no-auth --listen 0.0.0.0:0
printf 'short alice\n' >"$tmp/badkeys"
expect 1 "badkeys line 1: a key must be 8 to 256 characters" "$BIN" serve --model "$M" --api-keys "$tmp/badkeys" --listen 127.0.0.1:0
expect 2 "expects N/min" "$BIN" serve --model "$M" --api-keys "$tmp/keys" --rate-limit 5/hour
expect 1 "is a shard" bash -c "'$BIN' split '$M' --layers 0:1 -o '$tmp/part.gguf' >/dev/null && '$BIN' serve --model '$tmp/part.gguf' --no-auth --listen 127.0.0.1:0"

# ---- the same API over a cell: a registry and two nodes, one replica
start_small_cell "$M" api
start_bg r "$BIN" serve --registry "$REG" --token-file "$tmp/api.token" --key "$tmp/req.key" \
    --cache "$tmp/cache" --api-keys "$tmp/keys" --listen 127.0.0.1:0 --model-name tiny --parallel 2 -t 1
if [ -n "$ADDR" ]; then
    run_client basic "$ADDR"
    # the sampled completion with a stop string, through the cell: run's text
    api_cut "$ADDR" && ok ||
        bad "serve --registry's sampled completion with stop '$SSTOP': $(cat "$tmp/cut.json")"
    $T "$BIN" prompt --registry "$REG" --token-file "$tmp/api.token" --key "$tmp/req2.key" \
        --cache "$tmp/cache2" -p "$PROMPT" -n $N "${SAMPLED[@]}" --stop "$SSTOP" --json \
        >"$tmp/prompt_cut.json" 2>"$tmp/prompt_cut.err" && is_cut "$tmp/prompt_cut.json" && ok ||
        bad "prompt --registry --stop: $(cat "$tmp/prompt_cut.json" "$tmp/prompt_cut.err")"
    grep -q "route:" "$tmp/r.err" && ok || bad "serve --registry shows no route: $(cat "$tmp/r.err")"
fi

finish
