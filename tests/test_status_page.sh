#!/usr/bin/env bash
# test_status_page.sh - the registry's status page and Prometheus metrics,
# end to end on 127.0.0.1: a registry (cell mode, 1 replica, 1 spare) and 3
# nodes, one of them named with HTML ('<b>x</b> & "q"'). Checks:
#   - GET /metrics is valid text exposition 0.0.4 (tests/lib/prom_check.mjs, a
#     strict reader written from the format's description; promtool too when
#     installed) and agrees with GET /v1/status: nodes by state, every
#     layer's serving replicas, per-node names (escaped labels), counters
#     that only grow, routes served after a prompt;
#   - GET / gives browsers the page and everyone else the JSON index;
#   - headless Chromium (Debian's chromium) renders the page: READY banner,
#     one coverage cell per layer with the status's numbers, a row per node
#     with its name shown as text, not markup; a screenshot is kept in
#     build/test-artifacts/ and its path printed ("screenshot: PATH");
#   - the page and `moontail status` agree (tests/lib/status_agree.mjs): the
#     banner's words, and every node's state, role, shard, replica, queue,
#     rate and capacity (with its unit); a spare shows "-" for its shard,
#     replica, queue and rate in both, from the nulls of /v1/status's "shown";
#   - a killed node shows as dead on the page (and in the metrics) once the
#     registry notices, with no rate ("-") on the page and in the CLI;
#   - a cell with fewer replicas serving than wanted is not a green READY:
#     an amber SERVING, "no spare for layers 0-7", on the page and in the CLI,
#     whose banner gives the placement's note (not repeated on a line of its own);
#   - a page whose registry stops (through tests/lib/registry_stop_proxy.mjs,
#     which stops it after the page's 2nd answer) says "registry unreachable
#     since ..." and shows no stale rows or layers.
# Without a working chromium the page checks are skipped with a SKIP line;
# the metrics checks still run.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 60"
LIB=$(cd "$(dirname "$0")/lib" && pwd)
ART=${MT_BUILD:-$tmp}/test-artifacts
mkdir -p "$ART"
rm -f "$ART"/status_page*.png # a picture from an earlier run proves nothing
cd "$tmp"

status() { curl -s --max-time 10 "$URL/v1/status"; }

# ---- chromium, if it can run here
CHROME=$(command -v chromium || command -v chromium-browser || true)
# page URL ARGS...: headless chromium on URL with a fresh profile; virtual time
# lets the page poll a few times without waiting for them
page() {
    local url=$1
    shift
    rm -rf "$tmp/chrome"
    timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run \
        --user-data-dir="$tmp/chrome" --window-size=1280,900 --virtual-time-budget=4000 \
        "$@" "$url" 2>>"$tmp/chrome.err"
}
have_chrome=0
if [ -n "$CHROME" ] && page "data:text/html,<p>ok</p>" --dump-dom 2>/dev/null | grep -q "<p>ok</p>"; then
    have_chrome=1
    echo "chromium: $("$CHROME" --version 2>/dev/null | head -1)"
else
    if [ -z "$CHROME" ]; then
        why="chromium is not installed (./dev test installs the Debian package chromium)"
    else
        why="$CHROME does not run: $(tail -3 "$tmp/chrome.err" 2>/dev/null)"
    fi
    echo "SKIP: status page checks in a browser: $why"
fi
# dom FILE: what the dumped page shows, as JSON (tests/lib/status_dom.mjs)
dom() { node "$LIB/status_dom.mjs" <"$1"; }

# ---- model, registry, nodes
M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" --arch qwen3moe --type f32 --layers 8 --embd 64 --heads 4 --head-dim 16 \
    --ff 64 --ff-exp 32 --experts 4 --experts-used 2 --seed 5 >/dev/null || bad "mkmodel"
# each node can hold about two thirds of the model: 2 stages and a spare
cap_mb=$(($(stat -c %s "$M") * 7 / 10 / 1000000 + 1))
start_bg reg "$BIN" registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" \
    --replicas 1 --spares 1 --heartbeat-ms 200 --dead-after-ms 1500 --listen 127.0.0.1:0
