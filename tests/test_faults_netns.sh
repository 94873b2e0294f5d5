#!/usr/bin/env bash
# test_faults_netns.sh - fault injection across network namespaces, with the
# time each fault takes to recover from (docs/faults.md). A registry, seven
# nodes (pc1..pc7) and the requester each run in their own namespace on a
# bridge (tests/lib/netns.bash, 10.236.X.0/24 made by this test); the
# registry listens on a fixed port so that it can be restarted in place
# (in plain HTTP, --insecure-http: TLS handshakes on the impaired link would
# only add noise to the timings; test_registry_netns.sh runs its cell over TLS).
# pc1..pc6 hold about half the model each: 2 pipelines of 2 stages, 2 spares.
# Each scenario hits a generation in flight, checks the outcome against
# `moontail run`'s greedy text, and prints one line
#   FAULT <scenario> | <outcome> | <recovery ms>
# (recovery: from the fault to the first token on a new route, or to the
# service being whole again; which one is said in the outcome):
#   sigstop      a stage on the route stopped (SIGSTOP: a hang, not a crash);
#                the requester (--call-timeout-ms 2000) finishes with the
#                same text; a spare takes the shard; after SIGCONT the node
#                is a spare that serves nothing and is not routed to
#   impaired     the requester in its own namespace, its link switched to a
#                path with 200 ms each way and 5% packet loss (impair_link,
#                built from tests/lib/impair_link.c: TUN devices, real loss,
#                TCP retransmits): a short prompt on it gives the same
#                tokens (tokens/s with and without printed), and a long
#                generation impaired for 6 s in its middle gives the same
#                text without a failover
#   disk-full    pc7 (fastest, so first in line for a lost shard) keeps its
#                --data on a tmpfs this test mounts, too small for a shard;
#                a stage of the route is killed (-9): the requester fails
#                over (kill -9, its own FAULT line), pc7 gets the shard, says
#                that the shard does not fit in its directory, keeps no
#                partial file, and the shard goes to another spare: 2
#                replicas again within a bounded time
#   registry     the registry killed (-9) mid-generation, and a prompt made
#                while it is down: the generation finishes with the same
#                text, the prompt fails with an error naming the registry
#                within a bounded time; restarted on the same database, it
#                serves routes again with no shard moved
#   link-cut     a stage's link taken down (`ip link set eth0 down`): the
#                requester finishes with the same text
# Without root, network namespaces or TUN devices it prints "SKIP: ..." and
# runs nothing. Processes, namespaces and the tmpfs mount are removed on exit,
# also on failure; every command runs under a time limit (hang guards only).
# KEEPLOGS=DIR keeps a copy of the scratch directory (every process's log).
set -u
. "$(dirname "$0")/lib/harness.bash"
IMPAIR=${MT_BUILD:-build}/impair_link
NETNS_NET=10.236
NETNS_PREFIX=mtft$$
. "$(dirname "$0")/lib/netns.bash"
. "$(dirname "$0")/lib/long_prompt.bash"
TMPFS=""
extra_cleanup() {
    netns_cleanup # first: pc7 keeps files open on the tmpfs
    [ -n "$TMPFS" ] && { umount "$TMPFS" 2>/dev/null || umount -l "$TMPFS"; }
    [ -n "${KEEPLOGS:-}" ] && cp -r "$tmp" "$KEEPLOGS"
}
trap 'exit 1' INT TERM HUP
t_start=$SECONDS
cd "$tmp" || exit 1

[ -x "$IMPAIR" ] || { bad "$IMPAIR is missing: build the impair_link target"; finish; exit; }
[ -c /dev/net/tun ] || { echo "SKIP: no /dev/net/tun (TUN devices); test_registry_netns.sh covers the rest"; finish; exit; }
# R: requester (and the bridge); N[1]: registry; N[k+1]: node pc<k>
if ! netns_setup 8; then
    echo "SKIP: network namespaces not available ($why); test_registry_cli.sh covers the control plane on loopback"
    finish
    exit
