#!/usr/bin/env bash
# spec.sh - exact speculative decoding measured (docs/bench.md, "Speculative
# decoding"): generation tokens/s and how many guesses were taken, plain
# against --draft ngram (k = each of $KS), on a code prompt and a prose prompt,
#   - locally (`moontail run -m MODEL`), and
#   - through a loopback pipeline: the model split with `moontail split --plan
#     cell:$STAGES`, one `moontail node` per stage on 127.0.0.1, and `moontail
#     prompt --route`.
# The model is a real GGUF the operator names in MT_REAL_MODEL (without it the
# script prints SKIP and exits 0); a synthetic model would measure nothing,
# since its text does not repeat. Greedy decoding, so the guesses meet text a
# real model writes; every speculative run's tokens are compared with the plain
# run's (they must be the same: the column "same"). Runs of one case are
# interleaved round by round, their order turned each round (docs/bench.md,
# "Measuring on a shared machine"); read the ratios, not single figures.
# Environment: MT_BUILD (default build), N (tokens, default 96), KS (default
# "4 8"), ROUNDS (default 3), THREADS (default 2), STAGES (default 2). Measures,
# never fails on a figure. Every node is stopped and the scratch directory
# removed on exit.
set -u
MODEL=${MT_REAL_MODEL:-}
if [ -z "$MODEL" ] || [ ! -f "$MODEL" ]; then
    echo "SKIP: set MT_REAL_MODEL to a GGUF model file (a real one; its text must mean something)"
    exit 0
fi
BIN=${MT_BUILD:-build}/moontail
N=${N:-96} KS=${KS:-"4 8"} ROUNDS=${ROUNDS:-3} THREADS=${THREADS:-2} STAGES=${STAGES:-2}
[ -x "$BIN" ] || { echo "spec.sh: $BIN is not built (set MT_BUILD)" >&2; exit 1; }
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# A code prompt (the answer repeats much of it) and a prose prompt (it does not).
cat >"$tmp/code.txt" <<'EOF'
Here is a C function:

static int sum_positive(const int *values, int count) {
    int total = 0;
    for (int i = 0; i < count; i++) {
        if (values[i] > 0) total += values[i];
    }
    return total;
}

The same function with `values` renamed to `items` and `count` renamed to `n`:

