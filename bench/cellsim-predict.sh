#!/usr/bin/env bash
# cellsim-predict.sh - the predictions table of docs/cellsim.md, from scratch.
#
#   1. calibration on this machine: three one-layer models at the Kimi K3 seed
#      shape's widths (n_embd 7168, MLA 64 heads, experts of 2048, 16 used, 1
#      shared, Q4_K) with 16, 64 and 128 experts (0.5, 1.7 and 3.3 GB in
#      $DIR), each through `moontail bench --layer-times -t $(nproc)` twice;
#   2. cellsim with all six calibrations (CPU time per thread: a machine of
#      its own) for each MACHINES count of RAM_GB each, USERS concurrent users
#      repeating requests (a prompt of 128 tokens, 128 tokens generated),
#      6 simulated hours after 1 hour of warm-up, once per seed (SEEDS);
#   3. a node failure at 2 h with FAIL_USERS users (the stage holding the
#      middle layer of pipeline 0 killed), per seed.
# It prints per machine count: the placement, per-user tokens/s at 1 user (and
# the time to the first token), aggregate tokens/s at each USERS count (median
# of the seeds and their range), and after the failure: the requesters it
# hit, their time from the failure to their next token, the cell's first token
# after it, and when the spare serves.
#
#   bench/cellsim-predict.sh            (after: cmake --build build; ~10 minutes on 2 cores)
# Environment: MACHINES ("60 100 200"), USERS ("1 8 32 128"), SEEDS ("1 2 3"),
# RAM_GB (64), FAIL_USERS (32), the LAN: LATENCY_US (100: bench/netns.sh's 0.1 ms
# link), OVERHEAD_US (162: half of bench_dataplane's netns round trip of a
# 7168-wide f32 state, 324 us when these figures were made), GBPS (1);
# DIR (where the calibration models go; default a new directory under
# $TMPDIR, removed at the end; an existing DIR keeps them and reuses its
# cal-*.json). Benchmarks measure; no thresholds here.
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
for e in 16 64 128; do
    [ -s "$DIR/cal-k$e-b.json" ] && continue
    if [ ! -s "$DIR/k$e.gguf" ]; then
        "$BUILD/moontail" mkmodel -o "$DIR/k$e.gguf" --arch deepseek2 --type q4_k --layers 1 \
            --embd 7168 --heads 64 --q-lora 1536 --kv-lora 512 --nope 128 --rope 64 --v-dim 128 \
            --experts "$e" --experts-used 16 --ff-exp 2048 --shared-experts 1 --dense-layers 0 \
            --groups 1 --groups-used 1 --seed 3 || exit 1
    fi
    for run in a b; do
        "$BUILD/moontail" bench -m "$DIR/k$e.gguf" --layer-times -t "$(nproc)" \
            --batches 1,2,4,8,16,32,64 --prefills 64,256 -p 64 -r 3 --json >"$DIR/cal-k$e-$run.json" ||
            exit 1
    done
    rm -f "$DIR/k$e.gguf"
done
CAL=()
for f in "$DIR"/cal-k*.json; do CAL+=(--calib "$f"); done
"$BUILD/cellsim" "${CAL[@]}" --calib-time cpu "${LAN[@]}" --machines 200 --ram-gb "$RAM_GB" \
    --users 1 --duration-s 60 --warmup-s 10 | sed -n '1,8p'
echo "(calibration done in $((SECONDS - T0)) s; load average $(cut -d' ' -f1-3 /proc/loadavg))"

# ---- the cell
list=$(echo $USERS | tr ' ' ',')
: >"$DIR/runs.jsonl"
for m in $MACHINES; do
    for s in $SEEDS; do
        "$BUILD/cellsim" "${CAL[@]}" --calib-time cpu "${LAN[@]}" --machines "$m" --ram-gb "$RAM_GB" \
            --users "$list" --duration-s 25200 --warmup-s 3600 --seed "$s" --json |
            node -e "const o = JSON.parse(require('fs').readFileSync(0, 'utf8'));
                for (const r of o.runs) console.log(JSON.stringify({m: $m, seed: $s, topology: o.topology, ...r}))" \
                >>"$DIR/runs.jsonl" || exit 1
        "$BUILD/cellsim" "${CAL[@]}" --calib-time cpu "${LAN[@]}" --machines "$m" --ram-gb "$RAM_GB" \
            --users "$FAIL_USERS" --duration-s 25200 --warmup-s 3600 --fail-at-s 7200 --seed "$s" --json |
            node -e "const o = JSON.parse(require('fs').readFileSync(0, 'utf8'));
                const r = o.runs[0]; delete r.timeline_tps;
                console.log(JSON.stringify({m: $m, seed: $s, fail: true, ...r}))" >>"$DIR/runs.jsonl" ||
            exit 1
    done
done
node -e '
const runs = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
const users = process.argv[2].split(" ").map(Number);
const med = v => { const s = [...v].sort((a, b) => a - b), n = s.length;
    return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const f = (v, d = 2) => v.toFixed(d);
const cell = v => f(med(v)) + " (" + f(Math.min(...v)) + "-" + f(Math.max(...v)) + ")";
for (const m of [...new Set(runs.map(r => r.m))]) {
    const rs = runs.filter(r => r.m == m && !r.fail), fs = runs.filter(r => r.m == m && r.fail);
    console.log("\n== " + rs[0].topology);
    const one = rs.filter(r => r.users == 1);
    if (one.length) console.log("1 user: " + cell(one.map(r => r.user_tps)) + " tok/s, first token after " +
        f(med(one.map(r => r.ttft_ms / 1e3)), 0) + " s");
    for (const u of users) {
        const x = rs.filter(r => r.users == u), measured = x.filter(r => r.user_requests > 0);
        console.log(String(u).padStart(4) + " users: aggregate " + cell(x.map(r => r.agg_tps)) +
            " tok/s, per user " + (measured.length ? cell(measured.map(r => r.user_tps)) : "- (no request finished)") +
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
}
' "$DIR/runs.jsonl" "$USERS"
echo "total $((SECONDS - T0)) s"
