# netns.bash - several network hosts on one machine, for the scripts that
# need them (tests/test_netns.sh, tests/test_registry_netns.sh,
# bench/netns.sh); source it after harness.bash (it uses $tmp, pids and
# wait_listening).
#   netns_setup HOSTS    (root) creates namespace $R holding a bridge with
#                        $NET.X.1/24 (NET = ${NETNS_NET:-10.231}, X from the
#                        pid; each test picks its own NET) and HOSTS namespaces
#                        ${N[1..HOSTS]}, each with eth0 = ${IP[i]} on that
#                        bridge (veth pairs made directly inside the
#                        namespaces: nothing touches the root namespace);
#                        returns 1 with $why when namespaces are unavailable
#   inns NS CMD...       CMD inside namespace NS ("" = here)
#   bg NAME NS CMD...    starts CMD in the background inside NS ("" = here),
#                        output in $tmp/NAME.{out,err}; waits for its
#                        "listening on ADDR" line and sets ADDR and PID
#   netns_cleanup        kills whatever runs in the namespaces, deletes them
# Names are ${NETNS_PREFIX:-mt$$}-req and -n1, -n2, ...
nss=()
declare -a N IP
why=""

inns() {
    local ns=$1
    shift
    if [ -n "$ns" ]; then ip netns exec "$ns" "$@"; else "$@"; fi
}

bg() {
    local name=$1 ns=$2
    shift 2
    # exec: $! is the command itself (ip netns exec execs it too), so kill reaches it
    (
        [ -n "$ns" ] && exec ip netns exec "$ns" "$@"
        exec "$@"
    ) >"$tmp/$name.out" 2>"$tmp/$name.err" &
    PID=$!
    pids+=("$PID")
    wait_listening "$name" "$PID"
}

netns_cleanup() {
    for ns in "${nss[@]+"${nss[@]}"}"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    nss=()
}

netns_setup() {
    local hosts=$1 prefix=${NETNS_PREFIX:-mt$$} net=${NETNS_NET:-10.231} X=$(($$ % 200 + 20)) i
    [ "$(id -u)" -eq 0 ] || { why="not root"; return 1; }
    command -v ip >/dev/null || { why="no ip command"; return 1; }
    R="$prefix-req"
    ip netns add "$R" 2>"$tmp/ns.err" || { why="ip netns add: $(head -1 "$tmp/ns.err")"; return 1; }
    nss+=("$R")
    inns "$R" ip link set lo up &&
        inns "$R" ip link add br0 type bridge 2>"$tmp/ns.err" &&
        inns "$R" ip addr add "$net.$X.1/24" dev br0 &&
        inns "$R" ip link set br0 up || { why="bridge: $(head -1 "$tmp/ns.err")"; return 1; }
    for i in $(seq 1 "$hosts"); do
        N[i]="$prefix-n$i"
        IP[i]="$net.$X.$((i + 1))"
        ip netns add "${N[$i]}" 2>"$tmp/ns.err" || { why="ip netns add: $(head -1 "$tmp/ns.err")"; return 1; }
        nss+=("${N[$i]}")
        ip link add "v$i" netns "$R" type veth peer name eth0 netns "${N[$i]}" 2>"$tmp/ns.err" &&
            inns "$R" ip link set "v$i" master br0 &&
            inns "$R" ip link set "v$i" up &&
            inns "${N[$i]}" ip link set lo up &&
            inns "${N[$i]}" ip addr add "${IP[$i]}/24" dev eth0 &&
            inns "${N[$i]}" ip link set eth0 up || { why="veth: $(head -1 "$tmp/ns.err")"; return 1; }
    done
    # the bridge forwards once its ports are up: wait for the last host to answer
    command -v ping >/dev/null || { sleep 0.5; return 0; }
    for _ in $(seq 1 100); do
        inns "$R" ping -c1 -W1 "${IP[$hosts]}" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    why="$net.$X.0/24 not reachable across the bridge"
    return 1
}