static int sum_positive(const int *items, int n) {
EOF
cat >"$tmp/prose.txt" <<'EOF'
The old lighthouse keeper climbed the stairs one last time before the storm. He had kept the
light burning for forty years, and tonight, as the wind rose over the black water, he thought
about the ships that had passed safely because of it.
EOF

# One run: prints "tok/s accepted drafted tokens-json" (empty on failure).
measure() {
    "$@" --json --temp 0 -n "$N" 2>>"$tmp/errors" | python3 -c '
import json, sys
try:
    o = json.load(sys.stdin)
except Exception:
    sys.exit(0)
s = o.get("speculative") or {}
print("%.3f %d %d %s" % (o["timings"]["generate_tokens_per_s"], s.get("accepted", 0),
                          s.get("drafted", 0), json.dumps(o["tokens"], separators=(",", ":"))))'
}

# Runs the cases of one setup (its command line in "$@", without the prompt), interleaved.
run_cases() {
    local label=$1
    shift
    local variants=("plain")
    for k in $KS; do variants+=("ngram:$k"); done
    for prompt in code prose; do
        declare -A plain_tokens=()
        for round in $(seq 1 "$ROUNDS"); do
            local n=${#variants[@]} order=()
            for i in $(seq 0 $((n - 1))); do order+=("${variants[$(((i + round) % n))]}"); done
            for v in "${order[@]}"; do
                local extra=()
                [ "$v" != plain ] && extra=(--draft ngram --draft-k "${v#ngram:}")
                local out
                out=$(measure "$@" "${extra[@]}" -f "$tmp/$prompt.txt")
                if [ -z "$out" ]; then
                    echo "$label $prompt $v round $round: failed (see below)"
                    continue
                fi
                read -r tps acc dra toks <<<"$out"
                [ "$v" = plain ] && plain_tokens[$round]=$toks
                echo "$label $prompt $v $round $tps $acc $dra $toks" >>"$tmp/results"
            done
            # every variant's tokens against this round's plain run
            while read -r l p v r tps acc dra toks; do
                [ "$l $p $r" = "$label $prompt $round" ] || continue
                same=yes
                [ "$toks" = "${plain_tokens[$round]:-}" ] || same=NO
                printf '%-8s %-6s %-8s round %d: %7.2f tok/s, %4d of %4d guesses taken, same: %s\n' \
                    "$l" "$p" "$v" "$r" "$tps" "$acc" "$dra" "$same"
            done <"$tmp/results"
        done
        unset plain_tokens
    done
}

echo "model: $MODEL; $N tokens, greedy, k in {$KS}, $ROUNDS rounds, $THREADS threads"
: >"$tmp/results"

# ---- local
run_cases local "$BIN" run -m "$MODEL" -t "$THREADS"

# ---- loopback pipeline
"$BIN" split "$MODEL" --plan "cell:$STAGES" -o "$tmp/cell" >/dev/null 2>"$tmp/split.err" ||
    { echo "split failed: $(cat "$tmp/split.err")"; exit 1; }
req=$("$BIN" keygen -o "$tmp/req.key")
nodekey=$("$BIN" keygen -o "$tmp/node.key")
printf '%s requester\n%s node\n' "$req" "$nodekey" >"$tmp/auth"
stages=""
for i in $(seq 0 $((STAGES - 1))); do
    shard=$(ls "$tmp"/cell/*-stage-"$i".gguf)
    "$BIN" node --listen 127.0.0.1:0 --threads "$THREADS" --key "$tmp/node.key" \
        --authorized "$tmp/auth" --shard "$shard" >"$tmp/node$i.out" 2>"$tmp/node$i.err" &
    pids+=($!)
    addr=""
    for _ in $(seq 1 600); do
        addr=$(grep -o 'listening on [0-9.:]*' "$tmp/node$i.out" "$tmp/node$i.err" 2>/dev/null |
            head -1 | awk '{print $3}')
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { echo "node $i did not start: $(cat "$tmp/node$i.err")"; exit 1; }
    stages+="${stages:+, }{\"addr\": \"$addr\", \"key\": \"$nodekey\"}"
done
head=$(ls "$tmp"/cell/*-head-0.gguf)
echo "{\"head\": \"$head\", \"key\": \"$tmp/req.key\", \"stages\": [$stages]}" >"$tmp/route.json"
run_cases pipeline "$BIN" prompt --route "$tmp/route.json" -t "$THREADS"

# ---- summary: medians, and each variant against plain round by round
python3 - "$tmp/results" <<'EOF'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = collections.defaultdict(dict)
for label, prompt, v, r, tps, acc, dra, toks in rows:
    by[(label, prompt, v)][r] = (float(tps), int(acc), int(dra))
print("\nsummary (median over rounds; ratio = speculative / plain tok/s of the same round):")
for (label, prompt, v), rs in sorted(by.items()):
    tps = statistics.median(x[0] for x in rs.values())
    acc = sum(x[1] for x in rs.values()); dra = sum(x[2] for x in rs.values())
    plain = by.get((label, prompt, "plain"), {})
    ratios = [rs[r][0] / plain[r][0] for r in rs if r in plain and plain[r][0] > 0]
    line = "%-8s %-6s %-8s %7.2f tok/s" % (label, prompt, v, tps)
    if v != "plain":
        line += ", acceptance %.2f (%d of %d)" % (acc / dra if dra else 0, acc, dra)
        line += ", ratio %s" % " ".join("%.2f" % x for x in ratios)
    print(line)
EOF
if [ -s "$tmp/errors" ]; then
    echo "stderr of the runs:"
    cat "$tmp/errors"
fi
