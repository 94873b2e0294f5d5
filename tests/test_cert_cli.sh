#!/usr/bin/env bash
# test_cert_cli.sh - registry-signed certificates end to end with the
# `moontail` command: `cert issue` / `cert show`, a node started with only
# --authority (no authorized-keys file) that admits a requester presenting a
# certificate from its route file and refuses one without (both sides say
# why), a certificate from another authority or for another key, a node with
# --authority as hex next to --authorized, a SIGHUP that rereads the node's
# renewed --cert, and bad command lines. Every node is killed on exit.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 30"

# start_node NAME ARGS...: starts a node on 127.0.0.1:0 and sets ADDR
start_node() {
    local name=$1
    shift
    "$BIN" node --listen 127.0.0.1:0 --threads 1 --key "$tmp/node.key" "$@" \
        >"$tmp/$name.out" 2>"$tmp/$name.err" &
    pids+=($!)
    wait_listening "$name" "${pids[-1]}"
}

M="$tmp/m.gguf"
$T "$BIN" mkmodel -o "$M" --arch llama --type q8_0 --layers 2 --embd 64 --heads 2 --head-dim 32 \
    --ff 64 --seed 4 >/dev/null && ok || bad "mkmodel"
$T "$BIN" split "$M" --plan cell:1 -o "$tmp/cell" >/dev/null && ok || bad "split"
reg=$($T "$BIN" keygen -o "$tmp/reg.key") && ok || bad "keygen registry"
other=$($T "$BIN" keygen -o "$tmp/other.key") && ok || bad "keygen other registry"
nodekey=$($T "$BIN" keygen -o "$tmp/node.key") && ok || bad "keygen node"
req=$($T "$BIN" keygen -o "$tmp/req.key") && ok || bad "keygen requester"
echo "$reg" >"$tmp/reg.pub"

# ---- cert issue / show
expect 0 "requester certificate for $req" "$BIN" cert issue --issuer "$tmp/reg.key" \
    --subject "$req" --role requester --account 42 --days 2 -o "$tmp/req.cert"
expect 0 "node certificate for $nodekey" "$BIN" cert issue --issuer "$tmp/reg.key" \
    --subject "$nodekey" --role node --minutes 30 -o "$tmp/node.cert"
head -1 "$tmp/req.cert" | grep -qx "moontail-cert v1" && ok || bad "certificate file header"
$T "$BIN" cert show "$tmp/req.cert" >"$tmp/show" 2>&1 && ok || bad "cert show: $(cat "$tmp/show")"
grep -q "role        requester" "$tmp/show" && grep -q "account     42" "$tmp/show" &&
    grep -q "subject     $req" "$tmp/show" && grep -q "issuer      $reg" "$tmp/show" &&
    grep -q "valid" "$tmp/show" && ok || bad "cert show fields: $(cat "$tmp/show")"
expect 0 "account     0 (none)" "$BIN" cert show "$tmp/node.cert"
expect 0 "requester certificate" "$BIN" cert issue --issuer "$tmp/other.key" --subject "$req" \
    --role requester -o "$tmp/other.cert"
expect 0 "requester certificate" "$BIN" cert issue --issuer "$tmp/reg.key" --subject "$nodekey" \
    --role requester -o "$tmp/notmine.cert"
# damaged or wrong input
line=$(sed -n 2p "$tmp/req.cert") # one hex digit of the subject changed
[ "${line:20:1}" = 0 ] && d=1 || d=0
printf 'moontail-cert v1\n%s%s%s\n' "${line:0:20}" "$d" "${line:21}" >"$tmp/bad.cert"
expect 1 "bad signature" "$BIN" cert show "$tmp/bad.cert"
expect 1 "larger than any valid one" "$BIN" cert show "$M"
echo hello >"$tmp/hello.txt"
expect 1 "not a MoonTail certificate file" "$BIN" cert show "$tmp/hello.txt"
expect 2 "--role must be node or requester" "$BIN" cert issue --issuer "$tmp/reg.key" \
    --subject "$req" --role admin -o "$tmp/x.cert"
expect 2 "64 hex digits" "$BIN" cert issue --issuer "$tmp/reg.key" --subject abc --role node \
    -o "$tmp/x.cert"
expect 2 "not both" "$BIN" cert issue --issuer "$tmp/reg.key" --subject "$req" --role node \
    --days 1 --minutes 5 -o "$tmp/x.cert"
expect 2 "are required" "$BIN" cert issue --subject "$req" --role node -o "$tmp/x.cert"
expect 2 "expected 'issue' or 'show'" "$BIN" cert frob

want=$($T "$BIN" run -m "$M" --json --temp 0 -n 8 -p "Hello there" 2>/dev/null | tokens)
[ -n "$want" ] && ok || bad "run on the whole model"

