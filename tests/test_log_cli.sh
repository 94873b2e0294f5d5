#!/usr/bin/env bash
# test_log_cli.sh - the log options of the long-running commands (--log-level,
# --log-file, --log-format; docs/operators.md, Logs). Checks:
#   - `registry --log-format json --log-file F`: F (created with mode 600) gets
#     one JSON object per line, each exactly {ts, level, component, msg} with a
#     UTC ISO-8601 time in milliseconds, the registry's lines with component
#     "registry" (its start, the model's hashes and their progress lines, its
#     stop), and stderr gets none;
#   - SIGHUP after F was moved away (logrotate): the registry keeps running and
#     writes on in a new F, the old one keeps what came before;
#   - a restart appends to F;
#   - SIGHUP to `node --shard` with the lines on stderr says nothing of a log
#     file (there is none to open);
#   - `--log-level warn` (text format): a warning (an unusable hash cache) is
#     written as "TIME warn registry: ...", and none of the info lines are;
#   - a node agent with `--log-format json --log-file F`: every line of F has
#     component "node" (the identity it made, before its name was known, too;
#     the progress of fetching and loading its shard), stderr gets none; with
#     --quiet it writes no "created identity" line;
#   - `serve --log-format json --log-file F`: a request's line has component
#     "serve";
#   - bad values (a level or format that does not exist, a file in a directory
#     that does not exist) are refused with exit 2, naming the value;
#   - the options are in the --help of registry, node (both forms), serve, prompt.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 30"
cd "$tmp"

M="$tmp/m.gguf"
$T "$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 2 --embd 64 --heads 4 --head-dim 16 \
    --ff 64 --ff-exp 32 --experts 4 --experts-used 2 --readable --seed 5 >/dev/null && ok || bad "mkmodel"

