#!/usr/bin/env bash
# tests/win/cell.sh - Windows nodes in a cell, under wine: a registry on Linux, two nodes
# of the Windows build (moontail.exe under wine) and one of the Linux build join it on
# 127.0.0.1 with an account token, each with room for about 60% of the model (so a
# pipeline has two stages, and the third node is the spare). Checks:
#   - the Windows nodes join, fetch and check their shards, and serve: one pipeline and a
#     spare, with a Windows node on the route;
#   - each Windows node logs a checked fetch, and its shard server hands out the shard it
#     holds (equal to the seed's) and 404 for one it lacks;
#   - `moontail prompt --registry` (Linux) gives the tokens `moontail run` gives;
#   - `moontail.exe pause` on a Windows node of the route: it drains, the prompt goes
#     around it with the same tokens, and `--resume` gives it work again;
#   - a Windows node of the route killed mid-generation (kill -9) leaves the text
#     unchanged: the requester fails over and replays;
#   - `moontail.exe status` reads the cell;
#   - with MT_WIN_ZIP (the installer zip): install.cmd from it sets a fourth PC up with
#     `setup`, which makes the node start at each logon and starts it in the background;
#     it joins, and `setup --stop` stops it cleanly;
#   - a Windows node behind NAT (--relay) registers the relay's address, and a prompt
#     through a second registry's relay to it gives `moontail run`'s tokens;
#   - a Windows node behind a tunnel program (--tunnel, tests/win/fake_tunnel.c through
#     cmd.exe): prompts through the tunnel give run's tokens, a killed tunnel is started
#     again on a new address, and the tunnel dies with its node (the job object).
# usage: MT_BIN=build/moontail MT_WIN_BIN=build-win/node/moontail.exe \
#        MT_WIN_DLLS=build-win/prefix/bin bash tests/win/cell.sh
set -u
. "$(dirname "$0")/../lib/harness.bash"
. "$(dirname "$0")/../lib/long_prompt.bash"
WIN=${MT_WIN_BIN:?MT_WIN_BIN must point at moontail.exe}
# the paths given may be relative to where the script started; it works in $tmp
BIN=$(realpath "$BIN") WIN=$(realpath "$WIN")
[ -n "${MT_WIN_ZIP:-}" ] && MT_WIN_ZIP=$(realpath "$MT_WIN_ZIP")
[ -n "${MT_WIN_DLLS:-}" ] && MT_WIN_DLLS=$(realpath "$MT_WIN_DLLS")
export WINEDEBUG=-all
if [ -n "${MT_WIN_DLLS:-}" ]; then
    WINEPATH="Z:$(cd "$MT_WIN_DLLS" && pwd | tr / '\\')"
    export WINEPATH
fi
T="timeout 90"
cd "$tmp"
# the tunnel stand-in's processes (not the cmd.exe that starts them); one left by a failed
# check is killed (a node's job object ends it with the node)
TUNNEL_RE='fake_tunnel\.exe [0-9]+$'
extra_cleanup() { pkill -9 -f "$TUNNEL_RE"; }
# wlog NAME: what background process NAME wrote on stderr, without wine's CRs
wlog() { tr -d '\r' <"$tmp/$1.err"; }

# start_win NAME ARGS...: moontail.exe ARGS under wine in the background, as start_bg
# (a node under wine takes longer to join: up to 60 s)
start_win() {
    local name=$1
    shift
    LISTEN_TRIES=1200 start_bg "$name" wine "$WIN" "$@"
}

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 4 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 3 >/dev/null || bad "mkmodel"
cap_mb=$(($(stat -c %s "$M") * 6 / 10 / 1000000 + 1))
PROMPT="The cell computes one layer at a time"
$T "$BIN" run -m "$M" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/ref.json" 2>/dev/null || bad "reference run"
ref=$(tokens <"$tmp/ref.json")
$T "$BIN" run -m "$M" -p "$PROMPT" -n 600 --temp 0 --ignore-eos >"$tmp/ref_long.txt" 2>/dev/null ||
    bad "long reference"

