#!/usr/bin/env bash
# test_cli.sh - the `moontail` command end to end: run (streamed and --json)
# on the built-in model, determinism of greedy and seeded sampling, tokenize,
# eval, mkmodel, a kimi-k3 model, and clear errors (exit codes and messages)
# for bad input.
set -u
. "$(dirname "$0")/lib/harness.bash"

# run --json on the built-in model: the fields the issue asks for
"$BIN" run --json -n 12 --temp 0 -p "Hello" >"$tmp/a.json" 2>"$tmp/a.err" || bad "run --json failed: $(cat "$tmp/a.err")"
json 'if(!Array.isArray(o.prompt_tokens)||o.prompt_tokens.length!==5) throw "prompt_tokens"; if(o.tokens.length<1||o.tokens.length>12) throw "tokens"; if(typeof o.text!=="string") throw "text"; if(!(o.timings.generate_ms>=0)) throw "timings"' <"$tmp/a.json" && ok || bad "run --json fields: $(cat "$tmp/a.json")"
# the timings keep their fractions of a millisecond (the built-in model takes under 1 ms for a
# short prompt: whole milliseconds made that 0 ms at 2e12 tokens/s); a rate is its count over its time
"$BIN" run --json -n 4 --temp 0 -p "hi" >"$tmp/short.json" 2>"$tmp/short.err" || bad "run --json -p hi failed: $(cat "$tmp/short.err")"
json 'const t=o.timings, near=(a,b)=>Math.abs(a-b)<=1e-6*b;
  for (const k of ["load_ms","prompt_ms","generate_ms"]) if(!(t[k]>0&&isFinite(t[k]))) throw k;
  if(!near(t.prompt_tokens_per_s, o.prompt_tokens.length/t.prompt_ms*1e3)) throw "prompt rate";
  if(!near(t.generate_tokens_per_s, o.tokens.length/t.generate_ms*1e3)) throw "generate rate"' <"$tmp/short.json" && ok || bad "run --json timings: $(cat "$tmp/short.json")"
# greedy is repeatable, and the streamed text equals the JSON text
"$BIN" run --json -n 12 --temp 0 -p "Hello" >"$tmp/b.json" 2>/dev/null
ta=$(json 'console.log(JSON.stringify(o.tokens))' <"$tmp/a.json")
tb=$(json 'console.log(JSON.stringify(o.tokens))' <"$tmp/b.json")
[ "$ta" = "$tb" ] && ok || bad "greedy runs differ: $ta vs $tb"
"$BIN" run -n 12 --temp 0 -p "Hello" >"$tmp/stream.txt" 2>/dev/null || bad "streamed run failed"
json 'process.stdout.write(o.text+"\n")' <"$tmp/a.json" >"$tmp/json.txt"
cmp -s "$tmp/stream.txt" "$tmp/json.txt" && ok || bad "streamed text differs from --json text"
# seeded sampling is repeatable; different seeds are allowed to differ
s1=$("$BIN" run --json -n 16 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 7 -p "Hi" | json 'console.log(JSON.stringify(o.tokens))')
s2=$("$BIN" run --json -n 16 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 7 -p "Hi" | json 'console.log(JSON.stringify(o.tokens))')
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok || bad "seeded runs differ: $s1 vs $s2"
# thread count does not change greedy output
t1=$("$BIN" run --json -n 10 --temp 0 -t 1 -p "Hello" | json 'console.log(JSON.stringify(o.tokens))')
t3=$("$BIN" run --json -n 10 --temp 0 -t 3 --ubatch 2 -p "Hello" | json 'console.log(JSON.stringify(o.tokens))')
[ "$t1" = "$t3" ] && ok || bad "threads/ubatch change greedy output: $t1 vs $t3"
# --draft (exact speculative decoding): the same tokens as plain decoding, greedy and seeded,
# with the counts in "speculative"; the built-in model drafting for itself takes every guess
p="ab ab ab ab ab"
for opts in "--temp 0" "--seed 3"; do
    plain=$("$BIN" run --json -n 24 $opts -p "$p" | json 'console.log(JSON.stringify(o.tokens))')
    for d in "--draft ngram" "--draft ngram --draft-k 1"; do
        "$BIN" run --json -n 24 $opts $d -p "$p" >"$tmp/d.json" 2>"$tmp/d.err" || bad "run $d: $(cat "$tmp/d.err")"
        got=$(json 'console.log(JSON.stringify(o.tokens))' <"$tmp/d.json")
        [ -n "$plain" ] && [ "$got" = "$plain" ] && ok || bad "run $opts $d: $got, plain $plain"
        json 'const s=o.speculative; if(!s||s.draft!=="ngram"||!(s.passes>0)||s.accepted>s.drafted||s.passes+s.accepted!==o.tokens.length-1) throw "counts"' <"$tmp/d.json" && ok || bad "speculative counts: $(cat "$tmp/d.json")"
    done
