#!/usr/bin/env bash
# test_node_cli.sh - `moontail node` and `moontail prompt` end to end over
# 127.0.0.1: keys from `moontail keygen`, shards from `moontail split`, node
# processes on ports the system picks (read from their "listening on" line),
# and greedy generation through a cell route (head + 2 stages, stage 1 with a
# step of 3 tokens and prompt chunks of 2; also chained,
# stage 0 forwarding to stage 1), a swarm route
# (local backbone + 2 expert servers) and a paired stage with its partner,
# each giving the same tokens as `moontail run` on the whole model (the cell
# and the chain also with --draft ngram: speculative decoding). Then
# clear errors for bad command lines and routes, and a clean SIGTERM stop.
# Every node is killed on exit; every command runs under a time limit.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 30"



route_nodes_setup

want=$($T "$BIN" run -m "$M" --json --temp 0 -n 12 -p "Hello there" 2>/dev/null | tokens)
[ -n "$want" ] && ok || bad "run on the whole model"

# ---- cell: head here, two pipeline stages on nodes
$T "$BIN" split "$M" --plan cell:2 -o "$tmp/cell" >/dev/null && ok || bad "split cell"
start_route_node s0 --shard "$tmp/cell/m-stage-0.gguf" && s0=$ADDR
start_route_node s1 --shard "$tmp/cell/m-stage-1.gguf" --step-tokens 3 --prefill-chunk 2 && s1=$ADDR
cat >"$tmp/cell.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key",
 "stages": [{"addr": "$s0", "key": "$nodekey"}, {"addr": "$s1", "key": "$nodekey"}]}
