#!/usr/bin/env bash
# cellsim-predict.sh - the predictions tables of docs/cellsim.md, from scratch.
#
#   1. calibration on this machine: one-layer models at the target's real
#      widths with 16, 64 and 128 experts, each through `moontail bench
#      --layer-times -t $(nproc)` twice. SHAPE=kimi-k3 (the default): Kimi K3's
#      layers (n_embd 7168, KDA with 64 heads of 128, MLA with 64 heads and its
#      output gate, latent experts of 2048 x 3584 in MXFP4, 16 used, 1 shared,
#      the rest Q4_K), a KDA layer with 16, 64 and 128 experts and an MLA layer
#      with 16 and 128 (0.4-1.7 GB each in $DIR); SHAPE=deepseek2: the earlier
#      seed shape's deepseek2 layer (MLA 64 heads, experts of 2048, Q4_K) with
#      16, 64 and 128 experts;
#   2. the wire: `cellsim --hops` for each MACHINES count (what each stage
#      group is sent and sends back per token, f32 and bf16);
#   3. cellsim with all calibrations (CPU time per thread: a machine of its
#      own) for each MACHINES count of RAM_GB each, USERS concurrent users
#      repeating requests (a prompt of 128 tokens, 128 tokens generated),
#      6 simulated hours after 1 hour of warm-up (DURATION_S, WARMUP_S), once per seed (SEEDS), on
#      the WIRE type (f32; WIRE="f32 bf16" for both);
#   4. a node failure at 2 h (FAIL_AT_S) with FAIL_USERS users (the stage holding the
#      middle layer of pipeline 0 killed), per seed;
#   5. SERVE_USERS users as slots of one requester process (`moontail serve`:
#      one machine, one link, SERVE_CORES CPUs for every user's head), per seed.
# It prints per machine count: the placement, per-user tokens/s at 1 user (and
# the time to the first token), aggregate tokens/s at each USERS count (median
# of the seeds and their range), and after the failure: the requesters it
# hit, their time from the failure to their next token, the cell's first token
# after it, and when the spare serves.
#
#   bench/cellsim-predict.sh            (after: cmake --build build; ~25 minutes on 2 cores)
# Environment: SHAPE (kimi-k3), SHAPE_ARGS (more cellsim shape options, e.g.
# "--layers 92 --res-block 4"), MACHINES ("60 100 200"), USERS ("1 8 32 128"),
# SEEDS ("1 2 3"), WIRE (f32), RAM_GB (64), FAIL_USERS (32), SERVE_USERS ("32 128";
# "" for none), SERVE_CORES (8), DURATION_S (25200: the run's end, simulated seconds),
# WARMUP_S (3600), FAIL_AT_S (7200), EXTRA_SIM (more cellsim options for every run: the
# node and route model, e.g. "--route-mode oneway" or the old node's "--prefill-chunk 0
# --max-sessions 64"), the LAN:
# LATENCY_US (100: bench/netns.sh's 0.1 ms link), OVERHEAD_US (162: half of
# bench_dataplane's netns round trip of a 7168-wide f32 state, 324 us when
# these figures were made), GBPS (1); DIR (where the calibration models go;
# default a new directory under $TMPDIR, removed at the end; an existing DIR
# keeps them and reuses its cal-*.json). Benchmarks measure; no thresholds here.
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MT_BUILD:-$SRC/build}
for b in moontail cellsim; do
    [ -x "$BUILD/$b" ] || {
        echo "bench/cellsim-predict.sh: $BUILD/$b is missing; build first (cmake --build build)" >&2
        exit 1
    }
done
command -v node >/dev/null || {
    echo "bench/cellsim-predict.sh: node (Debian's nodejs) is needed for the tables" >&2
    exit 1
}
MACHINES=${MACHINES:-"60 100 200"}
USERS=${USERS:-"1 8 32 128"}
SEEDS=${SEEDS:-"1 2 3"}
RAM_GB=${RAM_GB:-64}
FAIL_USERS=${FAIL_USERS:-32}
SERVE_USERS=${SERVE_USERS-"32 128"}
SERVE_CORES=${SERVE_CORES:-8}
DURATION_S=${DURATION_S:-25200}
WARMUP_S=${WARMUP_S:-3600}
FAIL_AT_S=${FAIL_AT_S:-7200}
read -r -a EXTRA_RUN <<<"${EXTRA_SIM:-}"
LAN=(--latency-us "${LATENCY_US:-100}" --overhead-us "${OVERHEAD_US:-162}" --gbps "${GBPS:-1}")
if [ -n "${DIR:-}" ]; then
    mkdir -p "$DIR" || exit 1