done
"$BIN" mkmodel -o "$tmp/self.gguf" >/dev/null 2>&1 || bad "mkmodel for --draft FILE"
"$BIN" run --json -m "$tmp/self.gguf" -n 16 --temp 0 -p "$p" | json 'console.log(JSON.stringify(o.tokens))' >"$tmp/self.plain"
"$BIN" run --json -m "$tmp/self.gguf" -n 16 --temp 0 --draft "$tmp/self.gguf" --draft-k 4 -p "$p" >"$tmp/self.json" 2>"$tmp/d.err" || bad "run --draft FILE: $(cat "$tmp/d.err")"
[ "$(json 'console.log(JSON.stringify(o.tokens))' <"$tmp/self.json")" = "$(cat "$tmp/self.plain")" ] && ok || bad "--draft FILE changes the tokens"
json 'const s=o.speculative; if(!(s.drafted>0)||s.accepted+1<s.drafted) throw "counts"' <"$tmp/self.json" && ok || bad "a model drafting for itself: $(cat "$tmp/self.json")"
"$BIN" run -n 4 --draft-k 33 --draft ngram -p hi >/dev/null 2>"$tmp/d.err"
[ $? = 2 ] && grep -q -- "--draft-k" "$tmp/d.err" && ok || bad "--draft-k 33: $(cat "$tmp/d.err")"
"$BIN" run -n 4 --draft "$tmp/nothing.gguf" -p hi >/dev/null 2>"$tmp/d.err"
[ $? = 1 ] && grep -q "nothing.gguf" "$tmp/d.err" && ok || bad "--draft of a missing file: $(cat "$tmp/d.err")"

# tokenize (built-in byte vocabulary: one token per byte, no BOS for qwen2)
out=$("$BIN" tokenize --json -p "héllo")
n=$(echo "$out" | json 'console.log(o.tokens.length)')
[ "$n" = 6 ] && ok || bad "tokenize héllo: $out"
out=$("$BIN" tokenize -p "<|im_start|>x")
[ "$(echo "$out" | wc -w)" = 2 ] && ok || bad "special token not parsed: $out"
out=$("$BIN" tokenize --no-special -p "<|im_start|>x")
[ "$(echo "$out" | wc -w)" = 13 ] && ok || bad "--no-special still parsed: $out"

# mkmodel + eval on a file
"$BIN" mkmodel -o "$tmp/m.gguf" --arch llama --type q8_0 --seed 3 2>"$tmp/e" && ok || bad "mkmodel: $(cat "$tmp/e")"
"$BIN" mkmodel -o "$tmp/m2.gguf" --arch llama --type q8_0 --seed 3 && cmp -s "$tmp/m.gguf" "$tmp/m2.gguf" && ok || bad "mkmodel is not deterministic"
out=$("$BIN" eval -m "$tmp/m.gguf" --ids 1,2,3 --top 3)
echo "$out" | json 'if(o.top.length!==3||o.top[0].length!==3||o.top[0][0][1]!==0) throw 1' && ok || bad "eval output: $out"
# llama-bpe vocabulary: BOS is added
n=$("$BIN" tokenize -m "$tmp/m.gguf" --json -p "ab" | json 'console.log(o.tokens.length)')
[ "$n" = 3 ] && ok || bad "llama-bpe BOS not added (got $n tokens for 'ab')"

