#!/usr/bin/env bash
# test_operator_cli.sh - the rough edges a new operator or volunteer hits, each
# done the way a person does it, on 127.0.0.1 (issue 17, items 7, 9, 10, 12):
#   - a port another process holds: `setup --listen` on it and `node --listen`
#     on it fail at once, saying so, and nothing is made or joined; a node
#     announcing the address of another live node (its tunnel prints it) is
#     refused by the registry, naming that node;
#   - network mistakes are explained: a registry that is not running, an
#     https:// URL to a plain-HTTP registry, a URL with a path, a server that
#     is not a registry; a setup that fails removes what it made (and only
#     that), a registry that fails to start (bad model, busy port) leaves no
#     key, database or shard folder it made;
#   - progress of long steps, forced with MOONTAIL_PROGRESS=1 (the steps of
#     a test are quick): mkmodel (which says what it wrote: its counts are
#     checked against tests/lib/gguf_patch.py's own reading of the file), the
#     registry's hashing and shard cutting, loading a model; without it a
#     quick step prints none;
#   - status reads right: "1 node alive", a spare and its "-" columns, the
#     capacity with its unit, shard names with the coverage's layer ranges,
#     an amber SERVING while a layer lacks a replica; nodes without --name get
#     the host name and 4 hex digits of their key; --config errors name the
#     file and line (also after --registry-pin was taken out of the options,
#     and never for a command-line mistake); --admin-token-file errors name
#     the admin token file; a swarm account that has not volunteered is told to run `moontail setup`.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
LIB=$(cd "$(dirname "$0")/lib" && pwd)
export MOONTAIL_NO_SYSTEMD=1
extra_cleanup() { MOONTAIL_HOME="$tmp/home" "$BIN" setup --stop >/dev/null 2>&1; } # a failed run's node
cd "$tmp"

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" --arch qwen3moe --type q8_0 --layers 2 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 5 >/dev/null 2>&1 || bad "mkmodel"
# a port that another process holds for the whole test
start_bg holder node -e 'const s = require("net").createServer().listen(0, "127.0.0.1",
    () => console.log("listening on 127.0.0.1:" + s.address().port))'
BUSY=$ADDR
# a server that answers every request with 404 and a page, as a web server does
start_bg web node -e 'const s = require("http").createServer((q, r) => { r.writeHead(404,
    {"Content-Type": "text/html"}); r.end("<h1>Not Found</h1>") }).listen(0, "127.0.0.1",
    () => console.log("listening on http://127.0.0.1:" + s.address().port))'
WEB=$ADDR
# a port where nothing listens: one that was free a moment ago
CLOSED=127.0.0.1:$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1",
    () => { console.log(s.address().port); s.close() })')

# ---- item 9: a registry that does not start leaves nothing of its own behind
echo "not a model" >"$tmp/bad.gguf"
mkdir "$tmp/rb"
expect 1 "not a GGUF file" "$BIN" registry --model "$tmp/bad.gguf" --db "$tmp/rb/r.db" \
    --key "$tmp/rb/r.key" --shards "$tmp/rb/seed" --listen 127.0.0.1:0
[ -z "$(ls -A "$tmp/rb")" ] && ok || bad "a registry with a bad model left: $(ls "$tmp/rb")"
expect 1 "--listen $BUSY: another process holds this port" "$BIN" registry --model "$M" \
    --db "$tmp/rb/r.db" --key "$tmp/rb/r.key" --shards "$tmp/rb/seed" --listen "$BUSY"
[ -z "$(ls -A "$tmp/rb")" ] && ok || bad "a registry on a busy port left: $(ls "$tmp/rb")"
expect 1 "--relay-listen $BUSY: another process holds this port" "$BIN" registry --model "$M" \
    --db "$tmp/rb/r.db" --key "$tmp/rb/r.key" --shards "$tmp/rb/seed" --listen 127.0.0.1:0 \
    --relay-listen "$BUSY"
[ -z "$(ls -A "$tmp/rb")" ] && ok || bad "a registry whose relay port is busy left: $(ls "$tmp/rb")"
# what was there before stays: the operator's key and shard folder
"$BIN" keygen -o "$tmp/rb/r.key" >/dev/null && mkdir "$tmp/rb/seed" && echo keep >"$tmp/rb/seed/mine"
key_sum=$(md5sum <"$tmp/rb/r.key")
expect 1 "not a GGUF file" "$BIN" registry --model "$tmp/bad.gguf" --db "$tmp/rb/r.db" \
    --key "$tmp/rb/r.key" --shards "$tmp/rb/seed" --listen 127.0.0.1:0
