#!/usr/bin/env bash
# test_batch.sh - batch work (docs/api.md, "Batches"): `moontail batch` on a synthetic model,
# killed with kill -9 half-way and run again, and the batch endpoints of `moontail serve`
# driven by the official OpenAI npm client (tests/api/batch_client.mjs). Checks:
#   - SIGTERM: no more requests start, exit 1 saying how to resume; the same command resumes;
#   - 40 requests (30 sampled completions with their own seeds, 9 greedy chats, one body
#     naming another model): after kill -9 at the 20th result (the process stops itself
#     there, MOONTAIL_TEST_BATCH_PAUSE_AFTER) and a cut last line appended to the state's
#     output as a crash mid-write would leave it, plus a repeated line, the same command
#     again gives each custom_id exactly once, in the input's order; the 20 results from
#     before the kill are kept as they were (same ids), not computed again;
#   - each result's text is `moontail run`'s with the same seed and sampling (chat: run on
#     the ChatML text), usage counts equal run's; the bad body is a 400 result naming
#     'model';
#   - through a cell (a registry and 2 nodes): `moontail batch --registry` of 10 of them,
#     killed at its 4th result and run again: run's texts, each custom_id once;
#   - refusals naming the line: not JSON, a duplicate custom_id, another url; a state
#     directory of another input; a state directory others can read;
#   - serve (--batch-dir): files.create (the client's multipart upload), files.retrieve,
#     batches.create of the 30 completions and the bad body; serve stops itself at the 10th
#     result and is killed with kill -9, started again on the same directory: the batch
#     resumes (a batch whose state was damaged meanwhile fails, its error naming no path of
#     the server's, which go to its log), batches.retrieve until completed, files.content of its output and error files
#     give each custom_id once with run's texts; batches.list holds it; unknown ids, another
#     key's batch -> 404, a bad purpose or endpoint -> 400, a file whose lines use another url
#     -> a failed batch naming the line and the file by its id (not the server's path), a cancel (cancelled, or completed first); forms the
#     strict reader refuses (a preamble, an unknown part header) -> 400, an upload over
#     --max-file-mb -> 413, no key -> 401; a body over --max-body-kb to chat -> 413 and an
#     upload without a valid key -> 401, both answered before a byte of the body is sent
#     (curl's Expect: 100-continue), while the same body with the key is read; a batch of 3
#     completions raises its key's /v1/usage by 3 requests and its results' tokens.
set -u
. "$(dirname "$0")/lib/harness.bash"
T="timeout 120"
SRC=${MT_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$tmp"

M="$tmp/tiny.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 2 --embd 64 --heads 4 --head-dim 16 \
    --ff 64 --ff-exp 32 --experts 4 --experts-used 2 --seed 3 --readable >/dev/null || bad "mkmodel"

# ---- the requests and their references from `moontail run`
N=12
# an API completion's sampler: no top-k, top-p or min-p, penalties over the whole text
SAMPLED=(--temp 0.9 --top-k 0 --top-p 1 --min-p 0 --repeat-last-n -1)
: >"$tmp/in.jsonl"
for i in $(seq 1 40); do
    if [ "$i" -le 30 ]; then
        P="Story number $i:"
        I=$i P=$P N=$N node -e 'process.stdout.write(JSON.stringify({custom_id: "req-" + process.env.I,
            method: "POST", url: "/v1/completions", body: {model: "tiny", prompt: process.env.P,
            max_tokens: +process.env.N, temperature: 0.9, seed: +process.env.I}}) + "\n")' >>"$tmp/in.jsonl"
        $T "$BIN" run -m "$M" -p "$P" -n $N "${SAMPLED[@]}" --seed "$i" --json >"$tmp/ref$i.json" 2>/dev/null ||
            bad "reference run $i"
    elif [ "$i" -le 39 ]; then
        U="Name colour $i."
        I=$i U=$U node -e 'process.stdout.write(JSON.stringify({custom_id: "req-" + process.env.I,
            method: "POST", url: "/v1/chat/completions", body: {model: "tiny", max_tokens: 8,
            temperature: 0, messages: [{role: "user", content: process.env.U}]}}) + "\n")' >>"$tmp/in.jsonl"
        CHATML=$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant' "$U")$'\n'
        $T "$BIN" run -m "$M" -p "$CHATML" -n 8 --temp 0 --json >"$tmp/ref$i.json" 2>/dev/null ||
            bad "chat reference run $i"
    else
        echo '{"custom_id": "req-40", "method": "POST", "url": "/v1/completions", "body": {"model": "gpt-4o", "prompt": "x"}}' >>"$tmp/in.jsonl"
    fi
