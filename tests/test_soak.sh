#!/usr/bin/env bash
# test_soak.sh - a bounded soak of a multi-stage cell, every part its own
# process on 127.0.0.1: a registry and 7 nodes (2 pipelines of 3 stages and a
# spare) serving a synthetic model, under SOAK_SECONDS of load from
# SOAK_WORKERS concurrent requesters (`moontail prompt --registry`, so the
# nodes batch the steps of many sessions together). 24 jobs mix prompts,
# lengths and sampling (greedy, seeded temperature, seeded top-k/top-p/min-p
# with a repeat penalty); every few requests a requester is killed (-9) in
# the middle of its generation. Checks (tests/lib/soak_report.mjs judges the
# records):
#   - every completed request's tokens and text equal `moontail run`'s for
#     the same model, prompt and seed: no lost or duplicated token;
#   - the RSS of the registry and of every node, sampled every few seconds,
#     does not keep growing after a warm-up (the last third's largest against
#     the first third's, with an allowance; printed but not judged under
#     AddressSanitizer, whose quarantine keeps freed memory);
#   - descriptors and threads of every process are back to what they were
#     before the load, once it is over;
#   - after the load every node reports 0 sessions and 0 KV cache bytes (the
#     registry's /v1/status, from heartbeats): ended sessions were freed and
#     the abandoned ones expired (--session-idle-s); one abandoned request is
#     then followed alone: its 3 stages hold its session until it expires;
#   - the registry drops the abandoned requests' tickets;
#   - nodes batched several sessions' requests together, and sessions
#     expired or were evicted for every stage of every abandoned request;
#   - every process stops cleanly on SIGTERM (under AddressSanitizer that is
#     also LeakSanitizer's check at exit).
# Prints requests, tokens, tokens/s and per-process RSS, descriptors and
# threads. SOAK_SECONDS defaults to 120 (45 in a sanitizer build, MT_SANITIZE
# from CMake); a long soak: SOAK_SECONDS=900 MT_BIN=build/moontail bash
# tests/test_soak.sh (docs/testing.md).
set -u
. "$(dirname "$0")/lib/harness.bash"
LIB=$(cd "$(dirname "$0")/lib" && pwd)
T="timeout 60"
cd "$tmp"

sanitized=${MT_SANITIZE:-0}
SOAK_SECONDS=${SOAK_SECONDS:-$([ "$sanitized" = 1 ] && echo 45 || echo 120)}
WORKERS=${SOAK_WORKERS:-16}
case "$SOAK_SECONDS$WORKERS" in *[!0-9]* | '')
    echo "SOAK_SECONDS and SOAK_WORKERS must be whole numbers (got '$SOAK_SECONDS', '$WORKERS')" >&2
    exit 2
    ;;
esac
if [ "$SOAK_SECONDS" -lt 40 ] || [ "$WORKERS" -lt 2 ] || [ "$WORKERS" -gt 64 ]; then
    echo "SOAK_SECONDS must be at least 40 (RSS samples for a trend) and SOAK_WORKERS 2..64" >&2
    exit 2
fi
IDLE_S=5   # the nodes' --session-idle-s: abandoned sessions expire after it
SAMPLE_S=3 # RSS, descriptors and threads sampled this often
WARM_S=$((SOAK_SECONDS / 5 > 10 ? SOAK_SECONDS / 5 : 10))
now_ms() { echo $(($(date +%s%N) / 1000000)); }
size() { stat -c %s "$1" 2>/dev/null || echo 0; } # 0 until the child has created it
status() { curl -s --max-time 10 "$URL/v1/status"; }

# ---- the model: 6 layers, each node has room for 2 of them (3 stages a pipeline)
M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 6 --embd 256 --heads 4 --head-dim 64 \
    --ff 256 --ff-exp 128 --experts 8 --experts-used 2 --ctx 1024 --seed 11 --readable >/dev/null ||
    bad "mkmodel"
layer_bytes=$(($(stat -c %s "$M") / 6))
cap_mb=$((layer_bytes * 5 / 2 / 1000000))

