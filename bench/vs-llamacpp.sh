#!/usr/bin/env bash
# vs-llamacpp.sh - MoonTail and llama.cpp side by side on the same synthetic
# MoE models, the same threads, the same prompt and decode lengths.
#
#   bench/vs-llamacpp.sh [-t THREADS] [-r RUNS] [-p PROMPT] [-n GEN] [--dir DIR]
#                        [--only NAME[,NAME...]] [MODEL...]
#
# Without MODEL arguments it uses (and first writes, if missing, with
# `moontail mkmodel`) twelve models in DIR (default $TMPDIR/moontail-bench, never
# the repository): a qwen3moe shape (Qwen3-30B-A3B's widths, 6 layers) and a
# deepseek2 shape (DeepSeek-V2-Lite's widths with a V3-style q_lora, 1 dense + 3 MoE layers), each in
# Q8_0, Q4_K and MXFP4; the qwen3moe shape also as llama.cpp's mixes Q2_K, Q3_K_M, Q5_K_M,
# IQ2_XXS and IQ4_XS (`mkmodel --ftype`: the names in capitals); and k3-mxfp4, a kimi-k3 shape (K2/K3's ratios at
# n_embd 2048: 8 layers, KDA with MLA at layers 3 and 7, attention residuals,
# 192 latent MXFP4 experts, 16 used, the rest Q8_0), 1-2 GB apiece, so
# decoding streams weights from RAM. --only picks some of them by name
# (q3-q8_0, ...) or shape (q3, ds2, k3), e.g. --only k3.
#
# For each model it runs RUNS rounds; a round runs `moontail bench` once and
# bench/llamacpp_bench.mjs (llama.cpp v0.4.0 from node-llama-cpp 3.21.1, as the
# golden tests use) once, taking turns on who goes first, so a change in the
# machine's load hits both alike. Each invocation loads the model, warms up
# with one untimed run, then times one prefill of PROMPT tokens (one batch)
# and GEN single-token decode steps. The table gives medians over the rounds
# and the ratios MoonTail / llama.cpp, MoonTail's weight bytes per decoded
# token and the GB/s they make, next to a STREAM triad measured before and
# after (best of the two). Each MoonTail run also measures a triad of its own
# just before it (`moontail bench`'s default), and %triad is the median over
# the rounds of each run's decode GB/s over its own triad, so a change in the
# machine's memory traffic during the script moves both figures of a run
# alike (%read likewise against its read-only sum); the range of those triads
# is printed beside them. The load average before and after is printed: other
# work on the machine makes every number here worse, and llama.cpp's spinning
# thread barriers suffer most when there are fewer free cores than threads.
#
# Needs a built ./build/moontail (or MT_BIN=path/to/moontail) and
# tools/golden's node_modules
# (cd tools/golden && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts),
# with the AMX library removed as tools/golden/regen.sh explains.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MT="${MT_BIN:-$ROOT/build/moontail}"
LC="$ROOT/bench/llamacpp_bench.mjs"
THREADS=$(nproc)
RUNS=5
PROMPT=128
GEN=32
DIR="${TMPDIR:-/tmp}/moontail-bench"
ONLY=""
MODELS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -t) THREADS="$2"; shift 2 ;;
        -r) RUNS="$2"; shift 2 ;;
        -p) PROMPT="$2"; shift 2 ;;
        -n) GEN="$2"; shift 2 ;;
        --dir) DIR="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        -h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "vs-llamacpp.sh: unknown option $1" >&2; exit 2 ;;
        *) MODELS+=("$1"); shift ;;
    esac
done
[ -x "$MT" ] || { echo "vs-llamacpp.sh: build moontail first ($MT)" >&2; exit 1; }
[ -d "$ROOT/tools/golden/node_modules/node-llama-cpp" ] ||
    { echo "vs-llamacpp.sh: install tools/golden's node_modules first (see the header)" >&2; exit 1; }
AMX="$ROOT/tools/golden/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-cpu-sapphirerapids.so"
[ -e "$AMX" ] && { echo "vs-llamacpp.sh: remove $AMX first (see tools/golden/regen.sh)" >&2; exit 1; }

# ---------------------------------------------------------------- models
Q3="--arch qwen3moe --layers 6 --embd 2048 --heads 32 --heads-kv 4 --head-dim 128 --experts 64
    --experts-used 8 --ff-exp 768 --ff 768 --seed 7"
DS="--arch deepseek2 --layers 4 --dense-layers 1 --embd 2048 --heads 16 --heads-kv 1 --q-lora 768
    --kv-lora 512 --nope 128 --rope 64 --v-dim 128 --experts 64 --experts-used 6
    --shared-experts 2 --ff-exp 1536 --ff 6144 --groups 0 --groups-used 0 --seed 7"
# kimi-k3: 16 KDA heads of 128 (D = n_embd, as in K2/K3), MLA with K2's
# head widths, one leading dense layer, experts in a latent of n_embd / 2
K3="--arch kimi-k3 --layers 8 --dense-layers 1 --embd 2048 --heads 16 --kda-head-dim 128
    --q-lora 512 --kv-lora 512 --nope 128 --rope 64 --v-dim 128 --experts 192 --experts-used 16
    --shared-experts 1 --ff-exp 512 --ff 4096 --latent 1024 --res-block 2 --seed 7"