done

# FILE [NUMBERS]: the results (JSONL) are right: the custom_ids req-N of NUMBERS (default 1 to
# 40) once each in that order, texts and usage equal to run's, the bad body a 400 naming 'model'
check_results() {
    REFDIR=$tmp IDS=${2:-$(seq -s ' ' 1 40)} node -e '
        const fs = require("fs"), dir = process.env.REFDIR, ids = process.env.IDS.split(" ").map(Number);
        const lines = fs.readFileSync(process.argv[1], "utf8").split("\n");
        if (lines.pop() !== "") throw new Error("the last line has no newline");
        if (lines.length !== ids.length) throw new Error(lines.length + " lines, wanted " + ids.length);
        lines.forEach((l, k) => {
            const o = JSON.parse(l), i = ids[k];
            if (o.custom_id !== "req-" + i) throw new Error("line " + i + " is " + o.custom_id);
            if (!/^batch_req_/.test(o.id) || o.error !== null || !/^req_/.test(o.response.request_id))
                throw new Error("line " + i + ": not in OpenAI shape: " + l);
            const b = o.response.body;
            if (i === 40) {
                if (o.response.status_code !== 400 || b.error.param !== "model")
                    throw new Error("the bad body: " + l);
                return;
            }
            const ref = JSON.parse(fs.readFileSync(dir + "/ref" + i + ".json", "utf8"));
            const text = i <= 30 ? b.choices[0].text : b.choices[0].message.content;
            if (o.response.status_code !== 200 || text !== ref.text ||
                b.usage.prompt_tokens !== ref.prompt_tokens.length || b.usage.completion_tokens !== ref.tokens.length)
                throw new Error("line " + i + ": " + JSON.stringify(text) + " (" + b.usage.prompt_tokens +
                    " + " + b.usage.completion_tokens + " tokens), run gave " + JSON.stringify(ref.text) +
                    " (" + ref.prompt_tokens.length + " + " + ref.tokens.length + ")");
        });' "$1"
}

# ---- kill -9 half-way, run again
B=("$BIN" batch --model "$M" -i "$tmp/in.jsonl" -o "$tmp/out.jsonl" --state "$tmp/st" --parallel 4 -t 1)
MOONTAIL_TEST_BATCH_PAUSE_AFTER=20 "${B[@]}" >"$tmp/b1.out" 2>"$tmp/b1.err" &
BPID=$!
pids+=("$BPID")
if wait_stopped "$BPID" 60; then
    kill -9 "$BPID"
    wait "$BPID" 2>/dev/null
    [ "$(wc -l <"$tmp/st/output.jsonl")" -eq 20 ] && ok ||
        bad "wanted 20 results written at the pause: $(wc -l <"$tmp/st/output.jsonl")"
    [ "$(stat -c %a "$tmp/st")" = 700 ] && ok || bad "the state directory is not 0700"
    [ ! -e "$tmp/out.jsonl" ] && ok || bad "the output was written before the end"
    # what the first run wrote: custom_id -> id
    node -e 'const m = {}; for (const l of require("fs").readFileSync(0, "utf8").trim().split("\n")) {
        const o = JSON.parse(l); m[o.custom_id] = o.id } console.log(JSON.stringify(m))' \
        <"$tmp/st/output.jsonl" >"$tmp/first.json"
    # a repeated line and a line cut mid-write, as a crash could leave them
    head -n 1 "$tmp/st/output.jsonl" >>"$tmp/st/output.jsonl"
    head -c 60 "$tmp/st/output.jsonl" >>"$tmp/st/output.jsonl"
else
    bad "batch did not stop itself after 20 results: $(cat "$tmp/b1.err")"
