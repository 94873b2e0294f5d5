#!/usr/bin/env bash
# test_chat_templates.sh - MoonTail's Jinja interpreter (moontail/jinja.h) against
# Python's jinja2 configured as Hugging Face transformers configures it
# (tests/lib/jinja_oracle.py): the outputs must be byte for byte the same, and
# a template error in jinja2 must be the same kind of error in MoonTail.
#
#   - the real chat templates llama.cpp keeps in models/templates/, taken at run
#     time from the llama.cpp git bundle inside the npm package node-llama-cpp
#     (tools/golden; they are other projects' text and stay out of this
#     repository): 240 seeded random conversations each for the Kimi K2/K3,
#     DeepSeek V3.1 and R1, Qwen3, GLM, gpt-oss, Llama 3.1 and Mistral ones, 40
#     for every other template of the bundle (system messages or not, several
#     turns, reasoning_content, tools, tool calls and results, thinking on and
#     off via chat_template_kwargs, add_generation_prompt both ways, unicode,
#     text holding template markers and special tokens);
#   - one small template per construct (tests/lib/jinja_constructs.py);
#   - seeded random templates (tests/lib/jinja_random.py);
#   - `moontail template` on models whose tokenizer.chat_template is a real
#     template: its output equals jinja2's, --kwargs and --no-generation-prompt
#     work, --tokens keeps typed special-token text as text, bad input is named.
set -u
. "$(dirname "$0")/lib/harness.bash"
SRC=${MT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD=${MT_BUILD:-$SRC/build}
CHECK=$BUILD/jinja_oracle_check
LIB=$SRC/tests/lib
BUNDLE=$SRC/tools/golden/node_modules/node-llama-cpp/llama/gitRelease.bundle

if ! python3 -c 'import jinja2' 2>/dev/null; then
    bad "Python's jinja2 is not installed (apt-get install python3-jinja2; ./dev test installs it)"
    finish
    exit 1
fi
if [ ! -f "$BUNDLE" ]; then
    bad "no llama.cpp bundle at $BUNDLE (cd tools/golden && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true" \
        "npm ci --ignore-scripts; ./dev test does it)"
    finish
    exit 1
fi
[ -x "$CHECK" ] || bad "no $CHECK (build the jinja_oracle_check target)"
echo "jinja2 $(python3 -c 'import jinja2; print(jinja2.__version__)')"

# ---- the templates, out of the bundle
git init -q --bare "$tmp/llama.git"
git --git-dir="$tmp/llama.git" fetch -q "$BUNDLE" "HEAD:refs/heads/release" ||
    bad "cannot read the bundle $BUNDLE"
mkdir -p "$tmp/templates"
git --git-dir="$tmp/llama.git" ls-tree --name-only release models/templates/ | grep '\.jinja$' |
    while read -r f; do
        git --git-dir="$tmp/llama.git" show "release:$f" >"$tmp/templates/${f##*/}"
    done
MAIN=(Kimi-K2-Instruct Kimi-K2-Thinking moonshotai-Kimi-K2 Kimi-K3 deepseek-ai-DeepSeek-V3.1
    deepseek-ai-DeepSeek-R1-Distill-Qwen-32B Qwen-Qwen3-0.6B GLM-4.6 GLM-4.7-Flash
    openai-gpt-oss-120b meta-llama-Llama-3.1-8B-Instruct mistralai-Mistral-Nemo-Instruct-2407)
main=() others=()
for t in "${MAIN[@]}"; do
    [ -f "$tmp/templates/$t.jinja" ] && main+=("$tmp/templates/$t.jinja") ||
        bad "the bundle has no models/templates/$t.jinja"
done
for f in "$tmp"/templates/*.jinja; do
    case " ${MAIN[*]} " in *" $(basename "$f" .jinja) "*) ;; *) others+=("$f") ;; esac
done
echo "templates: ${#main[@]} with 240 conversations, ${#others[@]} more with 40"

# ---- real templates: every conversation identical
python3 "$LIB/jinja_oracle.py" "$tmp/main.jsonl" 240 1 "${main[@]}" || bad "jinja_oracle.py failed"
"$CHECK" "$tmp/main.jsonl" >"$tmp/main.out" 2>"$tmp/main.err" && ok ||
    bad "conversations differ from jinja2's: $(head -c 3000 "$tmp/main.err")"
cat "$tmp/main.out"
for t in "${MAIN[@]}"; do
    grep -Eq "^$t.jinja +240 conversations, +240 identical" "$tmp/main.out" && ok ||
        bad "$t: not 240 identical conversations"
done
if [ ${#others[@]} -gt 0 ]; then
    python3 "$LIB/jinja_oracle.py" "$tmp/others.jsonl" 40 2 "${others[@]}" || bad "jinja_oracle.py failed"
    "$CHECK" "$tmp/others.jsonl" >"$tmp/others.out" 2>"$tmp/others.err" && ok ||
        bad "conversations of other templates differ: $(head -c 3000 "$tmp/others.err")"
    tail -1 "$tmp/others.out"
fi

# ---- one template per construct, and random ones
python3 "$LIB/jinja_constructs.py" "$tmp/constructs" "$tmp/constructs.jsonl" || bad "jinja_constructs.py failed"
"$CHECK" "$tmp/constructs.jsonl" >"$tmp/constructs.out" 2>"$tmp/constructs.err" && ok ||
    bad "constructs differ from jinja2's: $(grep -v 'does not parse' "$tmp/constructs.err" | head -c 3000)"
echo "constructs: $(tail -1 "$tmp/constructs.out")"
python3 "$LIB/jinja_random.py" "$tmp/random" "$tmp/random.jsonl" 1500 1 || bad "jinja_random.py failed"
"$CHECK" "$tmp/random.jsonl" >"$tmp/random.out" 2>"$tmp/random.err" && ok ||
    bad "random templates differ from jinja2's: $(grep -v 'does not parse' "$tmp/random.err" | head -c 3000)"
echo "random templates: $(tail -1 "$tmp/random.out")"

# ---- moontail template on models that carry a real template
EOT='<|endoftext|>' # the byte vocabulary's BOS and EOS
conv() { # NAME JSON: a conversation file
    printf '%s' "$2" >"$tmp/$1.json"
}
conv plain '{"messages": [{"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Hi <|im_end|> {{ x }} é😀"},
  {"role": "assistant", "content": "Hello.", "reasoning_content": "A greeting."},
  {"role": "user", "content": "Bye\n"}]}'
conv tools '{"messages": [{"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
   "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}],
 "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"},
   "days": {"type": "integer"}}, "required": ["city"]}}}],
 "chat_template_kwargs": {"enable_thinking": false}}'
for t in Kimi-K3 Qwen-Qwen3-0.6B deepseek-ai-DeepSeek-V3.1 GLM-4.6; do
    f=$tmp/templates/$t.jinja
    [ -f "$f" ] || continue
    "$BIN" mkmodel -o "$tmp/$t.gguf" --layers 1 --embd 64 --heads 4 --head-dim 16 --ff 64 \
        --ff-exp 32 --experts 4 --experts-used 2 --chat-template "$f" >/dev/null 2>"$tmp/mk.err" ||
        bad "mkmodel with $t's template: $(cat "$tmp/mk.err")"
    for c in plain tools; do
        python3 "$LIB/jinja_oracle.py" --render "$f" "$tmp/$c.json" "$EOT" "$EOT" >"$tmp/want" 2>"$tmp/want.err"
        want_rc=$?
        "$BIN" template -m "$tmp/$t.gguf" -f "$tmp/$c.json" >"$tmp/got" 2>"$tmp/got.err"
        got_rc=$?
        if [ $want_rc -ne 0 ]; then
            [ $got_rc -ne 0 ] && ok || bad "$t $c: jinja2 failed ($(tail -1 "$tmp/want.err")), moontail template did not"
        else
            [ $got_rc -eq 0 ] && cmp -s "$tmp/want" "$tmp/got" && ok ||
                bad "$t $c: moontail template differs from jinja2 (exit $got_rc: $(head -c 300 "$tmp/got.err"))"
        fi
    done
done
# the options: kwargs, no generation prompt (Kimi K3 reads thinking; Qwen3 enable_thinking)
if [ -f "$tmp/Kimi-K3.gguf" ]; then
    "$BIN" template -m "$tmp/Kimi-K3.gguf" -f "$tmp/plain.json" --kwargs '{"thinking": false}' >"$tmp/got"
    printf '%s' '{"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi <|im_end|> {{ x }} é😀"},
      {"role": "assistant", "content": "Hello.", "reasoning_content": "A greeting."},
      {"role": "user", "content": "Bye\n"}], "chat_template_kwargs": {"thinking": false}}' >"$tmp/k.json"
    python3 "$LIB/jinja_oracle.py" --render "$tmp/templates/Kimi-K3.jinja" "$tmp/k.json" "$EOT" "$EOT" >"$tmp/want"
    cmp -s "$tmp/want" "$tmp/got" && ! grep -q '<|open|>think' "$tmp/got" && ok ||
        bad "--kwargs thinking false: $(head -c 300 "$tmp/got")"
    "$BIN" template -m "$tmp/Kimi-K3.gguf" -f "$tmp/plain.json" >"$tmp/gen"
    "$BIN" template -m "$tmp/Kimi-K3.gguf" -f "$tmp/plain.json" --no-generation-prompt >"$tmp/nogen"
    suffix='<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
    [ "$(cat "$tmp/nogen")$suffix" = "$(cat "$tmp/gen")" ] && ok ||
        bad "--no-generation-prompt does not leave out just the assistant's opening"
fi
if [ -f "$tmp/Qwen-Qwen3-0.6B.gguf" ]; then
    # typed <|im_end|> stays text: the byte vocabulary's <|im_start|> is 257, <|im_end|> 258
    ids=$("$BIN" template -m "$tmp/Qwen-Qwen3-0.6B.gguf" -f "$tmp/plain.json" --tokens)
    n_end=$(printf '%s\n' $ids | grep -cx 258)
    n_start=$(printf '%s\n' $ids | grep -cx 257)
    # 4 messages end with <|im_end|>, 5 turns start with <|im_start|> (with the generation prompt)
    [ "$n_end" = 4 ] && [ "$n_start" = 5 ] && ok ||
        bad "--tokens: $n_start <|im_start|> and $n_end <|im_end|> ids (want 5 and 4): $ids"
    "$BIN" template -m "$tmp/Qwen-Qwen3-0.6B.gguf" -f "$tmp/plain.json" | grep -q 'Hi <|im_end|> {{ x }}' &&
        ok || bad "the rendered text lost the typed markers"
fi
# bad input, named
M=$tmp/Qwen-Qwen3-0.6B.gguf
expect 2 "required" "$BIN" template -f "$tmp/plain.json"
expect 2 "CONVERSATION.json is required" "$BIN" template -m "$M"
expect 1 "nope.json: not a JSON file" "$BIN" template -m "$M" -f "$tmp/nope.json"
printf '{"messages": [' >"$tmp/cut.json"
expect 1 "cut.json: not a JSON file we can read.*line 1" "$BIN" template -m "$M" -f "$tmp/cut.json"
printf '{"messages": {}}' >"$tmp/m.json"
expect 1 '"messages" must be an array' "$BIN" template -m "$M" -f "$tmp/m.json"
printf '{"messages": [{"content": "x"}]}' >"$tmp/r.json"
expect 1 'messages\[0\].role must be a string' "$BIN" template -m "$M" -f "$tmp/r.json"
printf '{"messages": [], "tools": {}}' >"$tmp/t.json"
expect 1 '"tools" must be an array' "$BIN" template -m "$M" -f "$tmp/t.json"
expect 1 "--kwargs: expected a JSON object" "$BIN" template -m "$M" -f "$tmp/plain.json" --kwargs '[1]'
expect 1 "'messages' is set by moontail" "$BIN" template -m "$M" -f "$tmp/plain.json" --kwargs '{"messages": 1}'
expect 1 "'a-b' is not a template variable" "$BIN" template -m "$M" -f "$tmp/plain.json" --kwargs '{"a-b": 1}'
printf '{"messages": [{"role": "user", "content": "x"}]}' >"$tmp/one.json"
printf '{{ raise_exception("only pairs, please") }}' >"$tmp/raise.jinja"
expect 1 "refused the conversation.*only pairs, please" "$BIN" template --template-file "$tmp/raise.jinja" -f "$tmp/one.json"
printf '{%% for m in messages %%}{{ m.content|truncate(3) }}{%% endfor %%}<|im_start|>' >"$tmp/odd.jinja"
expect 0 "cannot run.*truncate.*chatml" "$BIN" template --template-file "$tmp/odd.jinja" -f "$tmp/one.json"
finish