# mkmodel --ftype: llama.cpp's mixes (tests/test_quant_mix*.c check the choices). Q4_K_M on
# a 4-expert qwen3moe is Q4_K with Q6_K for the head and the last ffn_down (and runs); the
# dry run of deepseek2 with K2's 128-wide attn_k_b shows its fallback to Q5_0 and writes nothing
"$BIN" mkmodel -o "$tmp/q4km.gguf" --ftype Q4_K_M --experts 4 >"$tmp/o" 2>"$tmp/e" &&
    grep -q "Q4_K" "$tmp/o" && grep -q "Q6_K" "$tmp/o" && ok || bad "mkmodel --ftype Q4_K_M: $(cat "$tmp/e" "$tmp/o")"
"$BIN" eval -m "$tmp/q4km.gguf" --ids 1,2,3 --top 1 >/dev/null 2>"$tmp/e" && ok || bad "eval of the Q4_K_M model: $(cat "$tmp/e")"
# mixed-type models the engine computes already: MLA's attn_k_b in MXFP4 (a 3-D tensor in
# MXFP4_MOE), kimi-k3's 16-wide attn_k_b in F16 and its KDA projections in Q8_0 (Q6_K's fallbacks)
for mix in "deepseek2 MXFP4_MOE" "kimi-k3 Q6_K"; do
    set -- $mix
    "$BIN" mkmodel -o "$tmp/mix.gguf" --arch "$1" --ftype "$2" --layers 4 --experts 8 --experts-used 2 \
        >/dev/null 2>"$tmp/e" && "$BIN" eval -m "$tmp/mix.gguf" --ids 1,2,3 --top 1 >/dev/null 2>>"$tmp/e" &&
        ok || bad "mkmodel --ftype $2 --arch $1 and eval: $(cat "$tmp/e")"
done
"$BIN" mkmodel --dry-run --arch deepseek2 --nope 128 --ftype q4_k_m -o "$tmp/none.gguf" >"$tmp/o" 2>"$tmp/e" &&
    grep -Eq "^blk\.0\.attn_k_b\.weight +128 x 256 x 4 +Q5_0$" "$tmp/o" && [ ! -e "$tmp/none.gguf" ] &&
    ok || bad "mkmodel --dry-run: $(cat "$tmp/e" "$tmp/o")"

# kimi-k3 end to end: mkmodel, run --json with the session's recurrent state (4 layers, KDA
# at 0 and 2: per KDA layer 3 x (K-1) x D conv floats + H x hd x hd delta-rule floats, K 4,
# H 4, hd 16, D 64), the same greedy text from eval's teacher-forced argmax, and the data
# plane's clear refusal
k3=(--arch kimi-k3 --layers 4 --mla-layers 1,3 --embd 64 --heads 4 --kda-head-dim 16
    --experts 8 --experts-used 2 --res-block 2 --latent 32)
"$BIN" mkmodel -o "$tmp/k3.gguf" "${k3[@]}" 2>"$tmp/e" && ok || bad "mkmodel kimi-k3: $(cat "$tmp/e")"
"$BIN" run -m "$tmp/k3.gguf" --json -n 8 --temp 0 -p "Hello" >"$tmp/k3.json" 2>"$tmp/e" || bad "run kimi-k3: $(cat "$tmp/e")"
want=$(( (2 * (3 * 3 * 64 + 4 * 16 * 16)) * 4 ))
json "if(o.session_state.recurrent_bytes!==$want||o.session_state.recurrent_layers!==2) throw 1" <"$tmp/k3.json" && ok || bad "kimi-k3 session_state (want $want recurrent bytes): $(cat "$tmp/k3.json")"
ids=$(json 'console.log([...o.prompt_tokens, ...o.tokens.slice(0, -1)].join(","))' <"$tmp/k3.json")
top=$("$BIN" eval -m "$tmp/k3.gguf" --ids "$ids" --top 1 | json 'console.log(o.top.slice(4).map(r=>r[0][0]).join(","))')
[ "$top" = "$(json 'console.log(o.tokens.join(","))' <"$tmp/k3.json")" ] && ok || bad "kimi-k3 eval argmax $top differs from run's greedy tokens"