[ "$(md5sum <"$tmp/rb/r.key")" = "$key_sum" ] && [ -f "$tmp/rb/seed/mine" ] && [ ! -e "$tmp/rb/r.db" ] &&
    ok || bad "a failed start touched what was there: $(ls -R "$tmp/rb")"

# ---- item 10: progress, forced; mkmodel says what it wrote
MOONTAIL_PROGRESS=1 "$BIN" mkmodel -o "$tmp/p.gguf" --type q8_0 --layers 3 --embd 128 --heads 4 \
    --head-dim 32 --ff 128 --ff-exp 64 --experts 8 --experts-used 2 >"$tmp/mk.out" 2>"$tmp/mk.err" &&
    ok || bad "mkmodel: $(cat "$tmp/mk.err")"
grep -q "^mkmodel: making $tmp/p.gguf: 3 of 3 layers (100%)$" "$tmp/mk.err" &&
    grep -q "^mkmodel: writing $tmp/p.gguf: .* MB (100%)" "$tmp/mk.err" && ok ||
    bad "mkmodel showed no progress: $(cat "$tmp/mk.err")"
# what it says it wrote, against an independent reader of the file (ggml's type ids 0 = F32, 8 = Q8_0)
types=$(python3 "$LIB/gguf_patch.py" "$tmp/p.gguf" types | awk '{n += $1; t = t (t ? ", " : "") $1 " " ($2 == 0 ? "F32" : $2 == 8 ? "Q8_0" : "type" $2)} END {print n " tensors: " t}')
mb=$(awk -v b="$(stat -c %s "$tmp/p.gguf")" 'BEGIN {printf "%.2f MB", b / 1e6}')
[ "$(cat "$tmp/mk.out")" = "wrote $tmp/p.gguf: qwen3moe, 3 layers, 128 wide, 8 experts (2 used), $mb, $types" ] &&
    ok || bad "mkmodel's summary: '$(cat "$tmp/mk.out")', the file: $mb, $types"
# a quick step without MOONTAIL_PROGRESS prints nothing on a log (stderr is a file here)
"$BIN" mkmodel -o "$tmp/q.gguf" --layers 1 >/dev/null 2>"$tmp/q.err" && [ ! -s "$tmp/q.err" ] && ok ||
    bad "a quick mkmodel flooded the log: $(cat "$tmp/q.err")"
MOONTAIL_PROGRESS=1 $T "$BIN" run -m "$M" -p "hi" -n 2 >/dev/null 2>"$tmp/run.err" &&
    grep -q "^loading m.gguf: .* MB (100%)" "$tmp/run.err" && ok ||
    bad "loading a model showed no progress: $(head -5 "$tmp/run.err")"

# ---- a registry (its hashing and cutting with progress), and nodes
start_bg reg env MOONTAIL_PROGRESS=1 "$BIN" registry --model "$M" --db "$tmp/r.db" --key "$tmp/r.key" \
    --shards "$tmp/seed" --replicas 2 --spares 1 --heartbeat-ms 200 --dead-after-ms 1500 \
    --listen 127.0.0.1:0
URL=$ADDR
grep -q " info registry: hashing m.gguf: .* MB (100%)" "$tmp/reg.err" && ok ||
    bad "the registry's hashing showed no progress: $(head -5 "$tmp/reg.err")"
status() { curl -s --max-time 10 "$URL/v1/status"; }
# shard names give layer ranges as the coverage does: layers 0 to 1, experts 0 to 7
curl -sf "$URL/v1/shards/L0-1A-E0-7/manifest" >/dev/null && ok || bad "no shard L0-1A-E0-7"
grep -q " info registry: writing L0-1A-E0-7.gguf: .* MB (100%)" "$tmp/reg.err" && ok ||
    bad "cutting a shard showed no progress: $(grep -i "cut\|writ" "$tmp/reg.err")"
expect 0 "token in" "$BIN" account new lab --registry "$URL" -o "$tmp/lab.token"

# ---- item 9: what a wrong address says
expect 1 "cannot reach the registry at http://$CLOSED (connection refused): is it running, and is the address right?" \
    "$BIN" status --registry "http://$CLOSED"
expect 1 "TLS handshake with ${URL#http://} failed.*use an http:// URL: $URL" \
    "$BIN" status --registry "https://${URL#http://}"
expect 2 "--registry '$URL/status' has a path ('/status'); give the registry's base URL, $URL, without it" \
    "$BIN" status --registry "$URL/status"
expect 2 "'127.0.0.1:8470' is not a URL: give http://HOST:PORT" "$BIN" status --registry 127.0.0.1:8470
expect 1 "HTTP 404, not a registry's JSON answer: $WEB is not a MoonTail registry" \
    "$BIN" status --registry "$WEB"
expect 0 "alive" "$BIN" status --registry "$URL/" # a trailing slash is fine