URL=$ADDR
REG_PID=$PID
"$BIN" account new lab --registry "$URL" -o "$tmp/lab.token" >/dev/null 2>&1 || bad "account new"
# no node yet: the page says NOT READY, why, and every layer is down
if [ $have_chrome = 1 ]; then
    page "$URL/status" --dump-dom --screenshot="$ART/status_page_not_ready.png" >"$tmp/empty.html"
    dom "$tmp/empty.html" >"$tmp/empty.json"
    json 'if (o.banner.state !== "not-ready" || o.banner.word !== "NOT READY" || !o.banner.why ||
              o.layers.length !== 8 || o.layers.some((l) => l.serving !== 0 || !/\bdown\b/.test(l.class)) ||
              o.nodes.length) process.exit(1);
          console.log("page with no node: " + o.banner.word + ": " + o.banner.why)' <"$tmp/empty.json" &&
        ok || bad "the page of an empty registry: $(head -c 600 "$tmp/empty.json")"
    echo "screenshot: $ART/status_page_not_ready.png"
fi
HTML_NAME='<b>x</b> & "q"'
names=("pc-one" "$HTML_NAME" "pc-three")
declare -A node_pid
for k in 0 1 2; do
    start_bg "n$k" "$BIN" node --registry "$URL" --token-file "$tmp/lab.token" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "${names[$k]}" --capacity-mb "$cap_mb" \
        --speed 1 --threads 1
    node_pid[$k]=$PID
done
wait_for 'o.ready && o.nodes_alive == 3 && o.nodes_serving == 2 && o.spares == 1' 60 &&
    ok || bad "3 nodes did not reach READY with a spare: $(status | head -c 1500)"
names_json=$(node -e 'console.log(JSON.stringify(process.argv.slice(1)))' "${names[@]}")
# some work, so that counters and routes are not all zero
$T "$BIN" prompt --registry "$URL" --token-file "$tmp/lab.token" --key "$tmp/req.key" \
    --cache "$tmp/cache" -p "Status pages show the cell" -n 6 --temp 0 >/dev/null 2>"$tmp/prompt.err" ||
    bad "prompt: $(tail -3 "$tmp/prompt.err")"
sleep 0.6 # a few heartbeats carry the counters