fi
RQ=(ip netns exec "$R")
declare -a NS NIP NPID NRUN
for k in 1 2 3 4 5 6 7; do NS[k]=${N[k + 1]} NIP[k]=${IP[k + 1]} NRUN[k]=0; done
X=${IP[1]#*.*.}
X=${X%%.*}
echo "netns: requester in $R, registry in ${N[1]} (${IP[1]}), nodes pc1..pc7 at ${NIP[*]}"

now_ns() { date +%s%N; }
ms_since() { echo $((($(now_ns) - $1) / 1000000)); } # ms since a `date +%s%N`
FAULTS=()
fault_line() { # SCENARIO OUTCOME RECOVERY_MS
    FAULTS+=("FAULT $1 | $2 | $3")
    echo "FAULT $1 | $2 | $3"
}
status() { timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL" --json 2>/dev/null; }
node_id() { status | json "console.log(o.nodes.find(n => n.name == 'pc$1').node_id)"; }
node_k() { # k of the node at ADDR (nothing when none)
    local k
    for k in 1 2 3 4 5 6 7; do [ "${NIP[k]}:7411" = "$1" ] && echo "$k"; done
}
# start_node K [SPEED [DATA]]: pc<K> in its namespace (again after a kill: same key, data, address)
start_node() {
    local k=$1
    NRUN[k]=$((NRUN[k] + 1))
    bg "n$k.${NRUN[k]}" "${NS[k]}" "$BIN" node --registry "$URL" --token-file "$tmp/cafe.token" \
        --key "$tmp/n$k.key" --data "${3:-$tmp/d$k}" --listen "${NIP[k]}:7411" --name "pc$k" \
        --capacity-mb "$cap_mb" --threads 1 --speed "${2:-1}" && NPID[k]=$PID
}
start_registry() {
    bg "reg.$1" "${N[1]}" "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" \
        --shards "$tmp/seed" --replicas 2 --spares 2 --heartbeat-ms 200 --dead-after-ms 1500 \
        --listen "${IP[1]}:7400" --insecure-http && REGPID=$PID
}
# the assignment of every node: "pc1=stage:... pc2=..." (what a restart must not move)
assignments() {
    status | json "console.log(o.nodes.filter(n => n.state != 'dead').map(n =>
        n.name + '=' + n.role + ':' + n.shard).sort().join(' '))"
}

# ---- the model and the local reference
M="$tmp/m.gguf"
timeout 30 "$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 4 --embd 128 --heads 4 \
    --head-dim 32 --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 7 >/dev/null || bad "mkmodel"
msize=$(stat -c %s "$M")
cap_mb=$((msize * 6 / 10 / 1000000 + 1)) # room for about half the model: 2 stages a pipeline
PROMPT="Every machine of the cell holds a part"
NLONG=800 NSHORT=24 NIMP=12 # NLONG: the faults happen at position 100 (long_prompt), so 800 leaves 700 to finish
timeout 60 "$BIN" run -m "$M" -p "$PROMPT" -n $NSHORT --temp 0 -t 1 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")
timeout 120 "$BIN" run -m "$M" -p "$PROMPT" -n $NLONG --temp 0 -t 1 --ignore-eos >"$tmp/ref_long.txt" 2>/dev/null ||
    bad "long reference run"
timeout 60 "$BIN" run -m "$M" -p "$PROMPT" -n $NIMP --temp 0 -t 1 --ignore-eos --json >"$tmp/ref_imp.json" 2>/dev/null ||
    bad "reference run for the impaired link"
ref_imp=$(tokens <"$tmp/ref_imp.json")

# ---- the cell: registry, account, pc1..pc6
start_registry 1 || { finish; exit; }
URL=$ADDR
timeout 30 "${RQ[@]}" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token" >/dev/null 2>&1 || bad "account new"
for k in 1 2 3 4 5 6; do start_node $k || { finish; exit; }; done
wait_for 'o.min_replicas_serving == 2 && o.spares == 2 && o.nodes_alive == 6' 60 && ok ||
    bad "6 nodes did not reach 2 serving replicas and 2 spares: $(status | head -c 1500)"
P=(prompt --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache"
    --call-timeout-ms 2000)
timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n $NSHORT --temp 0 --json >"$tmp/p1.json" 2>"$tmp/p1.err"
[ "$(tokens <"$tmp/p1.json" 2>/dev/null)" = "$ref" ] && ok || bad "first prompt: $(cat "$tmp/p1.err")"