start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" \
    --shards "$tmp/seed" --replicas 1 --spares 1 --heartbeat-ms 200 --dead-after-ms 2000 \
    --listen 127.0.0.1:0
URL=$ADDR
expect 0 "token in" "$BIN" account new cafe --registry "$URL" -o "$tmp/cafe.token"
declare -A node_pid node_addr node_win
for k in 1 2 3; do
    args=(node --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/n$k.key"
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "pc$k" --capacity-mb "$cap_mb"
        --speed 1 --threads 1)
    if [ $k -le 2 ]; then
        start_win "n$k" "${args[@]}"
        node_win[$k]=1
    else
        start_bg "n$k" "$BIN" "${args[@]}"
        node_win[$k]=0
    fi
    node_pid[$k]=$PID
    node_addr[$k]=$ADDR
done
wait_for 'o.min_replicas_serving >= 1 && o.spares >= 1 && o.nodes_alive == 3' 120 &&
    ok || bad "3 nodes did not reach a serving pipeline and a spare: $(status | head -c 1500)"
echo "cell: $(status | json 'console.log(o.nodes.map(n => n.name + " " + n.state + " " + n.role).join(", "))')"
# each Windows node fetched its shard whole and checked (the line comes after the check)
for k in 1 2; do
    wlog "n$k" | grep -q "shard .*: [0-9]* pieces from peers, [0-9]* from the seed" &&
        ok || bad "pc$k (Windows) logged no checked shard fetch: $(wlog "n$k" | tail -5)"
done

# ---- a Windows node's shard server (libmicrohttpd's DLL) hands peers the shard it holds
peer_url=$(wlog n1 | sed -n 's/.*peers fetch shards from \(http:[^ ]*\).*/\1/p' | head -1)
shard=$(cd "$tmp/d1" && ls -- *.gguf 2>/dev/null | head -1)
shard=${shard%.gguf}
if [ -n "$peer_url" ] && [ -n "$shard" ]; then
    curl -sf "$peer_url/v1/shards/$shard" -o "$tmp/peer_copy.gguf" &&
        cmp -s "$tmp/peer_copy.gguf" "$tmp/d1/$shard.gguf" && ok ||
        bad "GET $peer_url/v1/shards/$shard did not give pc1's shard"
    [ -f "$tmp/seed/$shard.gguf" ] && cmp -s "$tmp/peer_copy.gguf" "$tmp/seed/$shard.gguf" && ok ||
        bad "pc1's shard $shard differs from the seed's (or the seed has none: $(ls "$tmp/seed" | head))"
    code=$(curl -s -o /dev/null -w '%{http_code}' "$peer_url/v1/shards/no-such-shard")
    [ "$code" = 404 ] && ok || bad "a shard pc1 lacks gave HTTP $code, not 404"
else
    bad "pc1 logged no shard server ($peer_url) or holds no shard ($(ls "$tmp/d1"))"
fi

# ---- the Windows build's own status command
WINEOUT=$(wine "$WIN" status --registry "$URL" 2>&1 | tr -d '\r')
grep -q "READY" <<<"$WINEOUT" && ok || bad "moontail.exe status: $WINEOUT"

# ---- a prompt through the cell gives the local tokens
P=(prompt --registry "$URL" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache")
$T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p1.json" 2>"$tmp/p1.err" ||
    bad "prompt: $(cat "$tmp/p1.err")"
got=$(tokens <"$tmp/p1.json" 2>/dev/null)
[ -n "$got" ] && [ "$got" = "$ref" ] && ok || bad "registry prompt tokens differ: $got vs $ref"
ROUTE1=$(sed -n 's/^[^ ]* [a-z]* requester: route: //p' "$tmp/p1.err" | head -1)
echo "route: $ROUTE1"

# ---- moontail.exe pause on a Windows node of the route: it drains, the spare takes its
# stage, a prompt avoids it and gives the same tokens; --resume makes it a spare again
paused=""
for k in 1 2; do
    case " $ROUTE1 " in *" ${node_addr[$k]}["*) paused=$k ;; esac