# ---- GET /metrics: valid exposition, consistent with /v1/status
check_metrics() { # check_metrics TAG: metrics between two status reads agree with them
    local tag=$1
    status >"$tmp/s1.json"
    curl -s -D "$tmp/m.headers" "$URL/metrics" >"$tmp/metrics.txt"
    status >"$tmp/s2.json"
    grep -qi '^content-type: text/plain; version=0.0.4' "$tmp/m.headers" && ok ||
        bad "$tag: /metrics content type: $(grep -i content-type "$tmp/m.headers")"
    if node "$LIB/prom_check.mjs" <"$tmp/metrics.txt" >"$tmp/metrics.json" 2>"$tmp/prom.err"; then
        ok
    else
        bad "$tag: /metrics is not valid exposition format: $(cat "$tmp/prom.err")"
        return
    fi
    if command -v promtool >/dev/null; then
        promtool check metrics <"$tmp/metrics.txt" >"$tmp/promtool.out" 2>&1 && ok ||
            bad "$tag: promtool check metrics: $(cat "$tmp/promtool.out")"
    fi
    node -e '
const fs = require("fs");
const m = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const s1 = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const s2 = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const errors = [];
const get = (name, labels = {}) => {
  const hit = m.samples.filter((x) => x.name === name &&
    Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  if (hit.length !== 1) { errors.push(`${name} ${JSON.stringify(labels)}: ${hit.length} samples`); return NaN; }
  return hit[0].value;
};
// a gauge read between s1 and s2 equals one of them; a counter lies between them
const gauge = (what, v, a, b) => { if (v !== a && v !== b) errors.push(`${what} = ${v}, status says ${a} / ${b}`); };
const counter = (what, v, a, b) => { if (!(v >= a && v <= b)) errors.push(`${what} = ${v}, not in [${a}, ${b}]`); };
gauge("registry_up", get("moontail_registry_up"), 1, 1);
gauge("ready", get("moontail_ready"), +s1.ready, +s2.ready);
gauge("layers", get("moontail_layers"), s1.n_layer, s2.n_layer);
gauge("replicas_wanted", get("moontail_replicas_wanted"), s1.replicas, s2.replicas);
gauge("min_replicas_serving", get("moontail_min_replicas_serving"), s1.min_replicas_serving, s2.min_replicas_serving);
gauge("plan_version", get("moontail_plan_version"), s1.plan_version, s2.plan_version);
counter("routes_served", get("moontail_routes_served_total"), s1.routes_served, s2.routes_served);
counter("moves", get("moontail_plan_moves_total"), s1.moves, s2.moves);
gauge("start time", Math.round(get("moontail_registry_start_time_seconds") * 1000), s1.started_ms, s2.started_ms);
const info = m.samples.filter((x) => x.name === "moontail_registry_info");
if (info.length !== 1 || info[0].labels.mode !== s2.mode || info[0].labels.source_id !== s2.source_id)
  errors.push("registry_info " + JSON.stringify(info));
for (const st of ["joining", "loading", "serving", "spare", "idle", "paused", "draining", "dead"]) {
  const count = (s) => s.nodes.filter((n) => n.state === st).length;
  gauge(`nodes{state=${st}}`, get("moontail_nodes", { state: st }), count(s1), count(s2));
}
if (m.samples.filter((x) => x.name === "moontail_layer_replicas_serving").length !== s2.n_layer)
  errors.push("not one moontail_layer_replicas_serving per layer");
for (let i = 0; i < s2.n_layer; i++) {
  gauge(`layer ${i} serving`, get("moontail_layer_replicas_serving", { layer: String(i) }), s1.layers[i].serving, s2.layers[i].serving);
  gauge(`layer ${i} assigned`, get("moontail_layer_replicas_assigned", { layer: String(i) }), s1.layers[i].assigned, s2.layers[i].assigned);
}
for (const n2 of s2.nodes) {
  const n1 = s1.nodes.find((n) => n.node_id === n2.node_id) || n2;
  const l = { node_id: String(n2.node_id), name: n2.name };
  const inf = m.samples.filter((x) => x.name === "moontail_node_info" && x.labels.node_id === l.node_id);
  if (inf.length !== 1 || inf[0].labels.name !== n2.name || ![n1.state, n2.state].includes(inf[0].labels.state) ||
      inf[0].labels.shard !== n2.shard || inf[0].labels.role !== n2.role)
    errors.push(`node_info ${l.node_id}: ${JSON.stringify(inf)}`);
  gauge(`node ${l.node_id} up`, get("moontail_node_up", l), +n1.alive, +n2.alive);
  gauge(`node ${l.node_id} queue`, get("moontail_node_queue", l), n1.queue, n2.queue);
  gauge(`node ${l.node_id} capacity`, get("moontail_node_capacity_bytes", l), n1.capacity, n2.capacity);
  counter(`node ${l.node_id} token-layers`, get("moontail_node_served_token_layers_total", l), n1.served_token_layers, n2.served_token_layers);
  counter(`node ${l.node_id} expert rows`, get("moontail_node_served_expert_rows_total", l), n1.served_expert_rows, n2.served_expert_rows);
  counter(`node ${l.node_id} uptime`, Math.round(get("moontail_node_uptime_seconds_total", l) * 1000), n1.uptime_ms, n2.uptime_ms);
  get("moontail_node_tokens_per_second", l);
  get("moontail_node_last_seen_seconds", l);
}
if (errors.length) { console.error(errors.join("\n")); process.exit(1); }
' "$tmp/metrics.json" "$tmp/s1.json" "$tmp/s2.json" 2>"$tmp/mcheck.err" && ok ||
        bad "$tag: /metrics disagrees with /v1/status: $(head -c 1500 "$tmp/mcheck.err")"
}
check_metrics "ready"
json 'const v = (n) => o.samples.filter((x) => x.name === n).map((x) => x.value);
      if (!(v("moontail_routes_served_total")[0] >= 1)) process.exit(1);
      if (!(Math.max(...v("moontail_node_served_token_layers_total")) > 0)) process.exit(1);' \
    <"$tmp/metrics.json" && ok || bad "a prompt left no trace in the metrics (routes, token-layers)"
# the reader refuses broken variants of the same text, so its "valid" means something
for edit in '/^# TYPE moontail_queue /d' 's/\\"q\\"/"q"/' '/^moontail_ready /p' \
    's/^moontail_ready 1$/moontail_ready one/' 's/^moontail_layers /moontail-layers /' \
    '/^# HELP moontail_nodes /{h;d};$G' 's/^\(moontail_queue\) /\1{a="1",a="2"} /'; do
    sed "$edit" "$tmp/metrics.txt" | node "$LIB/prom_check.mjs" >/dev/null 2>&1 &&
        bad "prom_check.mjs accepts metrics edited with '$edit'" || ok
done
head -c -1 "$tmp/metrics.txt" | node "$LIB/prom_check.mjs" >/dev/null 2>&1 && bad "prom_check.mjs accepts a missing final newline" || ok
grep -c '^moontail_' "$tmp/metrics.txt" | sed 's/^/metrics: /; s/$/ samples/'
grep -E '^moontail_(nodes|ready|layer_replicas_serving|node_info)' "$tmp/metrics.txt" | head -20
# the node name with HTML and quotes, escaped in a label and read back whole
grep -qF 'name="<b>x</b> & \"q\""' "$tmp/metrics.txt" && ok || bad "the quoted node name is not escaped in labels"

# ---- GET /: the page for browsers, the index for everyone else
ctype() { curl -s -o "$tmp/body" -w '%{content_type}' "$@"; }
[ "$(ctype "$URL/")" = "application/json" ] && json 'if (o.status !== "/v1/status" || o.page !== "/status") process.exit(1)' <"$tmp/body" &&
    ok || bad "GET / without Accept: text/html is not the JSON index: $(head -c 300 "$tmp/body")"
[ "$(ctype -H 'Accept: application/json' "$URL/")" = "application/json" ] && ok || bad "GET / for JSON clients"
[ "$(ctype -H 'Accept: text/html,application/xhtml+xml,*/*;q=0.8' "$URL/")" = "text/html; charset=utf-8" ] &&
    grep -q 'id="banner"' "$tmp/body" && ok || bad "GET / for a browser is not the page"
[ "$(ctype "$URL/status")" = "text/html; charset=utf-8" ] && cmp -s "$tmp/body" <(curl -s -H 'Accept: text/html' "$URL/") &&
    ok || bad "GET /status is not the same page"
# self-contained: nothing loaded from elsewhere
grep -Eiq '<(script|link|img|iframe)[^>]+(src|href)=|@import|url\(|https?://' "$tmp/body" &&
    bad "the page refers to outside resources: $(grep -Eio '(src|href)=[^ >]*|https?://[^ "]*' "$tmp/body" | head -3)" || ok