# finish_prompt NAME WHAT T: the generation NAME ended with the local text after a
# failover; sets REC_MS = the failed call's time + the requester's recovery time
# (the fault to the first token on the new route, within one token's time)
finish_prompt() {
    local name=$1 what=$2 rc line
    wait $PPID_
    rc=$?
    [ $rc -eq 0 ] && ok || bad "$what: prompt exit $rc after $(ms_since "$3") ms: $(tail -5 "$tmp/$name.err")"
    cmp -s "$tmp/$name.txt" "$tmp/ref_long.txt" && ok || bad "$what: the text differs from the local run"
    line=$(sed -n 's/^[^ ]* [a-z]* requester: \(recovered on a new route in .*\)/\1/p' "$tmp/$name.err" | head -1)
    local rec call
    rec=$(echo "$line" | sed -n 's/^recovered on a new route in \([0-9]*\) ms.*/\1/p')
    call=$(echo "$line" | sed -n 's/.*the failed call took \([0-9]*\) ms.*/\1/p')
    REC_MS=""
    if [ -n "$rec" ] && [ -n "$call" ]; then
        REC_MS=$((rec + call))
        ok
    else
        bad "$what: no failover (did the generation end first?): $(cat "$tmp/$name.err")"
    fi
    echo "$what: prompt done $(ms_since "$3") ms after the fault; $line"
}

# ---- 1. SIGSTOP of the route's first stage
long_prompt stop 120
S=$(node_k "$FIRST")
if [ -n "$S" ] && kill -0 $PPID_ 2>/dev/null; then
    kill -STOP "${NPID[S]}"
    t_stop=$(now_ns)
    resume_prompt
    S_ID=$(node_id "$S")
    finish_prompt stop "SIGSTOP of the first stage (pc$S)" "$t_stop"
    rec_stop=$REC_MS
    grep -q "no frame from\|timed out\|timeout" "$tmp/stop.err" && ok ||
        bad "the stopped node was not seen as a reply timeout: $(cat "$tmp/stop.err")"
    wait_for "o.nodes.find(n => n.node_id == $S_ID).state == 'dead' && o.min_replicas_serving == 2" 30 && ok ||
        bad "a spare did not take the stopped pc$S's shard: $(status | head -c 1500)"
    restore_stop=$(ms_since "$t_stop")
    kill -CONT "${NPID[S]}"
    t_cont=$(now_ns)
    wait_for "o.nodes.find(n => n.node_id == $S_ID).state == 'spare'" 30 && ok ||
        bad "pc$S is not a spare after SIGCONT: $(status | head -c 1500)"
    back_ms=$(ms_since "$t_cont")
    # its data plane stops (its shard went to the spare), and no route goes to it
    for _ in $(seq 1 100); do grep -q "stopping the data plane" "$tmp/n$S.1.err" && break; sleep 0.1; done
    grep -q "stopping the data plane" "$tmp/n$S.1.err" && ok ||
        bad "pc$S kept serving after SIGCONT: $(tail -5 "$tmp/n$S.1.err")"
    timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n $NSHORT --temp 0 --json >"$tmp/p2.json" 2>"$tmp/p2.err"
    [ "$(tokens <"$tmp/p2.json" 2>/dev/null)" = "$ref" ] && ok || bad "prompt after SIGCONT: $(cat "$tmp/p2.err")"
    json "process.exit(o.route.includes('${NIP[S]}:') ? 1 : 0)" <"$tmp/p2.json" && ok ||
        bad "the resumed pc$S was routed to: $(head -c 400 "$tmp/p2.json")"
    echo "pc$S stopped: a spare restored 2 replicas $restore_stop ms after SIGSTOP; after SIGCONT a spare in $back_ms ms"
    fault_line sigstop "same text; failover after the 2000 ms call timeout; 2 replicas after ${restore_stop} ms; spare ${back_ms} ms after SIGCONT" "${rec_stop:-?}"
else
    bad "could not find the route's first node in '$ROUTE': $(cat "$tmp/stop.err")"
    resume_prompt
    wait $PPID_
fi