# ---- a node that trusts only the registry (a file holding its public key)
start_node reg --shard "$tmp/cell/m-stage-0.gguf" --authority "$tmp/reg.pub" --cert "$tmp/node.cert" && n1=$ADDR
route() { # route NAME [EXTRA JSON FIELDS]
    cat >"$tmp/$1.json" <<EOF
{"head": "cell/m-head-0.gguf", "key": "req.key"$2,
 "stages": [{"addr": "$n1", "key": "$nodekey"}]}
EOF
}
route withcert ', "cert": "req.cert"'
got=$($T "$BIN" prompt --route "$tmp/withcert.json" --json --temp 0 -n 8 -p "Hello there" 2>"$tmp/e" | tokens)
[ -n "$got" ] && [ "$got" = "$want" ] && ok || bad "certified requester: '$got' vs '$want': $(cat "$tmp/e")"
route nocert ''
expect 1 "refused this node's key $req" "$BIN" prompt --route "$tmp/nocert.json" -p x
grep -q "presented no certificate" "$tmp/o" && ok || bad "refusal without a certificate: $(cat "$tmp/o")"
grep -q "connection from .* refused: .*$req is not in the authorized keys and it presented no certificate" "$tmp/reg.err" &&
    ok || bad "node log of the refusal: $(cat "$tmp/reg.err")"
route othercert ', "cert": "other.cert"'
expect 1 "unknown authority $other" "$BIN" prompt --route "$tmp/othercert.json" -p x
route notmine ', "cert": "notmine.cert"'
expect 1 "is for another key" "$BIN" prompt --route "$tmp/notmine.json" -p x
route missing ', "cert": "nothere.cert"'
expect 1 "nothere.cert: cannot open" "$BIN" prompt --route "$tmp/missing.json" -p x
route badtype ', "cert": 5'
expect 1 '"cert" and "wire" must be strings' "$BIN" prompt --route "$tmp/badtype.json" -p x

# ---- renewal: a new certificate in the same file, then SIGHUP
expect 0 "node certificate" "$BIN" cert issue --issuer "$tmp/reg.key" --subject "$nodekey" \
    --role node --days 7 -o "$tmp/node.cert"
kill -HUP "${pids[0]}"
for _ in $(seq 1 100); do grep -q "certificate replaced" "$tmp/reg.err" && break; sleep 0.05; done
grep -q "certificate replaced: serial [0-9]*, valid until" "$tmp/reg.err" && ok || bad "SIGHUP renewal: $(cat "$tmp/reg.err")"
got=$($T "$BIN" prompt --route "$tmp/withcert.json" --json --temp 0 -n 8 -p "Hello there" 2>"$tmp/e" | tokens)
[ "$got" = "$want" ] && ok || bad "after renewal: '$got': $(cat "$tmp/e")"
kill -0 "${pids[0]}" && ok || bad "the node died on SIGHUP"

# ---- --authority as hex next to --authorized: listed keys need no certificate
printf '%s requester\n' "$req" >"$tmp/auth"
start_node both --shard "$tmp/cell/m-stage-0.gguf" --authorized "$tmp/auth" --authority "$reg" && n1=$ADDR
route listed ''
got=$($T "$BIN" prompt --route "$tmp/listed.json" --json --temp 0 -n 8 -p "Hello there" 2>"$tmp/e" | tokens)
[ "$got" = "$want" ] && ok || bad "listed requester without a certificate: '$got': $(cat "$tmp/e")"
route listed2 ', "cert": "req.cert"'
got=$($T "$BIN" prompt --route "$tmp/listed2.json" --json --temp 0 -n 8 -p "Hello there" 2>"$tmp/e" | tokens)
[ "$got" = "$want" ] && ok || bad "listed requester with a certificate: '$got': $(cat "$tmp/e")"

# ---- node command lines
expect 2 "at least one of --authorized and --authority" "$BIN" node --shard "$tmp/cell/m-stage-0.gguf" --key "$tmp/node.key"
expect 2 "neither 64 hex digits nor a readable file" "$BIN" node --shard "$tmp/cell/m-stage-0.gguf" --key "$tmp/node.key" --authority nothere
expect 2 "must hold only the authority's public key" "$BIN" node --shard "$tmp/cell/m-stage-0.gguf" --key "$tmp/node.key" --authority "$tmp/auth"
expect 1 "is for another key" "$BIN" node --shard "$tmp/cell/m-stage-0.gguf" --key "$tmp/node.key" --authority "$reg" --cert "$tmp/req.cert" --listen 127.0.0.1:0
expect 1 "bad signature" "$BIN" node --shard "$tmp/cell/m-stage-0.gguf" --key "$tmp/node.key" --authority "$reg" --cert "$tmp/bad.cert" --listen 127.0.0.1:0

finish