fi
$T "${B[@]}" >"$tmp/b2.out" 2>"$tmp/b2.err" && ok || bad "the resumed batch failed: $(cat "$tmp/b2.err")"
check_results "$tmp/out.jsonl" && ok || bad "the resumed batch's results"
grep -q "40/40 done, 1 failed" "$tmp/b2.err" && ok || bad "no final progress line: $(cat "$tmp/b2.err")"
node -e 'const fs = require("fs"), first = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    let kept = 0;
    for (const l of fs.readFileSync(process.argv[2], "utf8").trim().split("\n")) {
        const o = JSON.parse(l); if (first[o.custom_id] === o.id) kept++ }
    process.exit(kept === 20 && Object.keys(first).length === 20 ? 0 : 1)' "$tmp/first.json" "$tmp/out.jsonl" &&
    ok || bad "the 20 results from before the kill were not kept as they were"
# the state's own output (the order results finished in): whole lines, each custom_id once
node -e 'const ls = require("fs").readFileSync(0, "utf8").split("\n"); ls.pop();
    const ids = new Set(ls.map(l => JSON.parse(l).custom_id));
    process.exit(ls.length === 40 && ids.size === 40 ? 0 : 1)' <"$tmp/st/output.jsonl" && ok ||
    bad "the state's output.jsonl after the resume: $(head -c 300 "$tmp/st/output.jsonl")"
[ -d "$tmp/st" ] && ok || bad "an explicit --state directory was removed"

# SIGTERM: no more requests start, those in flight finish, exit 1; the same command resumes
head -n 10 "$tmp/in.jsonl" >"$tmp/in10.jsonl"
G=("$BIN" batch --model "$M" -i "$tmp/in10.jsonl" -o "$tmp/out10.jsonl" --state "$tmp/st10" --parallel 2 -t 1)
MOONTAIL_TEST_BATCH_PAUSE_AFTER=3 "${G[@]}" >"$tmp/g1.out" 2>"$tmp/g1.err" &
GPID=$!
pids+=("$GPID")
if wait_stopped "$GPID" 60; then
    kill -TERM "$GPID" # pending while stopped: taken at once after SIGCONT
    kill -CONT "$GPID"
    wait "$GPID"
    rc=$?
    [ $rc -eq 1 ] && grep -q "stopped before the end; the same command again resumes" "$tmp/g1.err" &&
        [ ! -e "$tmp/out10.jsonl" ] && ok || bad "SIGTERM: exit $rc, $(cat "$tmp/g1.err")"
    $T "${G[@]}" 2>"$tmp/g2.err" && check_results "$tmp/out10.jsonl" "$(seq -s ' ' 1 10)" && ok ||
        bad "resumed after SIGTERM: $(cat "$tmp/g2.err")"
else
    bad "batch did not stop itself after 3 results: $(cat "$tmp/g1.err")"
fi

# without --state: the default state directory goes once all is done
$T "$BIN" batch --model "$M" -i "$tmp/in.jsonl" -o "$tmp/out2.jsonl" -t 1 --quiet 2>"$tmp/b3.err" &&
    check_results "$tmp/out2.jsonl" && [ ! -e "$tmp/out2.jsonl.state" ] && ok ||
    bad "a batch in one go: $(cat "$tmp/b3.err")"

# ---- refusals
printf '%s\n' "$(head -n 2 "$tmp/in.jsonl")" '{"custom_id": "x", "method": "POST",' >"$tmp/notjson.jsonl"
expect 1 "notjson.jsonl line 3: not JSON" "$BIN" batch --model "$M" -i "$tmp/notjson.jsonl" -o "$tmp/x.jsonl"
[ ! -e "$tmp/x.jsonl.state" ] && ok || bad "a refused file left a state directory"
printf '%s\n' "$(head -n 3 "$tmp/in.jsonl")" "$(sed -n 2p "$tmp/in.jsonl")" >"$tmp/dup.jsonl"
expect 1 "dup.jsonl lines 2 and 4: the custom_id 'req-2' is used twice" \
    "$BIN" batch --model "$M" -i "$tmp/dup.jsonl" -o "$tmp/x.jsonl"