if [ ${#MODELS[@]} -gt 0 ] && [ -n "$ONLY" ]; then
    echo "vs-llamacpp.sh: --only picks among the default models; give MODEL arguments or --only" >&2
    exit 2
fi
if [ ${#MODELS[@]} -eq 0 ]; then
    mkdir -p "$DIR"
    for name in q3-q8_0 q3-q4_k q3-mxfp4 q3-Q2_K q3-Q3_K_M q3-Q5_K_M q3-IQ2_XXS q3-IQ4_XS \
        ds2-q8_0 ds2-q4_k ds2-mxfp4 k3-mxfp4; do
        shape=${name%%-*} type=${name#*-}
        if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* && ",$ONLY," != *",$shape,"* ]]; then
            continue
        fi
        f="$DIR/$name.gguf"
        if [ ! -f "$f" ]; then
            echo "writing $f" >&2
            # a mix (capitals) sets every tensor's type as llama-quantize would
            tflag=--type
            [[ $type == *[A-Z]* ]] && tflag=--ftype
            case $shape in
                q3) opts="$tflag $type $Q3" ;;
                ds2) opts="--type $type $DS" ;;
                k3) opts="--type q8_0 --expert-type $type $K3" ;;
            esac
            # shellcheck disable=SC2086
            "$MT" mkmodel -o "$f.tmp" $opts && mv "$f.tmp" "$f"
        fi
        MODELS+=("$f")
    done
    if [ ${#MODELS[@]} -eq 0 ]; then
        echo "vs-llamacpp.sh: --only $ONLY names none of q3-q8_0 q3-q4_k q3-mxfp4 q3-Q2_K" \
            "q3-Q3_K_M q3-Q5_K_M q3-IQ2_XXS q3-IQ4_XS ds2-q8_0 ds2-q4_k ds2-mxfp4 k3-mxfp4" \
            "(or the shapes q3, ds2, k3)" >&2
        exit 2
    fi
fi

# ---------------------------------------------------------------- runs
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
"$MT" bench --stream-only -t "$THREADS" --json > "$OUT/stream0.json"
for m in "${MODELS[@]}"; do
    name=$(basename "$m" .gguf)
    for r in $(seq 1 "$RUNS"); do
        echo "$name: round $r of $RUNS" >&2
        mt() { "$MT" bench -m "$m" -t "$THREADS" -p "$PROMPT" -n "$GEN" -r 1 --json \
            >> "$OUT/$name.mt"; }
        lc() { node "$LC" "$m" -t "$THREADS" -p "$PROMPT" -n "$GEN" -r 1 >> "$OUT/$name.lc"; }
        if [ $((r % 2)) -eq 1 ]; then mt; lc; else lc; mt; fi
    done
done
"$MT" bench --stream-only -t "$THREADS" --json > "$OUT/stream1.json"
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- table
node - "$OUT" "$THREADS" "$RUNS" "$PROMPT" "$GEN" "$LOAD_BEFORE" "$LOAD_AFTER" "${MODELS[@]}" <<'EOF'
const fs = require("fs"), path = require("path");
const [out, threads, runs, prompt, gen, loadBefore, loadAfter, ...models] = process.argv.slice(2);
const lines = f => fs.readFileSync(f, "utf8").trim().split("\n").map(l => JSON.parse(l));
const median = v => { const s = [...v].sort((a, b) => a - b), m = s.length >> 1;
                      return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const s0 = JSON.parse(fs.readFileSync(path.join(out, "stream0.json"), "utf8"));
const s1 = JSON.parse(fs.readFileSync(path.join(out, "stream1.json"), "utf8"));
const triad = Math.max(s0.triad_gbs, s1.triad_gbs), read = Math.max(s0.read_gbs, s1.read_gbs);
const f = (x, w, d = 2) => x.toFixed(d).padStart(w);
console.log(`threads ${threads}, prompt ${prompt} tokens (one batch), decode ${gen} tokens; ` +
            `${runs} interleaved runs per engine, medians`);
console.log(`load average before ${loadBefore}, after ${loadAfter} (${require("os").cpus().length} CPUs)`);
console.log(`memory: STREAM triad ${triad.toFixed(1)} GB/s, read-only ${read.toFixed(1)} GB/s ` +
            `(best of before/after; ${s0.threads} threads)`);
let lc0 = null;
console.log("");
console.log("model              |   prefill tok/s: MT    llama   ratio |   decode tok/s: MT    llama   ratio |" +
            " MT MB/tok  GB/s  %triad %read  triads");
for (const m of models) {
    const name = path.basename(m, ".gguf");
    const mt = lines(path.join(out, name + ".mt")), lc = lines(path.join(out, name + ".lc"));
    lc0 = lc0 ?? lc[0];
    const mp = median(mt.map(r => r.prefill_tps)), lp = median(lc.map(r => r.prefill_tps));
    const md = median(mt.map(r => r.decode_tps)), ld = median(lc.map(r => r.decode_tps));
    const bytes = median(mt.map(r => r.weight_bytes_per_token)), gbs = bytes * md / 1e9;
    /* each MoonTail run measured its own triad just before it: the share is taken run by run */
    const share = k => median(mt.map(r => r.weight_bytes_per_token * r.decode_tps / 1e9 / r[k]));
    const tr = mt.map(r => r.triad_gbs);
    console.log(`${name.padEnd(18)} | ${f(mp, 20)} ${f(lp, 8)} ${f(mp / lp, 7)} | ${f(md, 19)} ${f(ld, 8)} ` +
                `${f(md / ld, 7)} | ${f(bytes / 1e6, 9, 1)} ${f(gbs, 5)} ${f(100 * share("triad_gbs"), 6, 0)}% ` +
                `${f(100 * share("read_gbs"), 5, 0)}% ${f(Math.min(...tr), 5, 1)}-${f(Math.max(...tr), 4, 1)}`);
}
if (lc0) console.log(`\nllama.cpp ${lc0.llama_cpp?.release} (${lc0.cpu_backend}), MoonTail kernels ` +
                     `${lines(path.join(out, path.basename(models[0], ".gguf") + ".mt"))[0].kernels}`);
EOF