# ---- the page in a browser
if [ $have_chrome = 1 ]; then
    # one load gives both the DOM and the picture, so they show the same moment
    page "$URL/" --dump-dom --screenshot="$ART/status_page.png" >"$tmp/ready.html"
    status >"$tmp/s.json"
    dom "$tmp/ready.html" >"$tmp/ready.json" || bad "could not read the dumped page"
    node -e '
const fs = require("fs");
const d = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
const s = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const names = JSON.parse(process.argv[3]);
const errors = [];
if (!d.banner || d.banner.state !== "ready" || d.banner.word !== "READY") errors.push("banner " + JSON.stringify(d.banner));
if (d.data_hidden !== false) errors.push("the data section is hidden");
if (d.layers.length !== s.n_layer) errors.push(`${d.layers.length} layer cells for ${s.n_layer} layers`);
d.layers.forEach((l, i) => {
  if (l.layer !== i || l.serving !== s.layers[i].serving || l.wanted !== s.replicas || !/\bok\b/.test(l.class))
    errors.push(`layer cell ${i}: ${JSON.stringify(l)}`);
});
if (d.nodes.length !== s.nodes.length) errors.push(`${d.nodes.length} node rows for ${s.nodes.length} nodes`);
for (const name of names) {
  const row = d.nodes.find((n) => n.name === name);
  const n = s.nodes.find((n) => n.name === name);
  if (!row || !n || row.id !== n.node_id) errors.push(`no row shows node "${name}"`);
  else if (row.state !== n.state) errors.push(`node "${name}" shown ${row.state}, status says ${n.state}`);
}
const html = d.nodes.find((n) => n.name === names[1]);
if (!html || !html.name_html.includes("&lt;b&gt;x&lt;/b&gt; &amp;")) errors.push("the HTML name is not escaped: " + JSON.stringify(html));
if (d.tags.includes("b")) errors.push("a node name became markup (a <b> element exists)");
if (!/^READY/.test(d.title)) errors.push("title " + d.title);
if (errors.length) { console.error(errors.join("\n")); process.exit(1); }
console.log(`page: ${d.banner.word} (${d.banner.why}); ${d.layers.length} layer cells; ` +
  d.nodes.map((n) => `${n.id}=${n.state}`).join(" "));