head -n 1 "$tmp/in.jsonl" | sed 's|/v1/completions|/v1/embeddings|' >"$tmp/url.jsonl"
expect 1 "url.jsonl line 1: 'url' must be" "$BIN" batch --model "$M" -i "$tmp/url.jsonl" -o "$tmp/x.jsonl"
head -n 5 "$tmp/in.jsonl" >"$tmp/other.jsonl"
expect 1 "holds the state of another input" \
    "$BIN" batch --model "$M" -i "$tmp/other.jsonl" -o "$tmp/x.jsonl" --state "$tmp/st"
mkdir -m 755 "$tmp/open"
expect 1 "others may read this state directory" \
    "$BIN" batch --model "$M" -i "$tmp/in.jsonl" -o "$tmp/x.jsonl" --state "$tmp/open"
expect 2 "give the requests (-i FILE)" "$BIN" batch --model "$M" -o "$tmp/x.jsonl"

# ---- through a cell: a registry and two nodes (one replica), killed at the 4th result
start_small_cell "$M" batch
CELL_IDS="1 2 3 4 5 6 7 8 31 32"
for i in $CELL_IDS; do sed -n "${i}p" "$tmp/in.jsonl"; done >"$tmp/in_cell.jsonl"
C=("$BIN" batch --registry "$REG" --token-file "$tmp/api.token" --key "$tmp/req.key" --cache "$tmp/cache"
    --model-name tiny -i "$tmp/in_cell.jsonl" -o "$tmp/out_cell.jsonl" --state "$tmp/st_cell" --parallel 3 -t 1)
MOONTAIL_TEST_BATCH_PAUSE_AFTER=4 "${C[@]}" >"$tmp/c1.out" 2>"$tmp/c1.err" &
CPID=$!
pids+=("$CPID")
if wait_stopped "$CPID" 90; then
    kill -9 "$CPID"
    wait "$CPID" 2>/dev/null
    [ "$(wc -l <"$tmp/st_cell/output.jsonl")" -eq 4 ] && ok || bad "wanted 4 results at the pause through the cell"
else
    bad "batch --registry did not stop itself after 4 results: $(cat "$tmp/c1.err")"
fi
$T "${C[@]}" >"$tmp/c2.out" 2>"$tmp/c2.err" && check_results "$tmp/out_cell.jsonl" "$CELL_IDS" && ok ||
    bad "batch --registry, resumed: $(cat "$tmp/c2.err")"

# ---- serve's Files and Batches endpoints, with the official client; serve killed half-way
if [ ! -f "$SRC/tests/api/node_modules/openai/package.json" ]; then
    echo "test_batch: the openai client is not installed; './dev test' installs it" \
        "(npm ci in tests/api)" >&2
    exit 1
fi
KEY=sk-moontail-test-alice-4f1c0a OTHER=sk-moontail-test-bob-77e0d1
printf '%s alice\n%s bob\n' "$KEY" "$OTHER" >"$tmp/keys"
# the completions and the bad body: a batch has one endpoint
SERVE_IDS="$(seq -s ' ' 1 30) 40"
for i in $SERVE_IDS; do sed -n "${i}p" "$tmp/in.jsonl"; done >"$tmp/in_serve.jsonl"
S=("$BIN" serve --model "$M" --api-keys "$tmp/keys" --listen 127.0.0.1:0 --model-name tiny -t 1
    --batch-dir "$tmp/bd" --batch-parallel 4 --max-file-mb 1)