done
if [ -n "$paused" ]; then
    paused_id=$(status | json "console.log(o.nodes.find(n => n.name == 'pc$paused').node_id)")
    WINEOUT=$(wine "$WIN" pause --registry "$URL" --node "$paused_id" --token-file "$tmp/cafe.token" 2>&1 |
        tr -d '\r')
    grep -q "draining\|paused" <<<"$WINEOUT" && ok || bad "moontail.exe pause: $WINEOUT"
    wait_for "o.nodes.find(n => n.name == 'pc$paused').role == 'none' && o.min_replicas_serving >= 1" 60 &&
        ok || bad "paused pc$paused kept its work, or no pipeline formed without it: $(status | head -c 1500)"
    for _ in $(seq 1 300); do
        wlog "n$paused" | grep -q "draining: no more work here" && break
        sleep 0.2
    done
    wlog "n$paused" | grep -q "draining: no more work here" && ok ||
        bad "paused pc$paused (Windows) did not drain: $(wlog "n$paused" | tail -3)"
    $T "$BIN" "${P[@]}" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/p2.json" 2>"$tmp/p2.err" ||
        bad "prompt with pc$paused paused: $(cat "$tmp/p2.err")"
    json "if (o.route.includes('${node_addr[$paused]}')) process.exit(1)" <"$tmp/p2.json" && ok ||
        bad "paused pc$paused was routed to: $(cat "$tmp/p2.json")"
    [ "$(tokens <"$tmp/p2.json" 2>/dev/null)" = "$ref" ] && ok || bad "tokens with pc$paused paused differ"
    echo "paused pc$paused (Windows); route around it: $(json 'console.log(o.route)' <"$tmp/p2.json" 2>/dev/null)"
    WINEOUT=$(wine "$WIN" pause --registry "$URL" --node "$paused_id" --token-file "$tmp/cafe.token" \
        --resume 2>&1 | tr -d '\r')
    grep -q "node $paused_id:" <<<"$WINEOUT" && ok || bad "moontail.exe pause --resume: $WINEOUT"
    wait_for "o.nodes.find(n => n.name == 'pc$paused').role != 'none' && o.spares >= 1 && o.min_replicas_serving >= 1" 60 &&
        ok || bad "pc$paused took no work after --resume: $(status | head -c 1500)"
else
    bad "no Windows node on the route ($ROUTE1)"
fi

# ---- a Windows node of the route killed mid-generation: the same text
long_prompt long 240
victim=""
for k in 1 2; do
    case " $ROUTE " in *" ${node_addr[$k]}["*) victim=$k ;; esac
done
if [ -n "$victim" ]; then
    echo "killing pc$victim (Windows, ${node_addr[$victim]}) at position ${PAUSE_AT:-100}"
    { kill -9 "${node_pid[$victim]}" && wait "${node_pid[$victim]}"; } 2>/dev/null
else
    bad "no Windows node on the route ($ROUTE)"
fi
resume_prompt
wait $PPID_ && ok || bad "prompt after the Windows node died failed: $(tail -5 "$tmp/long.err")"
cmp -s "$tmp/long.txt" "$tmp/ref_long.txt" && ok || bad "text after failover differs from the local run"
grep -q "recovered on a new route" "$tmp/long.err" && ok ||
    bad "no failover happened: $(tail -5 "$tmp/long.err")"
sed -n 's/^[^ ]* [a-z]* requester: \(recovered.*\)/failover: \1/p' "$tmp/long.err"