# ---- 2. the requester's link: 200 ms each way and 5% packet loss
# Q, the impaired requester's namespace, has its address on its loopback
# device and two paths to R (the bridge's router): a plain veth, and the TUN pair of
# impair_link. Switching the routes on both ends moves every packet, also of
# open connections, from one path to the other: the impairment can start and
# end in the middle of a generation.
Q="$NETNS_PREFIX-imp"
QIP=10.237.$X.2
qnet=10.238.$X # the plain veth: .1 in R, .2 in Q
impaired_ok=0
impair_on() {
    ip -n "$Q" route replace default dev imp1 src "$QIP" && ip -n "$R" route replace "$QIP/32" dev imp0
}
impair_off() {
    ip -n "$Q" route replace default via "$qnet.1" dev eth0 src "$QIP" &&
        ip -n "$R" route replace "$QIP/32" via "$qnet.2" dev qv0
}
qsetup() {
    local ns i
    ip netns add "$Q" || return 1
    nss+=("$Q")
    for ns in "$R" "$Q"; do # forwarding in R; no reverse-path drops while routes switch
        ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
            net.ipv4.conf.default.rp_filter=0 || return 1
    done
    ip -n "$Q" link set lo up &&
        ip link add qv0 netns "$R" type veth peer name eth0 netns "$Q" &&
        ip -n "$R" addr add "$qnet.1/30" dev qv0 && ip -n "$R" link set qv0 up &&
        ip -n "$Q" addr add "$qnet.2/30" dev eth0 && ip -n "$Q" link set eth0 up &&
        ip -n "$Q" addr add "$QIP/32" dev lo || return 1
    "$IMPAIR" --ns-a "$R" --dev-a imp0 --ns-b "$Q" --dev-b imp1 --delay-ms 200 --loss 0.05 \
        --seed 7 --lifetime 600 >"$tmp/impair.out" 2>"$tmp/impair.err" &
    IMPPID=$!
    pids+=("$IMPPID")
    for _ in $(seq 1 100); do grep -q ready "$tmp/impair.out" && break; sleep 0.05; done
    grep -q ready "$tmp/impair.out" || return 1
    ip -n "$R" link set imp0 up && ip -n "$Q" link set imp1 up || return 1
    for i in 1 2 3 4 5 6 7 8; do ip -n "${N[i]}" route add "$QIP/32" via "$NETNS_NET.$X.1" || return 1; done
    ip -n "$Q" route add default via "$qnet.1" dev eth0 src "$QIP" &&
        ip -n "$R" route add "$QIP/32" via "$qnet.2" dev qv0
}
if qsetup 2>"$tmp/q.err"; then
    impaired_ok=1
    ok
else
    bad "the impaired link could not be set up: $(cat "$tmp/q.err" "$tmp/impair.err")"
fi
if [ $impaired_ok = 1 ]; then
    QP=(ip netns exec "$Q" "$BIN" "${P[@]}" --call-timeout-ms 20000 --fixed-call-timeout)
    # a call timeout well above the link's retransmission delays: with 2 s, the slow
    # link was taken for a lost node (a lost segment waits out an RTO of 1 s and more);
    # fixed, since waits adapted to the usual step time would be as short
    timeout 60 "${QP[@]}" -p "$PROMPT" -n $NIMP --temp 0 --ignore-eos --json >"$tmp/fast.json" 2>"$tmp/fast.err"
    [ "$(tokens <"$tmp/fast.json" 2>/dev/null)" = "$ref_imp" ] && ok || bad "unimpaired prompt: $(cat "$tmp/fast.err")"
    impair_on
    t_imp=$(now_ns)
    timeout 120 "${QP[@]}" -p "$PROMPT" -n $NIMP --temp 0 --ignore-eos --json >"$tmp/slow.json" 2>"$tmp/slow.err"
    rc=$?
    imp_ms=$(ms_since "$t_imp")
    impair_off
    [ $rc = 0 ] && [ "$(tokens <"$tmp/slow.json" 2>/dev/null)" = "$ref_imp" ] && ok ||
        bad "prompt over the impaired link (exit $rc): $(cat "$tmp/slow.err")"
    fast_tps=$(json "console.log(o.timings.generate_tokens_per_s.toFixed(1))" <"$tmp/fast.json" 2>/dev/null)
    slow_tps=$(json "console.log(o.timings.generate_tokens_per_s.toFixed(2))" <"$tmp/slow.json" 2>/dev/null)
    echo "impaired: $NIMP tokens at ${slow_tps:-?} tok/s over 200 ms + 5% loss, ${fast_tps:-?} tok/s" \
        "unimpaired; the whole prompt took $imp_ms ms"
    # in flight: a long generation, the link impaired for 6 s from its first text on
    timeout 180 "${QP[@]}" -p "$PROMPT" -n $NLONG --temp 0 --ignore-eos >"$tmp/flight.txt" 2>"$tmp/flight.err" &
    PPID_=$!
    pids+=("$PPID_")
    for _ in $(seq 1 500); do
        [ "$(stat -c %s "$tmp/flight.txt")" -gt 20 ] && break
        kill -0 $PPID_ 2>/dev/null || break
        sleep 0.02
    done
    impair_on
    t_on=$(now_ns)
    b_on=$(stat -c %s "$tmp/flight.txt")
    sleep 6
    b_off=$(stat -c %s "$tmp/flight.txt")
    impair_off
    t_off=$(ms_since "$t_on")
    wait $PPID_
    rc=$?
    [ $rc = 0 ] && cmp -s "$tmp/flight.txt" "$tmp/ref_long.txt" && ok ||
        bad "generation impaired in flight: exit $rc, text differs or ends early: $(tail -3 "$tmp/flight.err")"
    [ "$b_on" -lt "$(stat -c %s "$tmp/ref_long.txt")" ] && ok ||
        bad "the generation ended before the link was impaired"
    ! grep -q "route failed" "$tmp/flight.err" && ok ||
        bad "the impaired link was taken for a failure: $(cat "$tmp/flight.err")"
    echo "impaired in flight: $((b_off - b_on)) bytes of text in the $t_off ms impaired (from byte $b_on of" \
        "$(stat -c %s "$tmp/ref_long.txt")), the same text in the end"
    kill -TERM "$IMPPID" && wait "$IMPPID"
    cat "$tmp/impair.err"
    n_lost=$(($(sed -n 's/.* carried, \([0-9]*\) lost .*/\1/p' "$tmp/impair.err" | paste -sd+)))
    [ "${n_lost:-0}" -gt 0 ] && ok || bad "the impaired link dropped no packet: $(cat "$tmp/impair.err")"
    fault_line impaired "same text; ${slow_tps:-?} tok/s vs ${fast_tps:-?} unimpaired; in flight: $((b_off - b_on)) bytes in ${t_off} ms; no failover" "0"