client() { # STEP [VAR=VALUE...]: batch_client.mjs on $URL; counts its PASS/FAIL lines
    local step=$1 line
    shift
    env MT_STEP="$step" MT_URL="$URL" MT_KEY="$KEY" MT_OTHER_KEY="$OTHER" MT_IN="$tmp/in_serve.jsonl" MT_BATCH_DIR="$tmp/bd" \
        MT_ENDPOINT=/v1/completions "$@" $T node "$SRC/tests/api/batch_client.mjs" >"$tmp/client_$step.out" 2>&1
    local rc=$?
    while IFS= read -r line; do
        case "$line" in
        PASS*) ok ;;
        FAIL*) bad "client $step: ${line#FAIL }" ;;
        BATCH*) BATCH=${line#BATCH } ;;
        esac
    done <"$tmp/client_$step.out"
    [ $rc -eq 0 ] || grep -q '^FAIL' "$tmp/client_$step.out" || bad "client $step: $(tail -5 "$tmp/client_$step.out")"
}
MOONTAIL_TEST_BATCH_PAUSE_AFTER=10 start_bg s1 "${S[@]}"
URL=$ADDR S1=$PID
BATCH=""
[ -n "$URL" ] && client create
if [ -n "$BATCH" ] && wait_stopped "$S1" 60; then
    kill -9 "$S1"
    wait "$S1" 2>/dev/null
    [ "$(wc -l <"$tmp/bd/batches/$BATCH/output.jsonl")" -eq 10 ] && ok ||
        bad "wanted 10 results on disk at the pause: $(wc -l <"$tmp/bd/batches/$BATCH/output.jsonl")"
    [ "$(stat -c %a "$tmp/bd")" = 700 ] && ok || bad "the batch directory is not 0700"
    # a batch whose state was damaged while serve was down: it fails when its turn comes, and
    # its error tells the client the server failed, without the server's paths
    DMG=batch_Damaged0State0Of0Test000
    mkdir -m 700 "$tmp/bd/batches/$DMG"
    printf '{"owner": "alice", "batch": {"id": "%s", "object": "batch", "status": "in_progress", "created_at": 1}}' \
        "$DMG" >"$tmp/bd/batches/$DMG/batch.json"
    head -n 2 "$tmp/in_serve.jsonl" >"$tmp/bd/batches/$DMG/input.jsonl"
    echo '{"input_bytes": 1, "input_blake2b": "00", "requests": 2}' >"$tmp/bd/batches/$DMG/state.json"
    start_bg s2 "${S[@]}"
    URL=$ADDR
    client finish MT_BATCH="$BATCH" MT_OUT="$tmp/out_serve.jsonl"
    curl -s -H "Authorization: Bearer $KEY" "$URL/v1/batches/$DMG" >"$tmp/dmg.json"
    DIR="$tmp/bd" json 'const m = o.errors.data[0].message;
        process.exit(o.status === "failed" && m.includes("server error") && !m.includes(process.env.DIR) ? 0 : 1)' \
        <"$tmp/dmg.json" && grep -q "$DMG: $tmp/bd/batches/$DMG: input.jsonl does not match" "$tmp/s2.err" && ok ||
        bad "a damaged batch: $(cat "$tmp/dmg.json")"
    check_results "$tmp/out_serve.jsonl" "$SERVE_IDS" && ok || bad "serve's batch results"
    client misc MT_BATCH="$BATCH"
    # at the HTTP level: forms the strict reader refuses, an upload over --max-file-mb
    up() { curl -s -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$@" "$URL/v1/files"; }
    [ "$(up -H 'Content-Type: multipart/form-data; boundary=XyZ' \
        --data-binary $'preamble\r\n--XyZ\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--XyZ--\r\n')" = 400 ] &&
        grep -q "does not begin with the boundary" "$tmp/body" && ok || bad "a preamble: $(cat "$tmp/body")"
    [ "$(up -H 'Content-Type: multipart/form-data; boundary=XyZ' \
        --data-binary $'--XyZ\r\nContent-Disposition: form-data; name="purpose"\r\nX-Other: 1\r\n\r\nbatch\r\n--XyZ--\r\n')" = 400 ] &&
        grep -q "header 'X-Other' is not allowed" "$tmp/body" && ok || bad "an unknown part header: $(cat "$tmp/body")"
    head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' 'a' >"$tmp/big.jsonl"
    [ "$(up -F purpose=batch -F file=@"$tmp/big.jsonl")" = 413 ] && grep -q "max-file-mb" "$tmp/body" &&
        ok || bad "an upload over --max-file-mb: $(cat "$tmp/body")"
    [ "$(curl -s -o "$tmp/body" -w '%{http_code}' "$URL/v1/batches")" = 401 ] && ok ||
        bad "batches without a key: $(cat "$tmp/body")"
    # only an authenticated upload may send more than --max-body-kb (1 MiB), and a refused
    # request's body is not read: its answer comes before curl's "Expect: 100-continue" is
    # granted, so curl sends none of it (size_upload 0). 1 MiB + 8 KiB: under the upload limit.
    head -c $((1024 * 1024 + 8192)) /dev/zero | tr '\0' 'a' >"$tmp/mid.bin"
    early() { # HEADER...: status and bytes curl sent of a POST of mid.bin to $path
        curl -s -o "$tmp/body" -w '%{http_code} %{size_upload}' -H 'Expect: 100-continue' \
            --expect100-timeout 60 "$@" --data-binary @"$tmp/mid.bin" "$URL$path"
    }
    path=/v1/chat/completions
    [ "$(early -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json')" = "413 0" ] &&
        grep -q 'request_too_large' "$tmp/body" && grep -q 'POST /v1/chat/completions' "$tmp/body" &&
        ok || bad "a large body to chat was read or not refused: $(early -H "Authorization: Bearer $KEY") $(cat "$tmp/body")"
    path=/v1/files
    [ "$(early -H 'Content-Type: multipart/form-data; boundary=XyZ')" = "401 0" ] &&
        grep -q 'missing_api_key' "$tmp/body" && ok ||
        bad "an upload without a key was read or not refused: $(early) $(cat "$tmp/body")"
    [ "$(early -H "Authorization: Bearer sk-not-a-key-of-this-server" \
        -H 'Content-Type: multipart/form-data; boundary=XyZ')" = "401 0" ] && ok ||
        bad "an upload with an unknown key was read: $(cat "$tmp/body")"
    # the same size from the key: read whole (its form is then refused: no parts)
    [ "$(early -H "Authorization: Bearer $KEY" -H 'Content-Type: multipart/form-data; boundary=XyZ')" = \
        "400 $((1024 * 1024 + 8192))" ] && ok || bad "an authenticated upload was not read: $(cat "$tmp/body")"

    # a batch's requests go through its key's accounting as interactive ones do: once none of
    # the key's batches runs, a batch of 3 completions raises the key's /v1/usage by 3
    # requests and by the tokens its results report
    api() { curl -s -H "Authorization: Bearer $KEY" "$@"; }
    over() { # the key's batches are all over (none runs or waits)
        api "$URL/v1/batches?limit=100" | node -e 'const o = JSON.parse(require("fs").readFileSync(0, "utf8"));
            process.exit(o.data.every(b => ["completed", "failed", "cancelled", "expired"].includes(b.status)) ? 0 : 1)'
    }
    for _ in $(seq 1 300); do over && break; sleep 0.2; done
    head -n 3 "$tmp/in_serve.jsonl" >"$tmp/in3.jsonl"
    u0=$(api "$URL/v1/usage")
    F3=$(api -F purpose=batch -F file=@"$tmp/in3.jsonl" "$URL/v1/files" | json 'console.log(o.id)')
    B3=$(api -H 'Content-Type: application/json' -d "{\"input_file_id\": \"$F3\", \"endpoint\":
        \"/v1/completions\", \"completion_window\": \"24h\"}" "$URL/v1/batches" | json 'console.log(o.id)')
    st3=""
    for _ in $(seq 1 300); do
        st3=$(api "$URL/v1/batches/$B3" | json 'console.log(o.status + " " + o.output_file_id)')
        case "$st3" in completed*|failed*|cancelled*) break ;; esac
        sleep 0.2
    done
    u1=$(api "$URL/v1/usage")
    api "$URL/v1/files/${st3#* }/content" >"$tmp/out3.jsonl"
    U0=$u0 U1=$u1 node -e 'const fs = require("fs"), a = JSON.parse(process.env.U0), b = JSON.parse(process.env.U1);
        const rs = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(l => JSON.parse(l).response.body.usage);
        const p = rs.reduce((s, u) => s + u.prompt_tokens, 0), c = rs.reduce((s, u) => s + u.completion_tokens, 0);
        const d = [b.requests - a.requests, b.prompt_tokens - a.prompt_tokens, b.completion_tokens - a.completion_tokens];
        if (rs.length !== 3 || d[0] !== 3 || d[1] !== p || d[2] !== c || c === 0)
            throw new Error("usage rose by " + JSON.stringify(d) + " for 3 results of " + p + " + " + c + " tokens");' \
        "$tmp/out3.jsonl" && [ "${st3%% *}" = completed ] && ok ||
        bad "a batch's requests in its key's usage ($st3): $u0 -> $u1"
else
    bad "serve did not stop itself after 10 batch results: $(cat "$tmp/s1.err")"
fi

finish