# ---- the installer an operator pushes to the PCs: install.cmd from the zip joins a PC
if [ -n "${MT_WIN_ZIP:-}" ]; then
    (cd "$tmp" && cmake -E tar xf "$MT_WIN_ZIP") || bad "cannot unpack $MT_WIN_ZIP"
    INST="$tmp/moontail-node-win64"
    export MOONTAIL_HOME="$tmp/pc4-home" # setup's home: not this machine's wine profile
    # install.cmd runs setup, which starts the node in the background and returns
    (cd "$INST" && timeout 120 wine cmd /c install.cmd "$URL" "$tmp/cafe.token" pc4) \
        >"$tmp/install.out" 2>&1 && ok || bad "install.cmd: $(tr -d '\r' <"$tmp/install.out")"
    grep -q "volunteering: node running in the background" "$tmp/install.out" && ok ||
        bad "install.cmd did not start the node: $(tr -d '\r' <"$tmp/install.out")"
    # the node starts again at logon: a scheduled task, or (as under wine, whose schtasks
    # makes no logon tasks) the user's Run key
    grep -q "volunteering: starts at each logon" "$tmp/install.out" && ok ||
        bad "install.cmd registered nothing to start at logon: $(tr -d '\r' <"$tmp/install.out")"
    wine reg query 'HKCU\Software\Microsoft\Windows\CurrentVersion\Run' /v "MoonTail node" 2>&1 |
        tr -d '\r' | grep -q 'moontail.exe" setup --accept-terms' ||
        wine schtasks /Query /TN "MoonTail node" >/dev/null 2>&1 && ok ||
        bad "no logon task or Run value for the node"
    wine reg delete 'HKCU\Software\Microsoft\Windows\CurrentVersion\Run' /v "MoonTail node" /f \
        >/dev/null 2>&1
    wait_for 'o.nodes.some(n => n.name == "pc4" && n.alive !== false)' 60 && ok ||
        bad "the installed node did not join: $(status | head -c 1500)"
    [ -f "$MOONTAIL_HOME/config.json" ] && [ -f "$MOONTAIL_HOME/node.key" ] && ok ||
        bad "setup wrote no config or key in $MOONTAIL_HOME: $(ls "$MOONTAIL_HOME" 2>&1)"
    # setup --stop sets the node's stop event; the node leaves
    timeout 60 wine "$INST/moontail.exe" setup --stop >"$tmp/stop.out" 2>&1 && ok ||
        bad "setup --stop: $(tr -d '\r' <"$tmp/stop.out")"
    grep -q "stopped the node" "$tmp/stop.out" && ok || bad "setup --stop: $(tr -d '\r' <"$tmp/stop.out")"
    tr -d '\r' <"$MOONTAIL_HOME/node.log" | grep -q "a stop request, leaving" && ok ||
        bad "the installed node did not stop cleanly: $(tr -d '\r' <"$MOONTAIL_HOME/node.log" | tail -3)"
    unset MOONTAIL_HOME
fi

# ---- Windows nodes behind NAT. Each gets a registry of its own (one replica, no spare)
# and room for the whole model, so every prompt goes to it through the relay or tunnel.
# nat_cell NAME ARGS...: the registry NAME (ARGS added) and an account NAME; sets URL
nat_cell() {
    local name=$1
    shift
    start_bg "$name" "$BIN" registry --model "$M" --db "$tmp/$name.db" --key "$tmp/$name.key" \
        --shards "$tmp/$name-seed" --replicas 1 --spares 0 --heartbeat-ms 200 \
        --dead-after-ms 2000 --listen 127.0.0.1:0 "$@"
    URL=$ADDR
    expect 0 "token in" "$BIN" account new "$name" --registry "$URL" -o "$tmp/$name.token"
}
# nat_node CELL NAME ARGS...: the Windows node NAME of CELL (ARGS added); sets ADDR (its
# public address), PID, and OWN (its own server's, on loopback)
nat_node() {
    local cell=$1 name=$2
    shift 2
    start_win "$name" node --registry "$URL" --token-file "$tmp/$cell.token" --key "$tmp/$name.key" \
        --data "$tmp/d$name" --listen 127.0.0.1:0 --name "$name" --capacity-mb $((cap_mb * 2)) \
        --speed 1 --threads 1 "$@"
    OWN=$(wlog "$name" | sed -n 's/.*own server on \([0-9.:]*\) (loopback).*/\1/p')
    wait_for 'o.ready && o.nodes_serving == 1' 120 && ok ||
        bad "Windows node $name did not serve: $(status | head -c 1500)"
}
# nat_prompt CELL TAG VIA: a prompt through CELL gives run's tokens, on a route through VIA
nat_prompt() {
    $T "$BIN" prompt --registry "$URL" --token-file "$tmp/$1.token" --key "$tmp/req.key" \
        --cache "$tmp/$1-cache" -p "$PROMPT" -n 24 --temp 0 --json >"$tmp/$2.json" 2>"$tmp/$2.err" ||
        bad "$2: prompt: $(tail -5 "$tmp/$2.err")"
    [ "$(tokens <"$tmp/$2.json" 2>/dev/null)" = "$ref" ] && ok || bad "$2: tokens differ from run's"
    json "process.exit(o.route.includes('$3') ? 0 : 1)" <"$tmp/$2.json" 2>/dev/null && ok ||
        bad "$2: the route does not go through $3: $(cat "$tmp/$2.json")"
}

