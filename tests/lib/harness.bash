# harness.bash - shared by the tests/*.sh end-to-end scripts: the moontail
# binary, a scratch directory, check counting and common helpers.
#   ok / bad MESSAGE        count a passed / failed check
#   finish                  print "N passed, N failed"; non-zero on failure
#   expect CODE PAT CMD...  CMD (under $T, default "timeout 30") exits with
#                           CODE and prints PAT (stdout + stderr)
#   json JS                 runs JS with o = the JSON object read from stdin
#   tokens                  prints [prompt_tokens, tokens] of a run/prompt --json
#   wait_listening NAME PID waits for "listening on ADDR" in $tmp/NAME.out, sets ADDR
#                           (LISTEN_TRIES x 50 ms, default 200: 10 s)
#   start_bg NAME CMD...    CMD in the background (output in $tmp/NAME.out and
#                           .err, pid added to `pids`); waits for its "listening
#                           on ADDR" line; sets ADDR and PID
#   route_nodes_setup       for nodes of a static route (node --shard, prompt --route):
#                           a 4-layer model at $M, keys $tmp/req.key and
#                           $tmp/node.key (public keys in $req, $nodekey) and
#                           $tmp/auth authorizing both
#   start_route_node NAME ARGS...  such a node on 127.0.0.1:0 (1 thread); sets ADDR
#   start_small_cell MODEL ACCOUNT  a registry of MODEL (1 replica, no spare) and
#                           two nodes that each hold about 60% of it, on
#                           127.0.0.1, waited for until ready; sets REG (its
#                           URL) and writes ACCOUNT's token to $tmp/api.token
#   status                  `moontail status --json` of the registry at $URL
#   wait_for JS [SECONDS]   until JS is true of o = the JSON `status` prints
#                           (a script may define its own; default 30 s); 1 on
#                           timeout
#   wait_stopped PID [SECS] until PID or a process below it has stopped itself
#                           (a requester run with MOONTAIL_TEST_PAUSE_AT_POSITION,
#                           docs/testing.md); sets STOPPED to its pid; 1 when PID
#                           ended first or after SECS (default 60)
#   MODEL_ARCH              the architecture flags for a script's `moontail
#                           mkmodel` (its own widths follow them):
#                           MT_TEST_ARCH=kimi-k3 (CMake's *_kimi_k3 tests)
#                           gives a kimi-k3 (KDA and MLA layers, a checkpoint
#                           banked every 2 layers, latent MXFP4 experts)
#                           instead of the default qwen3moe
# Background processes whose pids a script adds to `pids` are killed on exit;
# a script may define extra_cleanup (run before the scratch dir goes).
# KEEP_TMP=1 keeps the scratch directory (its path is printed) for a look at
# the processes' logs after a failure.
BIN=${MT_BIN:?MT_BIN must point at the moontail binary}
case "${MT_TEST_ARCH:-qwen3moe}" in
qwen3moe) MODEL_ARCH=(--arch qwen3moe) ;;
kimi-k3) MODEL_ARCH=(--arch kimi-k3 --experts 8 --experts-used 2 --res-block 2 --latent 32 --kda-head-dim 32) ;;
*)
    echo "MT_TEST_ARCH must be qwen3moe or kimi-k3 (got '$MT_TEST_ARCH')" >&2
    exit 2
    ;;