# errors: exit codes and messages
expect_fail() { # code pattern cmd...
    local code=$1 pat=$2
    shift 2
    "$@" >"$tmp/o" 2>"$tmp/e"
    local rc=$?
    if [ $rc -eq "$code" ] && grep -q -- "$pat" "$tmp/e"; then ok; else bad "'$*' gave $rc: $(cat "$tmp/e")"; fi
}
expect_fail 1 "/nonexistent/m.gguf" "$BIN" run -m /nonexistent/m.gguf -p x
expect_fail 2 "whole number" "$BIN" run -n abc
expect_fail 2 "unknown command" "$BIN" frobnicate
expect_fail 2 "unknown option" "$BIN" run --frob
expect_fail 2 "unknown option" "$BIN" eval --frob
expect_fail 2 "unknown option" "$BIN" tokenize --frob
expect_fail 2 "needs a value" "$BIN" run -p
# --stop is an option like any other: the value of -p may be "--stop" (the prompt, not a
# stop string), a fifth --stop is refused by name, an empty one too
"$BIN" run -p "--stop" -n 2 --json >"$tmp/o" 2>"$tmp/e" &&
    json 'if (!(o.prompt_tokens.length > 1 && o.tokens.length === 2)) throw 1' <"$tmp/o" && ok ||
    bad "run -p --stop: $(cat "$tmp/e" "$tmp/o")"
expect_fail 2 "at most 4 --stop options; 'e' is one more" "$BIN" run -n 2 --stop a --stop b --stop c --stop d --stop e
expect_fail 2 "needs some text" "$BIN" run -n 2 --stop ""
head -c 1000 "$tmp/m.gguf" >"$tmp/cut.gguf"
expect_fail 1 "truncated" "$BIN" run -m "$tmp/cut.gguf" -p x
echo "not a model" >"$tmp/junk.gguf"
expect_fail 1 "not a GGUF file" "$BIN" tokenize -m "$tmp/junk.gguf" -p x
expect_fail 1 "exceed --ctx" "$BIN" run -p "Hello" -n 10 --ctx 8
expect_fail 2 "unknown type" "$BIN" mkmodel -o "$tmp/x.gguf" --type q9_9
expect_fail 2 "unknown --ftype 'Q4_K_X'" "$BIN" mkmodel -o "$tmp/x.gguf" --ftype Q4_K_X
expect_fail 2 "without --type" "$BIN" mkmodel -o "$tmp/x.gguf" --ftype Q4_K_M --type q8_0
# a registry that cannot be used is named with what to check, by every command that asks one
expect_fail 1 "cannot use the cell of the registry http://127.0.0.1:1 (check" "$BIN" prompt --registry http://127.0.0.1:1 --token abc --key "$tmp/r.key" --cache "$tmp/cache" -p x

# Ctrl-C: generation stops after the current token, output is complete and the exit status 0
"$BIN" run -n 100000 --ignore-eos --ctx 101000 --json >"$tmp/int.json" 2>"$tmp/int.err" &
ipid=$!
sleep 1
kill -INT $ipid
wait $ipid && ok || bad "run after Ctrl-C exited non-zero: $(cat "$tmp/int.err")"
json 'if (o.stop !== "cancelled" || !(o.tokens.length > 0 && o.tokens.length < 100000)) process.exit(1)' <"$tmp/int.json" && ok || bad "Ctrl-C did not end with stop=cancelled: $(head -c 300 "$tmp/int.json")"
finish