# ---- item 9: a setup that fails removes what it made, and only that
export MOONTAIL_HOME="$tmp/home"
expect 1 "cannot reach the registry at http://$CLOSED (connection refused)" \
    "$BIN" setup --accept-terms --registry "http://$CLOSED" --listen 127.0.0.1:0
[ ! -e "$MOONTAIL_HOME" ] && ok || bad "a failed setup left: $(ls -R "$MOONTAIL_HOME")"
mkdir -m 700 "$MOONTAIL_HOME" && echo mine >"$MOONTAIL_HOME/notes"
expect 1 "cannot reach the registry" "$BIN" setup --accept-terms --registry "http://$CLOSED" \
    --listen 127.0.0.1:0
[ "$(ls -A "$MOONTAIL_HOME")" = notes ] && ok || bad "a failed setup left: $(ls -A "$MOONTAIL_HOME")"
# ---- item 7: a port another process holds
expect 1 "--listen $BUSY: another process holds this port" \
    "$BIN" setup --accept-terms --registry "$URL" --listen "$BUSY"
[ "$(ls -A "$MOONTAIL_HOME")" = notes ] && ok || bad "setup on a busy port left: $(ls -A "$MOONTAIL_HOME")"
grep -q "volunteering\|running" "$tmp/o" && bad "setup on a busy port says it runs: $(cat "$tmp/o")" || ok
expect 1 "listen on $BUSY: Address already in use" "$BIN" node --registry "$URL" \
    --token-file "$tmp/lab.token" --key "$tmp/nb.key" --data "$tmp/dnb" --listen "$BUSY"
! grep -q "^listening on" "$tmp/o" && [ "$(status | json 'console.log(o.nodes_known)')" = 0 ] && ok ||
    bad "a node on a busy port joined or said it listens: $(cat "$tmp/o")"
[ ! -e "$tmp/nb.key" ] && [ ! -e "$tmp/dnb" ] && ok || bad "a node on a busy port made its key or data"
# the node that setup starts: a host name with a part of its key, and "1 node alive"
expect 0 "volunteering: node running in the background" "$BIN" setup --accept-terms --registry "$URL" \
    --listen 127.0.0.1:0 --capacity-mb 100
name1=$(json 'console.log(o.name)' <"$MOONTAIL_HOME/config.json")
host=$(hostname | cut -d. -f1)
case "$name1" in "$host"-[0-9a-f][0-9a-f][0-9a-f][0-9a-f]) ok ;; *) bad "setup's default name '$name1'" ;; esac
wait_for 'o.nodes_alive == 1 && o.nodes.some((n) => n.state == "serving")' 30 || bad "the node did not serve: $(status | head -c 600)"
expect 0 "^1 node alive, 1 serving, 0 spares; 2 layers, fewest replicas serving 1 of 2" "$BIN" status --registry "$URL"
# replicas 2 and one pipeline: requests are served, but no layer has a second copy
grep -q "^cell $URL: SERVING: no spare for layers 0-1 (1 of 2 replicas serving)" "$tmp/o" && ok ||
    bad "status with one of two replicas: $(head -3 "$tmp/o")"
grep -q "coverage (serving/assigned of 2):  L0-1 1/1 (low)" "$tmp/o" &&
    grep -q " serving  *stage  *L0-1A-E0-7 " "$tmp/o" && ok ||
    bad "the shard name's layers differ from the coverage's: $(cat "$tmp/o")"
grep -q "capacity" "$tmp/o" && grep -Eq " 100\.0 MB  " "$tmp/o" && ok || bad "no capacity with its unit: $(cat "$tmp/o")"

# ---- item 12: a node without --name: the host name and the first 4 hex digits of its key
pub=$("$BIN" keygen -o "$tmp/n2.key")
start_bg n2 "$BIN" node --registry "$URL" --token-file "$tmp/lab.token" --key "$tmp/n2.key" \
    --data "$tmp/d2" --listen 127.0.0.1:0 --capacity-mb 100 --speed 1 --threads 1
N2_ADDR=$ADDR
wait_for "o.nodes.some((n) => n.name == '$host-${pub:0:4}')" 20 && ok ||
    bad "node without --name is not '$host-${pub:0:4}': $(status | json 'console.log(o.nodes.map((n) => n.name).join(" "))')"
[ "$name1" != "$host-${pub:0:4}" ] && ok || bad "two nodes on one machine got one name"
# ---- item 7: a node announcing the address another live node has is refused, naming it
id2=$(status | json "console.log(o.nodes.find((n) => n.name == '$host-${pub:0:4}').node_id)")
expect 1 "address $N2_ADDR is taken by node $id2 '$host-${pub:0:4}'" "$BIN" node --registry "$URL" \
    --token-file "$tmp/lab.token" --key "$tmp/n3.key" --data "$tmp/d3" --listen 127.0.0.1:0 \
    --tunnel "echo tunnel ready at $N2_ADDR; sleep 60" --tunnel-wait-s 10