esac
tmp=$(mktemp -d)
# `split` and `plan check` keep model hashes in a per-user cache: the scratch dir's, not the user's
export XDG_CACHE_HOME="$tmp/xdg-cache"
pids=()
harness_cleanup() {
    for p in "${pids[@]+"${pids[@]}"}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if declare -F extra_cleanup >/dev/null; then extra_cleanup; fi
    # after a failed check, what each background process said last (CI keeps only this output)
    if [ "${fails:-0}" -gt 0 ]; then
        for f in "$tmp"/*.err; do
            [ -s "$f" ] || continue
            echo "--- last lines of $(basename "$f"):" >&2
            tail -n 12 "$f" | cut -c 1-300 >&2
        done
    fi
    if [ -n "${KEEP_TMP:-}" ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap harness_cleanup EXIT
fails=0 checks=0
ok() { checks=$((checks + 1)); }
bad() {
    checks=$((checks + 1))
    fails=$((fails + 1))
    echo "FAIL: $*" >&2
}
finish() {
    echo "$((checks - fails)) passed, $fails failed"
    [ "$fails" -eq 0 ]
}
expect() {
    local code=$1 pat=$2
    shift 2
    ${T:-timeout 30} "$@" >"$tmp/o" 2>&1
    local rc=$?
    if [ $rc -eq "$code" ] && grep -q -- "$pat" "$tmp/o"; then
        ok
    else
        bad "'$*' gave $rc, wanted $code and '$pat': $(head -c 800 "$tmp/o")"
    fi
}
json() { node -e "const o=JSON.parse(require('fs').readFileSync(0,'utf8')); $1"; }
tokens() { json 'console.log(JSON.stringify([o.prompt_tokens, o.tokens]))'; }
wait_listening() {
    local name=$1 pid=$2
    ADDR=""
    for _ in $(seq 1 "${LISTEN_TRIES:-200}"); do
        # may not exist yet; a Windows program under wine ends its lines in CRLF
        ADDR=$(sed -n 's/^listening on //p' "$tmp/$name.out" 2>/dev/null | tr -d '\r')
        [ -n "$ADDR" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    bad "$name did not start: $(cat "$tmp/$name.err")"
    return 1
}
start_bg() {
    local name=$1
    shift
    "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    PID=$!
    pids+=("$PID")
    wait_listening "$name" "$PID"
}
status() { "$BIN" status --registry "$URL" --json 2>/dev/null; }
wait_for() {
    local js=$1 end=$((SECONDS + ${2:-30}))
    while [ $SECONDS -lt $end ]; do
        status | json "process.exit(($js) ? 0 : 1)" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
wait_stopped() {
    local top=$1 end=$((SECONDS + ${2:-60}))
    STOPPED=""
    while [ $SECONDS -lt $end ]; do
        kill -0 "$top" 2>/dev/null || return 1
        # the first stopped process among top and its descendants (timeout, ip netns exec, moontail)
        STOPPED=$(ps -e -o pid=,ppid=,stat= | awk -v top="$top" '
            { parent[$1] = $2; state[$1] = $3 }
            END { for (p in parent) { q = p; while (q != "" && q != top && q > 1) q = parent[q]
                                      if (q == top && state[p] ~ /^T/) { print p; exit } } }')
        [ -n "$STOPPED" ] && return 0
        sleep 0.05
    done
    return 1
}
route_nodes_setup() {
    M="$tmp/m.gguf"
    ${T:-timeout 30} "$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type q8_0 --layers 4 --embd 128 \
        --heads 4 --head-dim 32 --ff 128 --ff-exp 64 --seed 3 >/dev/null && ok || bad "mkmodel"
    req=$(${T:-timeout 30} "$BIN" keygen -o "$tmp/req.key") && ok || bad "keygen requester"
    nodekey=$(${T:-timeout 30} "$BIN" keygen -o "$tmp/node.key") && ok || bad "keygen node"
    printf '%s requester\n%s node\n' "$req" "$nodekey" >"$tmp/auth"
}
start_route_node() {
    local name=$1
    shift
    "$BIN" node --listen 127.0.0.1:0 --threads 1 --key "$tmp/node.key" --authorized "$tmp/auth" "$@" \
        >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pids+=($!)
    wait_listening "$name" "${pids[-1]}"
}
start_small_cell() {
    local model=$1 account=$2 cap_mb
    start_bg reg "$BIN" registry --model "$model" --db "$tmp/reg.db" --key "$tmp/reg.key" \
        --shards "$tmp/seed" --replicas 1 --spares 0 --heartbeat-ms 200 --dead-after-ms 1500 \
        --listen 127.0.0.1:0 --quiet
    REG=$ADDR
    "$BIN" account new "$account" --registry "$REG" -o "$tmp/api.token" >/dev/null 2>&1 || bad "account"
    cap_mb=$(($(stat -c %s "$model") * 6 / 10 / 1000000 + 1))
    for k in 1 2; do
        start_bg "n$k" "$BIN" node --registry "$REG" --token-file "$tmp/api.token" --key "$tmp/n$k.key" \
            --data "$tmp/d$k" --listen 127.0.0.1:0 --capacity-mb "$cap_mb" --speed 1 --threads 1
    done
    for _ in $(seq 1 150); do
        "$BIN" status --registry "$REG" --json 2>/dev/null | json 'process.exit(o.ready ? 0 : 1)' 2>/dev/null && break
        sleep 0.2
    done
}