fi

# ---- 3. disk full: pc7, first in line for a lost shard, has too little room for it
TMPFS=$tmp/small
shard_kb=$((msize / 2 / 1024)) # a pipeline stage holds about half the model
mkdir -p "$TMPFS" && mount -t tmpfs -o size=$((shard_kb / 2))k tmpfs "$TMPFS" 2>"$tmp/mount.err" ||
    { echo "SKIP: the disk-full scenario: cannot mount a tmpfs: $(cat "$tmp/mount.err")"; TMPFS=""; }
if [ -n "$TMPFS" ]; then
    start_node 7 2 "$TMPFS/data" || { finish; exit; }
    wait_for "o.nodes.find(n => n.name == 'pc7').state == 'spare' && o.min_replicas_serving == 2" 30 && ok ||
        bad "pc7 did not join as a spare: $(status | head -c 1500)"
    D_ID=$(node_id 7)
    long_prompt kill 120
    K=$(node_k "$FIRST")
    if [ -n "$K" ] && kill -0 $PPID_ 2>/dev/null; then
        { kill -9 "${NPID[K]}" && wait "${NPID[K]}"; } 2>/dev/null
        t_kill=$(now_ns)
        resume_prompt
        K_ID=$(node_id "$K")
        finish_prompt kill "kill -9 of the first stage (pc$K)" "$t_kill"
        fault_line kill-9 "same text; failover at once (connection reset)" "${REC_MS:-?}"
        # pc7 gets the shard, cannot hold it, and the shard moves on to another spare
        for _ in $(seq 1 300); do grep -q "fetching shard" "$tmp/n7.1.err" && break; sleep 0.1; done
        grep -q "fetching shard" "$tmp/n7.1.err" && ok ||
            bad "pc7 was not given the lost shard: $(cat "$tmp/n7.1.err")"
        wait_for "o.nodes.find(n => n.node_id == $K_ID).state == 'dead' && o.min_replicas_serving == 2 &&
            o.nodes.find(n => n.node_id == $D_ID).state != 'serving'" 60 && ok ||
            bad "2 replicas not restored past the full disk of pc7: $(status | head -c 2000)"
        restore_disk=$(ms_since "$t_kill")
        cat "$tmp/n7.1.err"
        grep "$TMPFS/data" "$tmp/n7.1.err" | grep -qi "space" && ok ||
            bad "pc7's error does not name its directory and the lack of space: $(cat "$tmp/n7.1.err")"
        left=$(ls "$TMPFS/data")
        [ -z "$left" ] && ok || bad "pc7 keeps a partial shard in $TMPFS/data: $left"
        echo "disk full: pc$K killed; pc7 could not hold its shard; 2 replicas again $restore_disk ms after the kill"
        fault_line disk-full "pc7 names its directory and the lack of space, keeps nothing; another spare took the shard; 2 replicas after the kill" "$restore_disk"
    else
        bad "could not find the route's first node in '$ROUTE': $(cat "$tmp/kill.err")"
        resume_prompt
        wait $PPID_
    fi