# lines F: every line of F is a JSON object with exactly ts, level, component and msg,
# ts a UTC time with milliseconds; prints the lines as "LEVEL COMPONENT: MSG"
lines() {
    node -e '
const text = require("fs").readFileSync(process.argv[1], "utf8");
if (!text.endsWith("\n")) { console.error("the file does not end with a newline"); process.exit(1); }
for (const [i, l] of text.slice(0, -1).split("\n").entries()) {
  let o;
  try { o = JSON.parse(l); } catch (e) { console.error(`line ${i + 1} is not JSON: ${l}`); process.exit(1); }
  const keys = Object.keys(o).sort().join(",");
  if (keys !== "component,level,msg,ts" || !Object.values(o).every((v) => typeof v === "string")) {
    console.error(`line ${i + 1} has fields ${keys}: ${l}`); process.exit(1);
  }
  if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(o.ts) || isNaN(Date.parse(o.ts))) {
    console.error(`line ${i + 1}: ts ${o.ts} is not a UTC time with milliseconds`); process.exit(1);
  }
  if (!["error", "warn", "info", "debug"].includes(o.level)) {
    console.error(`line ${i + 1}: level ${o.level}`); process.exit(1);
  }
  console.log(`${o.level} ${o.component}: ${o.msg}`);
}' "$1"
}
# until_in FILE PATTERN: waits (up to 30 s) for a line matching PATTERN in FILE
until_in() {
    for _ in $(seq 1 300); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
stop() { # stop PID: SIGTERM, and its exit status
    kill -TERM "$1"
    wait "$1"
}

# ---- registry, JSON lines to a file
REG=(registry --model "$M" --db "$tmp/r.db" --key "$tmp/r.key" --shards "$tmp/seed" --listen 127.0.0.1:0)
# (its hashing with progress lines, which go to the log too)
start_bg reg1 env MOONTAIL_PROGRESS=1 "$BIN" "${REG[@]}" --log-format json --log-file "$tmp/reg.jsonl"
REG_PID=$PID
[ "$(stat -c %a "$tmp/reg.jsonl")" = 600 ] && ok || bad "the log file's mode is $(stat -c %a "$tmp/reg.jsonl"), not 600"
until_in "$tmp/reg.jsonl" '"cell mode, 2 replicas, throughput objective, key ' && ok || bad "no start line in the log: $(cat "$tmp/reg.jsonl")"
lines "$tmp/reg.jsonl" >"$tmp/reg.lines" && ok || bad "the log file is not JSON lines: $(head -c 800 "$tmp/reg.jsonl")"
grep -q "^info registry: hashing $M$" "$tmp/reg.lines" && grep -q "^info registry: model hashes: read " "$tmp/reg.lines" &&
    grep -q "^info registry: hashing m.gguf: .* MB (100%)" "$tmp/reg.lines" &&
    grep -q "^info registry: cell mode, 2 replicas, throughput objective, key [0-9a-f]\{64\}$" "$tmp/reg.lines" && ok ||
    bad "the registry's start lines with component registry: $(cat "$tmp/reg.lines")"
grep -c . "$tmp/reg.lines" | grep -qx "$(grep -c ' registry: ' "$tmp/reg.lines")" && ok ||
    bad "a line of another component: $(cat "$tmp/reg.lines")"
grep -q 'registry: \|"ts"' "$tmp/reg1.err" && bad "log lines on stderr too: $(head -c 400 "$tmp/reg1.err")" || ok

# logrotate: the file moved, SIGHUP, the registry writes on in a new file
mv "$tmp/reg.jsonl" "$tmp/reg.jsonl.1"
kill -HUP "$REG_PID"
until_in "$tmp/reg.jsonl" '"SIGHUP: log file opened again"' && ok ||
    bad "no new log file after SIGHUP: $(ls "$tmp"; cat "$tmp/reg1.err")"
kill -0 "$REG_PID" 2>/dev/null && ok || bad "SIGHUP ended the registry"
stop "$REG_PID"
rc=$?
[ $rc -eq 0 ] && ok || bad "the registry exited $rc on SIGTERM"
lines "$tmp/reg.jsonl" >"$tmp/reg2.lines" && lines "$tmp/reg.jsonl.1" >"$tmp/reg1.lines" && ok ||
    bad "a log file is not JSON lines"
grep -q "^info registry: SIGTERM, stopping$" "$tmp/reg2.lines" && ! grep -q "cell mode" "$tmp/reg2.lines" &&
    ok || bad "the new file: $(cat "$tmp/reg2.lines")"
grep -q "cell mode" "$tmp/reg1.lines" && ! grep -q "SIGTERM\|SIGHUP" "$tmp/reg1.lines" && ok ||
    bad "the moved file: $(cat "$tmp/reg1.lines")"

# a restart appends
n_before=$(grep -c . "$tmp/reg.jsonl")
start_bg reg2 "$BIN" "${REG[@]}" --log-format json --log-file "$tmp/reg.jsonl"
until_in "$tmp/reg.jsonl" '"cell mode, 2 replicas' && ok || bad "no start line after the restart"
stop "$PID"
lines "$tmp/reg.jsonl" >"$tmp/reg3.lines" && [ "$(head -n "$n_before" "$tmp/reg3.lines")" = "$(cat "$tmp/reg2.lines")" ] &&
    [ "$(grep -c . "$tmp/reg3.lines")" -gt "$n_before" ] && ok ||
    bad "the restart did not append to the file: $(cat "$tmp/reg3.lines")"

# ---- SIGHUP to `node --shard` (which always takes it: it rereads --cert) with the lines on
# stderr: no file to open again, and nothing said about one
$T "$BIN" split "$M" --plan cell:1 -o "$tmp/cell" >"$tmp/split.out" 2>&1 && ok || bad "split: $(cat "$tmp/split.out")"
"$BIN" keygen -o "$tmp/node.key" | sed 's/$/ node/' >"$tmp/auth"
start_bg shardnode "$BIN" node --shard "$tmp/cell/m-stage-0.gguf" --key "$tmp/node.key" \
    --authorized "$tmp/auth" --listen 127.0.0.1:0 --threads 1
kill -HUP "$PID"
until_in "$tmp/shardnode.err" "SIGHUP: no --cert to reread" && ok || bad "no SIGHUP line: $(cat "$tmp/shardnode.err")"
stop "$PID"
rc=$?
[ $rc -eq 0 ] && ! grep -q "log file" "$tmp/shardnode.err" && ok ||
    bad "node --shard after SIGHUP with the log on stderr (exit $rc): $(cat "$tmp/shardnode.err")"

# ---- --log-level warn, text: a warning shows, info lines do not
start_bg reg3 "$BIN" registry --model "$M" --db "$tmp/w.db" --key "$tmp/r.key" --shards "$tmp/seed" \
    --listen 127.0.0.1:0 --hash-cache "$tmp/no-such-dir/h.sqlite" --log-level warn --log-file "$tmp/warn.log"
stop "$PID"
grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z warn registry: .*no-such-dir.*; hashing the whole model at every start$' \
    "$tmp/warn.log" && ok || bad "no warning line in the text log: $(cat "$tmp/warn.log")"
grep -q " info " "$tmp/warn.log" && bad "info lines at --log-level warn: $(cat "$tmp/warn.log")" || ok
# the same start at the default level has its info lines (so the check above can fail)
start_bg reg4 "$BIN" registry --model "$M" --db "$tmp/w.db" --key "$tmp/r.key" --shards "$tmp/seed" \
    --listen 127.0.0.1:0 --hash-cache "$tmp/no-such-dir/h.sqlite" --log-file "$tmp/info.log"
stop "$PID"
grep -q " info registry: hashing " "$tmp/info.log" && grep -q " warn registry: " "$tmp/info.log" && ok ||
    bad "the default level: $(cat "$tmp/info.log")"

# ---- a node agent, JSON lines to a file: its lines (its identity made first of all) under
# component "node", none on stderr; with --quiet none at all
start_bg reg6 "$BIN" registry --model "$M" --db "$tmp/n.db" --key "$tmp/r.key" --shards "$tmp/seed" \
    --listen 127.0.0.1:0 --heartbeat-ms 200 --log-file "$tmp/reg6.log"
URL=$ADDR
REG6_PID=$PID
$T "$BIN" account new lab --registry "$URL" -o "$tmp/lab.token" >"$tmp/acct.out" 2>&1 && ok ||
    bad "account new: $(cat "$tmp/acct.out")"
NODE=(node --registry "$URL" --token-file "$tmp/lab.token" --listen 127.0.0.1:0 --capacity-mb 100
    --speed 1 --threads 1)
start_bg node1 env MOONTAIL_PROGRESS=1 "$BIN" "${NODE[@]}" --key "$tmp/n1.key" --data "$tmp/d1" \
    --log-format json --log-file "$tmp/node.jsonl"
NODE_PID=$PID
until_in "$tmp/node.jsonl" '"[^"]*: serving shard ' && ok || bad "the node did not serve: $(cat "$tmp/node.jsonl")"
stop "$NODE_PID"
lines "$tmp/node.jsonl" >"$tmp/node.lines" && ok || bad "the node's log is not JSON lines: $(head -c 800 "$tmp/node.jsonl")"
grep -q "^info node: [^ ]*-[0-9a-f]\{4\}: created identity $tmp/n1.key$" "$tmp/node.lines" &&
    grep -q "^info node: [^ ]*: serving shard " "$tmp/node.lines" && ok ||
    bad "the node's identity and serving lines with component node: $(cat "$tmp/node.lines")"
grep -q "^info node: [^ ]*: fetching L[-0-9AE]*: .* MB (100%)" "$tmp/node.lines" &&
    grep -q "^info node: [^ ]*: loading L[-0-9AE]*: .* MB (100%)" "$tmp/node.lines" && ok ||
    bad "the node's fetching and loading progress (MOONTAIL_PROGRESS=1) in its log: $(cat "$tmp/node.lines")"
grep -c . "$tmp/node.lines" | grep -qx "$(grep -c '^[a-z]* node: ' "$tmp/node.lines")" && ok ||
    bad "a node line of another component: $(cat "$tmp/node.lines")"
[ -s "$tmp/node1.err" ] && bad "the node wrote on stderr too: $(head -c 400 "$tmp/node1.err")" || ok
start_bg node2 "$BIN" "${NODE[@]}" --key "$tmp/n2.key" --data "$tmp/d2" --quiet --log-file "$tmp/quiet.log"
stop "$PID"
[ -s "$tmp/n2.key" ] && ! grep -q "created identity" "$tmp/quiet.log" "$tmp/node2.err" && ok ||
    bad "a --quiet node that made its identity: $(cat "$tmp/quiet.log" "$tmp/node2.err")"
stop "$REG6_PID"

# ---- serve: a request's line, component "serve"
start_bg serve "$BIN" serve --model "$M" --no-auth --listen 127.0.0.1:0 -t 1 --log-format json \
    --log-file "$tmp/serve.jsonl"
SERVE_PID=$PID
curl -s -m 30 "$ADDR/v1/completions" -d '{"model": "m", "prompt": "Hi", "max_tokens": 2}' >"$tmp/c.json"
grep -q '"choices"' "$tmp/c.json" && ok || bad "completion: $(cat "$tmp/c.json")"
until_in "$tmp/serve.jsonl" 'completion: [0-9]* prompt + 2 completion tokens' && ok || bad "no request line"
stop "$SERVE_PID"
lines "$tmp/serve.jsonl" >"$tmp/serve.lines" && grep -q "^info serve: .* completion: [0-9]* prompt + 2 completion tokens" \
    "$tmp/serve.lines" && grep -q "^info serve: SIGTERM, stopping$" "$tmp/serve.lines" && ok ||
    bad "serve's JSON log: $(cat "$tmp/serve.lines")"

# ---- bad values, and --help
expect 2 "registry: --log-level: log level 'loud' is not one of error, warn, info, debug" \
    "$BIN" registry --model "$M" --log-level loud
expect 2 "node: --log-format: log format 'xml' is not one of text, json" \
    "$BIN" node --shard "$M" --key k --authorized a --log-format xml
expect 2 "serve: --log-file: cannot open the log file $tmp/no-such-dir/s.log to append to it: No such file" \
    "$BIN" serve --model "$M" --no-auth --log-file "$tmp/no-such-dir/s.log"
expect 2 "prompt: --log-level: log level 'INFO'" "$BIN" prompt --route r.json -p hi --log-level INFO
expect 2 "node: --log-level: log level ''" "$BIN" node --registry http://127.0.0.1:1 --log-level ""
for cmd in registry node serve prompt "node --registry http://127.0.0.1:9"; do
    # shellcheck disable=SC2086
    expect 0 "--log-format F " "$BIN" $cmd --help
    grep -q -- "--log-level LEVEL" "$tmp/o" && grep -q -- "--log-file PATH" "$tmp/o" && ok ||
        bad "'$cmd --help' lacks a log option: $(cat "$tmp/o")"
done
finish