# ---- the jobs and their references from `moontail run`
texts=("The cell computes one layer at a time" "Hello" "In a small town by the sea, the old lighthouse keeper"
    "1, 2, 3, 4, 5," "Write a haiku about autumn leaves falling" "def fib(n):"
    $'Q: Why is the sky blue?\nA:' "MoonTail runs huge models on many ordinary machines, one layer each")
lens=(8 24 48 96 160 32 64 120)
J=24
declare -a job_text job_args
for j in $(seq 0 $((J - 1))); do
    job_text[j]=${texts[j % 8]}
    n=${lens[(j * 3) % 8]}
    case $((j / 8)) in
    0) job_args[j]="-n $n --temp 0" ;;
    1) job_args[j]="-n $n --temp 0.8 --seed $((101 + j))" ;;
    *) job_args[j]="-n $n --temp 1.0 --top-k 40 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 --seed $((7001 + j))" ;;
    esac
done
mkdir -p jobs results out status
for j in $(seq 0 $((J - 1))); do
    # shellcheck disable=SC2086 # job_args holds several options
    $T "$BIN" run -m "$M" -p "${job_text[j]}" ${job_args[j]} -t 1 --json >"jobs/$j.json" 2>"jobs/$j.err" ||
        bad "reference run of job $j: $(cat "jobs/$j.err")"
done

# ---- registry, account, 7 nodes
start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" \
    --replicas 2 --spares 1 --heartbeat-ms 250 --dead-after-ms 10000 --listen 127.0.0.1:0
URL=$ADDR
REG_PID=$PID
expect 0 "token in" "$BIN" account new soak --registry "$URL" -o "$tmp/soak.token"
declare -A proc_pid
proc_pid[registry]=$REG_PID
NODES=(pc1 pc2 pc3 pc4 pc5 pc6 pc7)
for name in "${NODES[@]}"; do
    start_bg "$name" "$BIN" node --registry "$URL" --token-file "$tmp/soak.token" --key "$tmp/$name.key" \
        --data "$tmp/d-$name" --listen 127.0.0.1:0 --name "$name" --capacity-mb "$cap_mb" \
        --speed 1 --threads 1 --ctx 1024 --session-idle-s "$IDLE_S"
    proc_pid[$name]=$PID
done
# (the stages of a kimi-k3's pipeline need not hold 2 layers each: its layers differ in size)
if ! wait_for 'o.min_replicas_serving >= 2 && o.spares >= 1 && o.nodes_alive == 7 &&
        o.nodes.filter(n => n.state == "serving" && n.role == "stage").length == 6' 90; then
    bad "7 nodes did not become 2 pipelines of 3 stages and a spare: $(status | head -c 1500)"
    finish
    exit 1
fi
ok
"$BIN" status --registry "$URL" | head -3

P=(prompt --registry "$URL" --token-file "$tmp/soak.token" --cache "$tmp/cache")
for w in $(seq 1 "$WORKERS"); do "$BIN" keygen -o "$tmp/r$w.key" >/dev/null || bad "keygen"; done