[ "$(status | json 'console.log(o.nodes_known)')" = 2 ] && ok || bad "the registry took a node at a taken address"
# two serving pipelines and a third node: READY, the spare's columns are "-"
start_bg n4 "$BIN" node --registry "$URL" --token-file "$tmp/lab.token" --key "$tmp/n4.key" \
    --data "$tmp/d4" --listen 127.0.0.1:0 --capacity-mb 100 --speed 1 --threads 1 --name spare4
wait_for 'o.nodes_serving == 2 && o.spares == 1' 30 || bad "no two pipelines and a spare: $(status | head -c 800)"
expect 0 "^cell $URL: READY: every layer has its 2 replicas serving" "$BIN" status --registry "$URL"
grep -q "^3 nodes alive, 2 serving, 1 spare; 2 layers" "$tmp/o" && ok || bad "plurals: $(head -2 "$tmp/o")"
grep -Eq "^ +[0-9]+  spare4 +spare +spare +- +- +- +- +100\.0 MB " "$tmp/o" && ok ||
    bad "the spare's row: $(grep spare4 "$tmp/o")"
"$BIN" setup --stop >/dev/null
unset MOONTAIL_HOME

# ---- item 12: --config errors name the file and the line; admin token file errors name it
printf '# the registry\n\nmodel = %s\nreplicas = two\n' "$M" >"$tmp/r.conf"
expect 2 "--replicas expects a whole number in \[1, 16\], got 'two' ($tmp/r.conf, line 4)" \
    "$BIN" registry --config "$tmp/r.conf"
printf 'model = %s\n\n  modle = x\n' "$M" >"$tmp/typo.conf"
expect 2 "unknown option '--modle' ($tmp/typo.conf, line 3)" "$BIN" registry --config "$tmp/typo.conf"
# --registry-pin is taken out of the arguments before the command reads them, which moves the
# options after it: the line named is still the value's own, and a mistake on the command line
# is not blamed on the file (both once said "line 2")
pin="sha256//$(head -c 32 /dev/zero | base64)"
printf 'registry-pin = %s\nmodel = %s\nreplicas = abc\n' "$pin" "$M" >"$tmp/pin.conf"
expect 2 "--replicas expects a whole number in \[1, 16\], got 'abc' ($tmp/pin.conf, line 3)$" \
    "$BIN" registry --config "$tmp/pin.conf"
printf 'registry-pin = %s\nmodel = %s\n' "$pin" "$M" >"$tmp/pin2.conf"
expect 2 "--replicas expects a whole number in \[1, 16\], got 'abc'$" \
    "$BIN" registry --config "$tmp/pin2.conf" --replicas abc
expect 2 "--admin-token-file $tmp/none: cannot open it (No such file or directory); it should hold the registry's admin token" \
    "$BIN" account new x --registry "$URL" --admin-token-file "$tmp/none"
: >"$tmp/empty"
expect 2 "--admin-token-file $tmp/empty is empty; it should hold the registry's admin token" \
    "$BIN" account new x --registry "$URL" --admin-token-file "$tmp/empty"
echo s3cret >"$tmp/admin" && echo wrong >"$tmp/wrong"
start_bg reg2 "$BIN" registry --model "$M" --db "$tmp/r2.db" --key "$tmp/r2.key" --shards "$tmp/seed2" \
    --admin-token-file "$tmp/admin" --mode swarm --require-volunteer --listen 127.0.0.1:0
URL2=$ADDR
expect 1 "the admin token in $tmp/wrong (--admin-token-file) is not this registry's" \
    "$BIN" account new x --registry "$URL2" --admin-token-file "$tmp/wrong"
expect 1 "give its admin token with --admin-token-file FILE" "$BIN" account new x --registry "$URL2"
expect 0 "token in" "$BIN" account new taker --registry "$URL2" --admin-token-file "$tmp/admin" \
    -o "$tmp/taker.token"
# a swarm account that has not volunteered is told how to
expect 1 "has not volunteered yet.*run 'moontail setup --accept-terms --registry $URL2" \
    "$BIN" prompt --registry "$URL2" --token-file "$tmp/taker.token" --key "$tmp/req.key" \
    --cache "$tmp/cache" -p "hi" -n 1
expect 0 "not volunteering yet: .*run 'moontail setup --accept-terms'" "$BIN" status --registry "$URL2" \
    --token-file "$tmp/taker.token"
finish
