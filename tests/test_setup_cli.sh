#!/usr/bin/env bash
# test_setup_cli.sh - a new volunteer's first run, with MOONTAIL_HOME in the
# scratch directory and systemd out of the way (MOONTAIL_NO_SYSTEMD): setup
# without --accept-terms shows the terms and changes nothing; with them it
# makes the home (0700, secrets 0600), gets an account from the registry,
# starts a background node that joins; then `moontail status` and `moontail
# prompt "..."` work with no options (the config's registry and token) and
# the prompt gives `moontail run`'s tokens, wherever it stands among the
# options; the chat shell (plain `moontail`)
# answers too; `setup --stop` stops the node.
# A second setup whose node fails says so (not misled by the first node's
# lines in the node.log kept from before).
# A setup that fails after it made an account keeps that account's token,
# and the next setup uses it.
# --ca-file is kept as an absolute path.
# Once that CA file is gone, commands that talk to no registry still run,
# the others say its name came from config.json.
# A registry that needs an admin
# token is refused with a message saying to ask the operator; a missing --registry is exit 2. The systemd unit files
# in packaging/ pass systemd-analyze verify where it is installed.
set -u
. "$(dirname "$0")/lib/harness.bash"
export MOONTAIL_HOME="$tmp/home" MOONTAIL_NO_SYSTEMD=1
T="timeout 60"
extra_cleanup() { # the nodes of a failed run
    for h in home home4; do MOONTAIL_HOME="$tmp/$h" "$BIN" setup --stop >/dev/null 2>&1; done
}

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 2 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --experts 8 --experts-used 2 --seed 5 >/dev/null || bad "mkmodel"
start_bg reg "$BIN" registry --model "$M" --db "$tmp/r.db" --key "$tmp/r.key" --shards "$tmp/seed" \
    --replicas 1 --spares 0 --heartbeat-ms 200 --dead-after-ms 1500 --listen 127.0.0.1:0
URL=$ADDR

expect 1 "accept-terms" "$BIN" setup --registry "$URL"
grep -q "What you share" "$tmp/o" && ok || bad "the terms do not say what is shared"
[ ! -e "$MOONTAIL_HOME" ] && ok || bad "setup without --accept-terms changed something"
expect 2 "--registry URL is required" "$BIN" setup --accept-terms

expect 0 "volunteering: node running in the background" "$BIN" setup --accept-terms --registry "$URL" \
    --listen 127.0.0.1:0 --name volunteer1
[ "$(stat -c %a "$MOONTAIL_HOME")" = 700 ] && ok || bad "home is not 0700"
for f in token node.key requester.key; do
    [ "$(stat -c %a "$MOONTAIL_HOME/$f")" = 600 ] && ok || bad "$f is not 0600"
done
[ -f "$MOONTAIL_HOME/node.pid" ] && kill -0 "$(cat "$MOONTAIL_HOME/node.pid")" && ok || bad "no background node"
for _ in $(seq 1 100); do
    "$BIN" status --json 2>/dev/null | json 'process.exit(o.ready ? 0 : 1)' 2>/dev/null && break
    sleep 0.2
done
expect 0 "READY" "$BIN" status
grep -q "volunteer1" "$tmp/o" && ok || bad "status does not list the volunteer"
grep -q "your account .*volunteering" "$tmp/o" && ok || bad "status does not show the account's credits: $(cat "$tmp/o")"
"$BIN" run -m "$M" -p "Hello cell" -n 12 --temp 0 --json 2>/dev/null | tokens >"$tmp/ref"
$T "$BIN" prompt "Hello cell" -n 12 --temp 0 --json 2>"$tmp/p.err" | tokens >"$tmp/got"
[ -s "$tmp/ref" ] && cmp -s "$tmp/ref" "$tmp/got" && ok || bad "prompt from the config differs: $(cat "$tmp/got") vs $(cat "$tmp/ref"); $(cat "$tmp/p.err")"
expect 2 "give the prompt once" "$BIN" prompt "a" -p "b"
expect 2 "give the prompt once ('b' is a second)" "$BIN" prompt "a" -n 3 "b"
# the prompt may come after (or between) the options
$T "$BIN" prompt -n 12 --temp 0 "Hello cell" --json 2>"$tmp/p2.err" | tokens >"$tmp/got2"
cmp -s "$tmp/ref" "$tmp/got2" && ok || bad "prompt after its options differs: $(cat "$tmp/got2"); $(cat "$tmp/p2.err")"
# plain `moontail` (the chat shell) uses the config too (it once lost its cache path copying it
# onto itself: "cache directory : No such file or directory")
printf 'Hello cell\n' | $T "$BIN" -n 8 --temp 0 >"$tmp/sh.out" 2>"$tmp/sh.err" && [ -s "$tmp/sh.out" ] && ok ||
    bad "the shell after setup failed: $(tail -3 "$tmp/sh.err")"
# a second setup keeps the identity and the account
key_before=$(md5sum <"$MOONTAIL_HOME/node.key")
expect 0 "set up" "$BIN" setup --accept-terms --no-start
[ "$(md5sum <"$MOONTAIL_HOME/node.key")" = "$key_before" ] && ok || bad "setup replaced the node's key"
expect 0 "stopped the node" "$BIN" setup --stop
[ ! -f "$MOONTAIL_HOME/node.pid" ] && ok || bad "pid file left behind"