EOF
got=$($T "$BIN" prompt --route "$tmp/cell.json" --json --temp 0 -n 12 -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "cell route tokens '$got' differ from run's '$want': $(cat "$tmp/e")"
# speculative decoding over the route (nodes take back guesses; kimi-k3: KDA snapshots)
got=$($T "$BIN" prompt --route "$tmp/cell.json" --json --temp 0 -n 12 --draft ngram --draft-k 4 -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "cell route --draft ngram tokens '$got' differ from run's '$want': $(cat "$tmp/e")"
# streamed text equals run's
a=$($T "$BIN" run -m "$M" --temp 0 -n 12 -p "Hello there" 2>/dev/null)
b=$($T "$BIN" prompt --route "$tmp/cell.json" --temp 0 -n 12 -p "Hello there" 2>/dev/null)
[ "$a" = "$b" ] && ok || bad "streamed text differs: '$a' vs '$b'"
# chain: one request to stage 0, which forwards to stage 1 (the next hop) itself
cat >"$tmp/chain.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key", "chain": true,
 "stages": [{"addr": "$s0", "key": "$nodekey"}, {"addr": "$s1", "key": "$nodekey"}]}
EOF
got=$($T "$BIN" prompt --route "$tmp/chain.json" --json --temp 0 -n 12 -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "chain route tokens '$got' differ from run's '$want': $(cat "$tmp/e")"
got=$($T "$BIN" prompt --route "$tmp/chain.json" --json --temp 0 -n 12 --draft ngram -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "chain route --draft ngram tokens '$got' differ from run's '$want': $(cat "$tmp/e")"
b=$($T "$BIN" prompt --route "$tmp/chain.json" --temp 0 -n 12 -p "Hello there" 2>/dev/null)
[ "$a" = "$b" ] && ok || bad "chain route text differs: '$a' vs '$b'"
sed 's/"chain": true/"chain": "yes"/' "$tmp/chain.json" >"$tmp/chainbad.json"
expect 1 '"chain" must be true or false' "$BIN" prompt --route "$tmp/chainbad.json" -p x
# bf16 wire runs (not exact, so only the shape is checked)
sed 's/"key": "req.key",/"key": "req.key", "wire": "bf16",/' "$tmp/cell.json" >"$tmp/bf16.json"
n=$($T "$BIN" prompt --route "$tmp/bf16.json" --json --temp 0 -n 12 -p "Hello there" 2>"$tmp/e" | json 'console.log(o.tokens.length)')
[ "$n" = 12 ] && ok || bad "bf16 route: '$n' tokens: $(cat "$tmp/e")"

# ---- swarm: backbone here, experts on two servers
$T "$BIN" split "$M" --plan swarm:2 -o "$tmp/swarm" >/dev/null && ok || bad "split swarm"
start_route_node x0 --shard "$tmp/swarm/m-experts-0.gguf" && x0=$ADDR
start_route_node x1 --shard "$tmp/swarm/m-experts-1.gguf" && x1=$ADDR
cat >"$tmp/swarm.json" <<EOF
{"head": "swarm/m-backbone-0.gguf", "backbone": "swarm/m-backbone-0.gguf", "key": "req.key",
 "experts": [{"addr": "$x0", "key": "$nodekey"}, {"addr": "$x1", "key": "$nodekey"}]}
EOF
got=$($T "$BIN" prompt --route "$tmp/swarm.json" --json --temp 0 -n 12 -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "swarm route tokens '$got' differ from '$want': $(cat "$tmp/e")"

# ---- a paired stage (attention + experts 0-3) whose partner holds experts 4-7
$T "$BIN" split "$M" --layers 0:4 --experts 0-3 -o "$tmp/paired.gguf" >/dev/null && ok || bad "split paired"
$T "$BIN" split "$M" --layers 0:4 --experts 4-7 --no-attention -o "$tmp/partner.gguf" >/dev/null && ok || bad "split partner"
start_route_node partner --shard "$tmp/partner.gguf" && pa=$ADDR
start_route_node paired --shard "$tmp/paired.gguf" --partner "$pa=$nodekey" && pd=$ADDR
cat >"$tmp/paired.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key", "stages": [{"addr": "$pd", "key": "$nodekey"}]}
EOF
got=$($T "$BIN" prompt --route "$tmp/paired.json" --json --temp 0 -n 12 -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "paired route tokens '$got' differ from '$want': $(cat "$tmp/e")"

# ---- errors
expect 2 "are required" "$BIN" node --shard "$tmp/paired.gguf"
expect 2 "ADDR=KEY" "$BIN" node --shard "$tmp/paired.gguf" --key "$tmp/node.key" --authorized "$tmp/auth" --partner nokey
expect 2 "64 hex digits" "$BIN" node --shard "$tmp/paired.gguf" --key "$tmp/node.key" --authorized "$tmp/auth" --partner "$pa=abc"
expect 1 "give --partner" "$BIN" node --shard "$tmp/paired.gguf" --key "$tmp/node.key" --authorized "$tmp/auth" --listen 127.0.0.1:0
expect 1 "holds no layers" "$BIN" node --shard "$tmp/cell/m-head-0.gguf" --key "$tmp/node.key" --authorized "$tmp/auth" --listen 127.0.0.1:0
expect 2 "unknown option" "$BIN" node --frob
expect 2 "step-tokens" "$BIN" node --shard "$tmp/paired.gguf" --key "$tmp/node.key" --authorized "$tmp/auth" --step-tokens 0
expect 2 "give either --registry URL or --route FILE" "$BIN" prompt -p x
expect 1 "not a valid route file" "$BIN" prompt --route "$M" -p x
echo '{"head": "cell/m-head-0.gguf", "key": "req.key", "stagez": []}' >"$tmp/typo.json"
expect 1 'unknown field "stagez"' "$BIN" prompt --route "$tmp/typo.json" -p x
cat >"$tmp/short.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key", "stages": [{"addr": "$s0", "key": "$nodekey"}]}
EOF
expect 1 "not covered by any stage" "$BIN" prompt --route "$tmp/short.json" -p x
cat >"$tmp/wrongkey.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key", "stages": [{"addr": "$s0", "key": "$req"}]}
EOF
expect 1 "node $s0" "$BIN" prompt --route "$tmp/wrongkey.json" -p x
cat >"$tmp/wire.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key", "wire": "f8", "stages": []}
EOF
expect 1 'wire "f8" is unknown' "$BIN" prompt --route "$tmp/wire.json" -p x
# the nodes are still serving after all that
got=$($T "$BIN" prompt --route "$tmp/cell.json" --json --temp 0 -n 12 -p "Hello there" 2>"$tmp/e" | tokens)
[ "$got" = "$want" ] && ok || bad "cell route after errors: '$got': $(cat "$tmp/e")"

# ---- SIGTERM stops a node cleanly
kill -TERM "${pids[0]}"
if timeout 10 tail --pid="${pids[0]}" -f /dev/null; then
    wait "${pids[0]}"
    rc=$?
    [ $rc -eq 0 ] && grep -q "stopping" "$tmp/s0.err" && ok || bad "SIGTERM: exit $rc, $(tail -2 "$tmp/s0.err")"
else
    bad "node did not stop within 10 s of SIGTERM"
fi

finish