# --relay: peers reach the node through the registry's relay
nat_cell relayed --relay-listen 127.0.0.1:0
RELAY=$(sed -n 's/^relay on //p' "$tmp/relayed.out")
nat_node relayed natpc --relay
[ -n "$RELAY" ] && [ -n "$ADDR" ] && [ "$ADDR" != "$OWN" ] && [ "${ADDR%:*}" = "${RELAY%:*}" ] && ok ||
    bad "relayed Windows node: public '$ADDR', own server '$OWN', relay '$RELAY'"
nat_prompt relayed relay1 "$ADDR"
echo "relayed Windows node: own server $OWN, public $ADDR (relay $RELAY)"

# --tunnel: the node runs tests/win/fake_tunnel.c through cmd.exe, in a job object
nat_cell tunneled
nat_node tunneled tunpc --tunnel "$(winepath -w "$(dirname "$WIN")/fake_tunnel.exe") {port}"
TUN_NODE=$PID TADDR1=$ADDR
[ -n "$ADDR" ] && [ -n "$OWN" ] && [ "$ADDR" != "$OWN" ] && ok ||
    bad "tunneled Windows node: public '$ADDR', own server '$OWN': $(wlog tunpc | tail -5)"
wlog tunpc | grep -q "forwarding to $OWN" && ok ||
    bad "{port} was not replaced by the node's port: $(wlog tunpc | grep -i tunnel)"
nat_prompt tunneled tunnel1 "$TADDR1"
# the tunnel program killed: the supervisor starts it again, and it comes up on a new port
old_tunnel=$(pgrep -f "$TUNNEL_RE")
[ -n "$old_tunnel" ] && kill -9 $old_tunnel && ok || bad "no tunnel program to kill (pgrep found none)"
wait_for "o.ready && o.nodes[0].addr != '$TADDR1' && o.nodes[0].addr != ''" 60 && ok ||
    bad "no new tunnel address after the tunnel was killed: $(wlog tunpc | grep -i tunnel | tail -5)"
TADDR2=$(status | json 'console.log(o.nodes[0].addr)')
wlog tunpc | grep -q "starting it again in 1 s" && ok ||
    bad "the node did not log the tunnel's restart: $(wlog tunpc | grep -i tunnel | tail -5)"
nat_prompt tunneled tunnel2 "$TADDR2"
echo "tunneled Windows node: own server $OWN, public $TADDR1, then $TADDR2 after the tunnel was killed"
# the node killed: its job object closes and ends the tunnel program with it
{ kill -9 "$TUN_NODE" && wait "$TUN_NODE"; } 2>/dev/null
for _ in $(seq 1 100); do pgrep -f "$TUNNEL_RE" >/dev/null || break; sleep 0.1; done
pgrep -f "$TUNNEL_RE" >/dev/null && bad "the tunnel program outlived its node (kill-on-close job)" || ok
finish