fi

# ---- 4. the registry killed mid-generation, a prompt while it is down, a restart
before=$(assignments)
long_prompt reg 120
{ kill -9 "$REGPID" && wait "$REGPID"; } 2>/dev/null
t_reg=$(now_ns)
resume_prompt
timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n $NSHORT --temp 0 --json >"$tmp/down.json" 2>"$tmp/down.err"
down_rc=$?
down_ms=$(ms_since "$t_reg")
if [ $down_rc = 0 ]; then
    [ "$(tokens <"$tmp/down.json" 2>/dev/null)" = "$ref" ] && ok || bad "a prompt while the registry was down gave other tokens"
    down_what="a prompt then waited and succeeded in $down_ms ms"
else
    [ $down_rc != 124 ] && grep -q "registry at http://${IP[1]}:7400 does not answer" "$tmp/down.err" && ok ||
        bad "a prompt while the registry was down: exit $down_rc, no error naming the registry: $(cat "$tmp/down.err")"
    down_what="a prompt then failed in $down_ms ms naming the registry"
fi
echo "registry down: $down_what: $(tail -1 "$tmp/down.err")"
while [ "$(ms_since "$t_reg")" -lt 3000 ]; do sleep 0.1; done # down for 2x its dead-after time
start_registry 2 || { finish; exit; }
t_up=$(now_ns)
wait $PPID_
rc=$?
[ $rc -eq 0 ] && cmp -s "$tmp/reg.txt" "$tmp/ref_long.txt" && ok ||
    bad "the generation in flight while the registry restarted: exit $rc, $(tail -3 "$tmp/reg.err")"
for i in $(seq 1 100); do
    timeout 60 "${RQ[@]}" "$BIN" "${P[@]}" -p "$PROMPT" -n $NSHORT --temp 0 --json >"$tmp/up.json" 2>"$tmp/up.err" && break
    sleep 0.1
done
gap=$(ms_since "$t_reg") up_ms=$(ms_since "$t_up")
[ "$(tokens <"$tmp/up.json" 2>/dev/null)" = "$ref" ] && ok || bad "prompt after the registry restart: $(cat "$tmp/up.err")"
echo "registry restarted: the first prompt after it was done $up_ms ms after the restart, $gap ms after the kill ($i tries)"
wait_for "o.min_replicas_serving == 2" 30 && ok || bad "2 replicas not serving after the restart: $(status | head -c 1500)"
after=$(assignments)
[ "$before" = "$after" ] && ok || bad "the registry restart moved shards: before: $before; after: $after"
fault_line registry "in-flight text same; $down_what; 3000 ms down; no shard moved; first prompt done $up_ms ms after the restart" "$gap"

# ---- 5. a stage's link cut mid-generation
long_prompt cut 120
C=$(node_k "$FIRST")
if [ -n "$C" ] && kill -0 $PPID_ 2>/dev/null; then
    timeout 5 ip -n "${NS[C]}" link set eth0 down
    t_cut=$(now_ns)
    resume_prompt
    finish_prompt cut "link of the first stage (pc$C) cut" "$t_cut"
    fault_line link-cut "same text; failover after the 2000 ms call timeout" "${REC_MS:-?}"
    timeout 5 ip -n "${NS[C]}" link set eth0 up
else
    bad "could not find the route's first node in '$ROUTE': $(cat "$tmp/cut.err")"
    resume_prompt
    wait $PPID_
fi

timeout 10 "${RQ[@]}" "$BIN" status --registry "$URL"
echo "summary:"
for f in "${FAULTS[@]}"; do echo "  $f"; done
echo "total $((SECONDS - t_start)) s"
finish