# ---- the requesters
# request W K JOB: one request as worker W's K-th, recorded in results/W
request() {
    local w=$1 k=$2 j=$3 t0 rc
    t0=$(now_ms)
    # shellcheck disable=SC2086
    "$BIN" "${P[@]}" --key "$tmp/r$w.key" -p "${job_text[j]}" ${job_args[j]} -t 1 --json \
        >"out/$w-$k.json" 2>"out/$w-$k.err" &
    child=$!
    wait "$child"
    rc=$?
    child=""
    echo "done $w $k $j $rc $t0 $(now_ms)" >>"results/$w"
}
# abandon W K JOB: a long generation, killed -9 once it has printed some text
abandon() {
    local w=$1 k=$2 j=$3 rc
    "$BIN" "${P[@]}" --key "$tmp/r$w.key" -p "${job_text[j]}" -n 900 --ignore-eos --temp 0 -t 1 \
        >"out/$w-$k.txt" 2>"out/$w-$k.err" &
    child=$!
    for _ in $(seq 1 600); do
        [ "$(size "out/$w-$k.txt")" -ge 8 ] && break
        kill -0 "$child" 2>/dev/null || break
        sleep 0.05
    done
    if kill -9 "$child" 2>/dev/null; then
        wait "$child" 2>/dev/null
        echo "abandoned $w $k $j $(size "out/$w-$k.txt")" >>"results/$w"
    else
        wait "$child"
        rc=$?
        echo "missed $w $k $j $rc" >>"results/$w"
    fi
    child=""
}
# worker W UNTIL: requests until UNTIL (epoch seconds) or the file `stop`;
# the 2nd, 12th, 22nd... request of an even worker is abandoned
worker() {
    local w=$1 until=$2 k=0 j
    child=""
    trap '[ -n "$child" ] && kill -9 "$child" 2>/dev/null; exit 0' TERM
    while [ "$(date +%s)" -lt "$until" ] && [ ! -e stop ]; do
        k=$((k + 1))
        j=$(((w * 7 + k * 5) % J))
        if [ $((w % 2)) -eq 0 ] && [ $((k % 10)) -eq 2 ]; then
            abandon "$w" "$k" "$j"
        else
            request "$w" "$k" "$j"
        fi
    done
}
workers=()
extra_cleanup() {
    touch "$tmp/stop"
    for p in "${workers[@]+"${workers[@]}"}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
# join_workers LIMIT_S: waits for the workers, at most LIMIT_S seconds (a bound
# against a hung request, not a timing check)
join_workers() {
    local end=$((SECONDS + $1))
    for p in "${workers[@]}"; do
        while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
        if kill -0 "$p" 2>/dev/null; then
            bad "a requester still ran $1 s after the load should have ended"
            kill "$p" 2>/dev/null
        fi
        wait "$p" 2>/dev/null
    done
    workers=()
}

# quiet_counts FILE: descriptors and threads of every process with nothing
# running (the least of 5 looks, so a heartbeat in flight does not count)
quiet_counts() {
    : >"$1"
    for name in registry "${NODES[@]}"; do
        local pid=${proc_pid[$name]} fds=999999 thr=999999
        for _ in 1 2 3 4 5; do
            local f=(/proc/"$pid"/fd/*) t
            t=$(sed -n 's/^Threads:[[:space:]]*//p' "/proc/$pid/status")
            [ ${#f[@]} -lt "$fds" ] && fds=${#f[@]}
            [ "${t:-999999}" -lt "$thr" ] && thr=$t
            sleep 0.2
        done
        echo "$name $fds $thr" >>"$1"
    done
}
sample() {
    local t=$1
    for name in registry "${NODES[@]}"; do
        local pid=${proc_pid[$name]} rss="" thr="" k v
        [ -r "/proc/$pid/status" ] || continue
        while read -r k v _; do
            case $k in VmRSS:) rss=$v ;; Threads:) thr=$v ;; esac
        done <"/proc/$pid/status"
        local f=(/proc/"$pid"/fd/*)
        echo "$t $name $rss ${#f[@]} $thr" >>samples.txt
    done
}
idle_cell() { # every node: no session, no KV cache, nothing queued
    wait_for 'o.nodes.filter(n => n.alive).every(n => n.sessions == 0 && n.kv_bytes == 0 && n.queue == 0)' "$1"
}

# ---- warm-up round: every job once (this also fills the shared head-shard cache first)
request 1 0 0
warm_worker() {
    local w=$1 j
    child=""
    trap '[ -n "$child" ] && kill -9 "$child" 2>/dev/null; exit 0' TERM
    for j in $(seq $((w - 1)) "$WORKERS" $((J - 1))); do request "$w" "w$j" "$j"; done
}
for w in $(seq 1 "$WORKERS"); do
    warm_worker "$w" &
    workers+=($!)
done
join_workers 300
idle_cell 30 || bad "sessions left after the warm-up round: $(status | head -c 1500)"
quiet_counts quiet_start.txt

# ---- the load
echo "load: $WORKERS requesters for $SOAK_SECONDS s"
load_start_ms=$(now_ms)
t_start=$(date +%s)
until=$((t_start + SOAK_SECONDS))
for w in $(seq 1 "$WORKERS"); do
    worker "$w" "$until" &
    workers+=($!)
done
i=0
while [ "$(date +%s)" -lt "$until" ]; do
    sample $(($(date +%s) - t_start))
    status >"status/$i.json" 2>/dev/null
    i=$((i + 1))
    sleep "$SAMPLE_S"
done
join_workers 600
sample $(($(date +%s) - t_start))

# ---- after the load: sessions ended or expired, KV caches freed
t_end=$(now_ms)
idle_cell $((IDLE_S + 30)) && ok || bad "nodes still hold sessions or KV caches after the load: $(status | head -c 2000)"
echo "every node at 0 sessions and 0 KV bytes $(($(now_ms) - t_end)) ms after the last request ended"

# one abandoned request, alone: its stages hold its session until it expires (it
# stops itself mid-generation, at position 200, and is killed there)
MOONTAIL_TEST_PAUSE_AT_POSITION=200 "$BIN" "${P[@]}" --key "$tmp/r1.key" -p "${texts[0]}" -n 900 \
    --ignore-eos --temp 0 -t 1 >ab.txt 2>ab.err &
apid=$!
wait_stopped "$apid" || bad "the abandoned request did not stop at position 200: $(cat ab.err)"
route=$(sed -n 's/^[^ ]* [a-z]* requester: route: //p' ab.err | head -1 | sed 's/\[[0-9]*,[0-9]*)//g')
kill -9 "$apid" 2>/dev/null && ok || bad "the abandoned request ended before it could be killed: $(cat ab.err)"
wait "$apid" 2>/dev/null
t_kill=$(now_ms)
on_route="o.nodes.filter(n => '$route'.split(' ').includes(n.addr))"
wait_for "$on_route.length == 3 && $on_route.every(n => n.sessions == 1 && n.kv_bytes > 0)" 10 && ok ||
    bad "the killed requester's 3 stages ($route) do not show its session: $(status | head -c 1500)"
idle_cell $((IDLE_S + 15)) && ok || bad "the killed requester's session did not expire: $(status | head -c 1500)"
echo "abandoned session gone from every stage $(($(now_ms) - t_kill)) ms after its requester was killed (idle timeout ${IDLE_S} s)"

# the registry forgets the tickets of requesters that never said they were done
wait_for 'o.requests_active == 0 && o.requests_waiting == 0' 45 && ok ||
    bad "tickets left at the registry: $(status | head -c 400)"
quiet_counts quiet_end.txt

# ---- stop: every process leaves cleanly (LeakSanitizer runs at exit in an ASan build)
: >stopped.txt
for name in "${NODES[@]}" registry; do
    pid=${proc_pid[$name]}
    kill -TERM "$pid"
    rc=0
    timeout 60 tail --pid="$pid" -f /dev/null || bad "$name did not stop within 60 s of SIGTERM"
    wait "$pid" 2>/dev/null || rc=$?
    [ "$rc" -eq 0 ] && ok || bad "$name exited $rc on SIGTERM: $(tail -5 "$tmp/$([ "$name" = registry ] && echo reg || echo "$name").err")"
    [ "$name" = registry ] || echo "$name $(grep 'stopping:' "$tmp/$name.err" | tail -1)" >>stopped.txt
done
! grep -l "Sanitizer" "$tmp"/*.err && ok || bad "sanitizer reports in the processes' logs"

cat >config.json <<EOF
{"soak_s": $SOAK_SECONDS, "load_start_ms": $load_start_ms, "warm_s": $WARM_S, "judge_rss": $([ "$sanitized" = 1 ] && echo false || echo true),
 "fd_slack": 2, "thread_slack": 1, "rss_ratio": 1.10, "rss_slack_kb": 4096}
EOF
node "$LIB/soak_report.mjs" "$tmp" >report.txt 2>report.err
cat report.txt
cat report.err >&2
read -r n_checks n_failed < <(sed -n 's/^report: \([0-9]*\) checks, \([0-9]*\) failed$/\1 \2/p' report.txt)
if [ -n "${n_checks:-}" ]; then
    checks=$((checks + n_checks))
    fails=$((fails + n_failed))
else
    bad "soak_report.mjs did not finish"
fi
finish