# a second setup whose node fails at once (a token the registry does not know): the log kept
# from the first node holds its "listening on", which is not this node's (it once made setup
# say this one runs)
grep -q "^listening on " "$MOONTAIL_HOME/node.log" && ok || bad "the first node's log has no 'listening on'"
tok_before=$(md5sum <"$MOONTAIL_HOME/token")
echo "not-a-token" >"$tmp/bad.token"
expect 1 "the node stopped at once: joining .* HTTP 401" "$BIN" setup --accept-terms --token-file "$tmp/bad.token"
grep -q "volunteering" "$tmp/o" && bad "setup says a node that stopped runs: $(cat "$tmp/o")" || ok
[ "$(md5sum <"$MOONTAIL_HOME/token")" = "$tok_before" ] && [ ! -f "$MOONTAIL_HOME/node.pid" ] && ok ||
    bad "the failed setup did not put the token back, or left a pid file"

# a setup that fails after the registry made it an account (its node is refused: a name with a
# tab) keeps that account's token, since the account stays on the registry; the next setup
# uses it instead of making one more account
export MOONTAIL_HOME="$tmp/home4"
expect 1 "kept $MOONTAIL_HOME/token, the token of account '.*' that this run created on $URL" \
    "$BIN" setup --accept-terms --registry "$URL" --listen 127.0.0.1:0 --name "$(printf 'bad\tname')"
grep -q "^created account" "$tmp/o" && grep -q "the node stopped at once: .*control characters" "$tmp/o" &&
    ok || bad "the failed setup: $(cat "$tmp/o")"
[ "$(stat -c %a "$MOONTAIL_HOME/token" 2>&1)" = 600 ] && [ ! -e "$MOONTAIL_HOME/node.key" ] &&
    [ ! -e "$MOONTAIL_HOME/config.json" ] && ok ||
    bad "the failed setup should keep the token (0600) and nothing else: $(ls -l "$MOONTAIL_HOME")"
tok4=$(md5sum <"$MOONTAIL_HOME/token")
expect 0 "volunteering: node running in the background" "$BIN" setup --accept-terms --registry "$URL" \
    --listen 127.0.0.1:0 --name volunteer4
grep -q "created account" "$tmp/o" && bad "the second setup made another account: $(cat "$tmp/o")" || ok
[ "$(md5sum <"$MOONTAIL_HOME/token")" = "$tok4" ] && ok || bad "the second setup replaced the kept token"
expect 0 "stopped the node" "$BIN" setup --stop

# --ca-file is kept as an absolute path: the node and later commands start in other
# directories (no registry is asked anything: the token is given and the node not started)
export MOONTAIL_HOME="$tmp/home3"
echo "a CA file (only its name matters here)" >"$tmp/ca.pem"
echo "an-operator-token" >"$tmp/op.token"
ca_abs=$(realpath "$tmp/ca.pem")
(cd "$tmp" && "$BIN" setup --accept-terms --registry https://127.0.0.1:9 --ca-file ca.pem \
    --token-file op.token --no-start) >"$tmp/o" 2>&1 && ok || bad "setup with a relative --ca-file: $(cat "$tmp/o")"
kept=$(json 'console.log(o.ca_file)' <"$MOONTAIL_HOME/config.json")
[ "$kept" = "$ca_abs" ] && ok || bad "config.json keeps --ca-file as '$kept', not '$ca_abs'"
# that CA file gone: a command that talks to no registry does not mind; one that talks to the
# configured registry says where the file's name came from; setup says how to give another
rm "$tmp/ca.pem"
"$BIN" mkmodel -o "$tmp/x.gguf" --layers 1 >/dev/null 2>"$tmp/mk.err" && [ ! -s "$tmp/mk.err" ] && ok ||
    bad "mkmodel with config.json's CA file gone: $(cat "$tmp/mk.err")"
expect 2 "CA file '$ca_abs' cannot be read; .* (in config.json: run 'moontail setup' again)" "$BIN" status
expect 0 "no background node" "$BIN" setup --stop
expect 2 "(kept in config.json for https://127.0.0.1:9); give it again with --ca-file FILE" \
    "$BIN" setup --accept-terms --no-start
export MOONTAIL_HOME="$tmp/home"

# a registry that opens no accounts by itself
echo "s3cret" >"$tmp/admin"
# (started from a config file, as a service would be)
cat >"$tmp/registry.conf" <<CONF
# a registry for the operator only
model = $M
db = $tmp/r2.db
key = $tmp/r2.key
shards = $tmp/seed2
admin-token-file = $tmp/admin
require-volunteer = false
CONF
start_bg reg2 "$BIN" registry --config "$tmp/registry.conf" --listen 127.0.0.1:0
MOONTAIL_HOME="$tmp/home2" expect 1 "ask its operator" "$BIN" setup --accept-terms --registry "$ADDR" --no-start
printf 'model %s\n' "$M" >"$tmp/bad.conf"
expect 2 "expected 'key = value'" "$BIN" registry --config "$tmp/bad.conf"
printf 'modle = %s\n' "$M" >"$tmp/typo.conf"
expect 2 "unknown option '--modle'" "$BIN" registry --config "$tmp/typo.conf"
expect 2 "--config needs a FILE" "$BIN" node --config

# the unit files in the repository parse (the binary path need not exist here)
if command -v systemd-analyze >/dev/null; then
    for u in "${MT_SRC:-.}"/packaging/systemd/*.service; do
        out=$(systemd-analyze verify "$u" 2>&1 | grep -v "is not executable\|Failed to prepare filename\|^$")
        [ -z "$out" ] && ok || bad "$u: $out"
    done
fi
finish