else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/cellsim-predict.XXXXXX") || exit 1
    trap 'rm -rf "$DIR"' EXIT
fi
trap 'exit 1' INT TERM HUP
T0=$SECONDS

# ---- calibration
SHAPE=${SHAPE:-kimi-k3}
WIRE=${WIRE:-f32}
read -r -a EXTRA <<<"${SHAPE_ARGS:-}"
case $SHAPE in
kimi-k3)
    # one layer of each kind; --res-block 1: the layer has its residual scores (a one-layer
    # model cannot have a block of 6), --dense-layers 0: a MoE layer
    MODELS="kda16 kda64 kda128 mla16 mla128"
    mk() { # NAME EXPERTS KIND
        "$BUILD/moontail" mkmodel -o "$DIR/$1.gguf" --arch kimi-k3 --type q4_k --expert-type mxfp4 \
            --layers 1 --dense-layers 0 --embd 7168 --heads 64 --kda-head-dim 128 --conv-kernel 4 \
            --q-lora 1536 --kv-lora 512 --nope 128 --rope 64 --v-dim 128 --experts "$2" \
            --experts-used 16 --ff-exp 2048 --shared-experts 1 --latent 3584 --res-block 1 \
            --mla-layers "$3" --seed 3
    }
    ;;
deepseek2)
    MODELS="k16 k64 k128"
    mk() {
        "$BUILD/moontail" mkmodel -o "$DIR/$1.gguf" --arch deepseek2 --type q4_k --layers 1 \
            --embd 7168 --heads 64 --q-lora 1536 --kv-lora 512 --nope 128 --rope 64 --v-dim 128 \
            --experts "$2" --experts-used 16 --ff-exp 2048 --shared-experts 1 --dense-layers 0 \
            --groups 1 --groups-used 1 --seed 3
    }
    ;;
*)
    echo "bench/cellsim-predict.sh: SHAPE is kimi-k3 or deepseek2, not '$SHAPE'" >&2
    exit 1
    ;;
esac
for name in $MODELS; do
    [ -s "$DIR/cal-$name-b.json" ] && continue
    e=${name//[a-z]/}
    kind=none
    case $name in mla*) kind=all ;; esac
    if [ ! -s "$DIR/$name.gguf" ]; then mk "$name" "$e" "$kind" || exit 1; fi
    for run in a b; do
        "$BUILD/moontail" bench -m "$DIR/$name.gguf" --layer-times -t "$(nproc)" \
            --batches 1,2,4,8,16,32,64 --prefills 64,256 -p 64 -r 3 --json >"$DIR/cal-$name-$run.json" ||
            exit 1
    done
    rm -f "$DIR/$name.gguf"
done
CAL=()
for name in $MODELS; do CAL+=(--calib "$DIR/cal-$name-a.json" --calib "$DIR/cal-$name-b.json"); done
SIM=("$BUILD/cellsim" "${CAL[@]}" --calib-time cpu --shape "$SHAPE" "${EXTRA[@]}" "${LAN[@]}" "${EXTRA_RUN[@]}")
"${SIM[@]}" --machines 200 --ram-gb "$RAM_GB" --users 1 --duration-s 60 --warmup-s 10 | sed -n '1,14p'
echo "(calibration done in $((SECONDS - T0)) s; load average $(cut -d' ' -f1-3 /proc/loadavg))"

# ---- the wire
for m in $MACHINES; do
    echo
    "$BUILD/cellsim" --hops --shape "$SHAPE" "${EXTRA[@]}" --machines "$m" --ram-gb "$RAM_GB" || exit 1
done