' "$tmp/ready.json" "$tmp/s.json" "$names_json" 2>"$tmp/pcheck.err" && ok ||
        bad "the page does not show the status: $(cat "$tmp/pcheck.err")"
    # the CLI shows what the page shows, "-" where the page has none (the spare)
    "$BIN" status --registry "$URL" >"$tmp/ready.txt" 2>&1 || bad "status: $(cat "$tmp/ready.txt")"
    node "$LIB/status_agree.mjs" "$tmp/ready.txt" "$tmp/ready.json" 2>"$tmp/agree.err" && ok ||
        bad "the CLI and the page disagree: $(cat "$tmp/agree.err")"
    json 'const sp = o.nodes.filter((n) => n.state === "spare");
          if (sp.length !== 1 || sp[0].cells.slice(4, 8).join(" ") !== "- - - -") process.exit(1)' \
        <"$tmp/ready.json" && ok || bad "the spare's shard, replica, queue and rate are not '-'"
    # the registry decides which cells apply, for both: null for the spare, numbers for the stages
    json 'const cells = (n) => [n.shown.replica, n.shown.queue, n.shown.tok_per_s];
          const sp = o.nodes.filter((n) => n.state === "spare"), sv = o.nodes.filter((n) => n.state === "serving");
          if (sp.length !== 1 || cells(sp[0]).some((v) => v !== null) || sv.length !== 2 ||
              sv.some((n) => cells(n).some((v) => typeof v !== "number"))) process.exit(1)' <"$tmp/s.json" &&
        ok || bad "/v1/status's shown cells: $(json 'console.log(JSON.stringify(o.nodes.map((n) => [n.state, n.shown])))' <"$tmp/s.json")"
    [ "$(head -c 8 "$ART/status_page.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
        [ "$(stat -c %s "$ART/status_page.png")" -gt 20000 ] && ok || bad "no screenshot of the page"
    echo "screenshot: $ART/status_page.png"
fi

# ---- a node dies: the page and the metrics say so
victim=$(status | json 'const n = o.nodes.find((n) => n.state === "serving"); console.log(n.node_id + " " + n.name)')
victim_id=${victim%% *}
for k in 0 1 2; do
    if [ "${names[$k]}" = "${victim#* }" ]; then
        kill -9 "${node_pid[$k]}"
        wait "${node_pid[$k]}" 2>/dev/null # no "Killed" line in the output
    fi
done
wait_for "o.nodes.find((n) => n.node_id == $victim_id).state == 'dead'" 20 && ok ||
    bad "the registry did not notice node $victim_id died"
wait_for 'o.ready && o.spares == 0' 30 && ok || bad "the spare did not take over: $(status | head -c 800)"
check_metrics "node dead"
json "const up = o.samples.find((x) => x.name === 'moontail_node_up' && x.labels.node_id === '$victim_id');
      const dead = o.samples.find((x) => x.name === 'moontail_nodes' && x.labels.state === 'dead');
      if (!up || up.value !== 0 || !dead || dead.value !== 1) process.exit(1);" <"$tmp/metrics.json" &&
    ok || bad "metrics do not show node $victim_id dead"
if [ $have_chrome = 1 ]; then
    page "$URL/" --dump-dom --screenshot="$ART/status_page_node_dead.png" >"$tmp/dead.html"
    dom "$tmp/dead.html" >"$tmp/dead.json"
    json "const row = o.nodes.find((n) => n.id === $victim_id);
          if (!row || row.state !== 'dead' || o.banner.state !== 'ready' || o.nodes.length !== 3) process.exit(1);
          console.log('page after the kill: ' + o.nodes.map((n) => n.id + '=' + n.state).join(' '))" \
        <"$tmp/dead.json" && ok || bad "the page does not show node $victim_id dead: $(head -c 600 "$tmp/dead.json")"
    [ -s "$ART/status_page_node_dead.png" ] && ok || bad "no screenshot after the kill"
    # a dead node has no rate, on the page and in the CLI
    json "const row = o.nodes.find((n) => n.id === $victim_id);
          if (!row || row.cells[6] !== '-' || row.cells[7] !== '-') process.exit(1)" <"$tmp/dead.json" &&
        ok || bad "the dead node shows a queue or a rate on the page"
    "$BIN" status --registry "$URL" >"$tmp/dead.txt" 2>&1
    node "$LIB/status_agree.mjs" "$tmp/dead.txt" "$tmp/dead.json" 2>"$tmp/agree.err" && ok ||
        bad "the CLI and the page disagree after the kill: $(cat "$tmp/agree.err")"
    echo "screenshot: $ART/status_page_node_dead.png"

    # ---- the registry stops while the page is open: no stale data
    start_bg proxy node "$LIB/registry_stop_proxy.mjs" --target "${URL#http://}" --pid "$REG_PID" --after 2
    PROXY=$ADDR
    page "http://$PROXY/status" --dump-dom --screenshot="$ART/status_page_unreachable.png" >"$tmp/down.html"
    curl -s --max-time 5 "$URL/v1/status" >/dev/null && bad "the proxy did not stop the registry"
    answered=$(grep -c answered "$tmp/proxy.out")
    refused=$(grep -c refused "$tmp/proxy.out")
    [ "$answered" = 2 ] && [ "$refused" -ge 1 ] && ok ||
        bad "the page should have had 2 answers, then none: $(cat "$tmp/proxy.out" "$tmp/proxy.err")"
    dom "$tmp/down.html" >"$tmp/down.json"
    json "if (o.banner.state !== 'unreachable' || !/^registry unreachable since \\d\\d:\\d\\d:\\d\\d /.test(o.banner.why) ||
              !/last answer at/.test(o.banner.why) || o.nodes.length || o.layers.length || !o.data_hidden ||
              !/^UNREACHABLE/.test(o.title)) process.exit(1);
          console.log('page after the registry stopped: ' + o.banner.word + ': ' + o.banner.why)" <"$tmp/down.json" &&
        ok || bad "the page does not say the registry is unreachable, or shows stale data: $(head -c 800 "$tmp/down.json")"
    echo "screenshot: $ART/status_page_unreachable.png"