# ---- the cell
list=$(echo $USERS | tr ' ' ',')
: >"$DIR/runs.jsonl"
for w in $WIRE; do
    for m in $MACHINES; do
        for s in $SEEDS; do
            "${SIM[@]}" --wire "$w" --machines "$m" --ram-gb "$RAM_GB" \
                --users "$list" --duration-s "$DURATION_S" --warmup-s "$WARMUP_S" --seed "$s" --json |
                node -e "const o = JSON.parse(require('fs').readFileSync(0, 'utf8'));
                    for (const r of o.runs) console.log(JSON.stringify({m: $m, wire: '$w', seed: $s, topology: o.topology, ...r}))" \
                    >>"$DIR/runs.jsonl" || exit 1
            "${SIM[@]}" --wire "$w" --machines "$m" --ram-gb "$RAM_GB" \
                --users "$FAIL_USERS" --duration-s "$DURATION_S" --warmup-s "$WARMUP_S" --fail-at-s "$FAIL_AT_S" --seed "$s" --json |
                node -e "const o = JSON.parse(require('fs').readFileSync(0, 'utf8'));
                    const r = o.runs[0]; delete r.timeline_tps;
                    console.log(JSON.stringify({m: $m, wire: '$w', seed: $s, fail: true, ...r}))" >>"$DIR/runs.jsonl" ||
                exit 1
            [ -n "$SERVE_USERS" ] || continue
            "${SIM[@]}" --wire "$w" --machines "$m" --ram-gb "$RAM_GB" --one-requester "$SERVE_CORES" \
                --users "$(echo $SERVE_USERS | tr ' ' ',')" --duration-s "$DURATION_S" --warmup-s "$WARMUP_S" --seed "$s" --json |
                node -e "const o = JSON.parse(require('fs').readFileSync(0, 'utf8'));
                    for (const r of o.runs) console.log(JSON.stringify({m: $m, wire: '$w', seed: $s, serve: true, ...r}))" \
                    >>"$DIR/runs.jsonl" || exit 1
        done
    done
done
node -e '
const runs = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const users = process.argv[2].split(" ").map(Number);
const med = v => { const s = [...v].sort((a, b) => a - b), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const f = (v, d = 2) => v.toFixed(d);
const cell = v => f(med(v)) + " (" + f(Math.min(...v)) + "-" + f(Math.max(...v)) + ")";
for (const w of [...new Set(runs.map(r => r.wire))])
for (const m of [...new Set(runs.map(r => r.m))]) {
    const rs = runs.filter(r => r.m == m && r.wire == w && !r.fail && !r.serve),
          fs = runs.filter(r => r.m == m && r.wire == w && r.fail),
          ss = runs.filter(r => r.m == m && r.wire == w && r.serve);
    console.log("\n== " + w + " wire, " + rs[0].topology);
    const one = rs.filter(r => r.users == 1);
    if (one.length) console.log("1 user: " + cell(one.map(r => r.user_tps)) + " tok/s, first token after " +
        f(med(one.map(r => r.ttft_ms / 1e3)), 1) + " s");
    for (const u of users) {
        const x = rs.filter(r => r.users == u), measured = x.filter(r => r.user_requests > 0);
        console.log(String(u).padStart(4) + " users: aggregate " + cell(x.map(r => r.agg_tps)) +
            " tok/s, per user " + (measured.length ? cell(measured.map(r => r.user_tps)) : "- (no request finished)") +
            ", first token " + (measured.length ? f(med(measured.map(r => r.ttft_ms / 1e3)), 1) + " s" : "-") +
            ", evictions " +
            f(med(x.map(r => r.evictions)), 0) + ", replays " + f(med(x.map(r => r.replays)), 0) +
            ", requests done " + f(med(x.map(r => r.requests_done)), 0));
    }
    const s = v => v >= 0 ? f(v / 1e3, 0) + " s" : "never (none recovered within its request)";
    for (const x of fs)
        console.log("failure, " + x.users + " users, seed " + x.seed + ": " + x.affected +
            " requesters hit; failure -> their next token " + s(x.recovery_ms_mean) + " mean, " +
            s(x.recovery_ms_max) + " worst; the cell'"'"'s first token " + s(x.first_after_fail_ms) +
            " after; spare serving after " + s(x.restored_ms) + "; requests failed " +
            x.requests_failed + ", short " + x.requests_short + "; aggregate over the run " +
            f(x.agg_tps) + " tok/s");
    for (const u of [...new Set(ss.map(r => r.users))]) {
        const x = ss.filter(r => r.users == u), measured = x.filter(r => r.user_requests > 0);
        console.log(String(u).padStart(4) + " users of one requester: aggregate " + cell(x.map(r => r.agg_tps)) +
            " tok/s, per user " + (measured.length ? cell(measured.map(r => r.user_tps)) : "- (no request finished)") +
            ", first token " + (measured.length ? f(med(measured.map(r => r.ttft_ms / 1e3)), 1) + " s" : "-") +
            ", evictions " + f(med(x.map(r => r.evictions)), 0));
    }
}
' "$DIR/runs.jsonl" "$USERS"
echo "total $((SECONDS - T0)) s"