fi

# ---- 2 replicas wanted, 1 serving: requests are served, but a failure would not be covered
start_bg reg2 "$BIN" registry --model "$M" --db "$tmp/reg2.db" --key "$tmp/reg2.key" \
    --shards "$tmp/seed2" --replicas 2 --spares 0 --heartbeat-ms 200 --dead-after-ms 1500 \
    --listen 127.0.0.1:0
URL=$ADDR
"$BIN" account new solo --registry "$URL" -o "$tmp/solo.token" >/dev/null 2>&1 || bad "account new"
start_bg solo "$BIN" node --registry "$URL" --token-file "$tmp/solo.token" --key "$tmp/solo.key" \
    --data "$tmp/dsolo" --listen 127.0.0.1:0 --name solo --speed 1 --threads 1
wait_for 'o.nodes_serving == 1 && o.min_replicas_serving == 1' 30 || bad "the node did not serve: $(status | head -c 600)"
expect 0 "^cell $URL: SERVING: no spare for layers 0-7 (1 of 2 replicas serving)" "$BIN" status --registry "$URL"
cp "$tmp/o" "$tmp/degraded.txt"
# the placement's note (why it made 1 pipeline of 2) is in the banner's reason, and only there
grep -q "^cell .*: SERVING: .*; made 1 of 2 pipelines" "$tmp/degraded.txt" && ! grep -q "^note: " "$tmp/degraded.txt" &&
    ok || bad "the placement's note is not in the banner, or told twice: $(head -3 "$tmp/degraded.txt")"
if [ $have_chrome = 1 ]; then
    page "$URL/" --dump-dom --screenshot="$ART/status_page_degraded.png" >"$tmp/degraded.html"
    dom "$tmp/degraded.html" >"$tmp/degraded.json"
    json "if (o.banner.state !== 'degraded' || o.banner.word !== 'SERVING' ||
              !o.banner.why.startsWith('no spare for layers 0-7') || !/^SERVING/.test(o.title) ||
              o.layers.some((l) => !/\blow\b/.test(l.class))) process.exit(1);
          console.log('page with 1 of 2 replicas: ' + o.banner.word + ': ' + o.banner.why)" <"$tmp/degraded.json" &&
        ok || bad "the page with 1 of 2 replicas: $(head -c 600 "$tmp/degraded.json")"
    node "$LIB/status_agree.mjs" "$tmp/degraded.txt" "$tmp/degraded.json" 2>"$tmp/agree.err" && ok ||
        bad "the CLI and the page disagree with 1 of 2 replicas: $(cat "$tmp/agree.err")"
    echo "screenshot: $ART/status_page_degraded.png"
fi

finish
