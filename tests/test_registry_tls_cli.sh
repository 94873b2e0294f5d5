#!/usr/bin/env bash
# test_registry_tls_cli.sh - the registry's HTTP API over TLS (docs/operators.md,
# "TLS"), on loopback with --tls:
#   (a) a cell (registry, two nodes, a requester) whose every control-plane
#       call - joins, heartbeats, the nodes' seed downloads, routes - goes over
#       https with the registry's pin: a greedy prompt gives `moontail run`'s
#       tokens; the pin the registry prints is openssl's pin of its certificate
#       (an independent computation), its key file is 0600, and GET / and
#       /v1/status show the pin;
#   (b) a wrong pin is refused with the pin error (the token is never sent), no
#       pin at all says how to trust the registry, a malformed pin is exit 2,
#       and plain HTTP to the TLS port gets no API answer (with an error
#       saying to use https://); https:// to a plain registry says to use
#       http://;
#   (c) a plain listen off loopback (0.0.0.0) is refused without
#       --insecure-http, with the message naming the fixes; with nothing
#       said, 0.0.0.0 gets TLS; conflicting flags are exit 2; a start that
#       fails on its --admin-token-file, or on writing the new certificate,
#       leaves no certificate or key file behind;
#   (d) a restart keeps the certificate and the pin; a kept key others may
#       read is refused, saying to chmod 600 it;
#   (e) an operator's certificate and key (made here with openssl) are served
#       and trusted by pin or by --ca-file; a key that is not the
#       certificate's is refused, and so is a key others may read;
#   (f) `setup` pins on first use (prints the pin, keeps it in config.json)
#       and later commands use it without options; setup with a wrong
#       --registry-pin fails.
set -u
. "$(dirname "$0")/lib/harness.bash"
export MOONTAIL_HOME="$tmp/home" MOONTAIL_NO_SYSTEMD=1
T="timeout 60"
extra_cleanup() { MOONTAIL_HOME="$tmp/home" "$BIN" setup --stop >/dev/null 2>&1; }
if ! command -v openssl >/dev/null; then
    echo "SKIP: openssl is not installed (./dev installs it: DEB_TEST)"
    finish
    exit
fi

# the pin of a PEM certificate as openssl computes it: the reference for ours
ossl_pin() {
    echo "sha256//$(openssl x509 -in "$1" -pubkey -noout | openssl pkey -pubin -outform der |
        openssl dgst -sha256 -binary | base64)"
}
# the pin a registry printed on its "TLS certificate PIN (...)" line
printed_pin() { sed -n 's/^TLS certificate \(sha256\/\/[A-Za-z0-9+/=]*\) .*/\1/p' "$tmp/$1.out"; }
stop() { kill "$1" 2>/dev/null && wait "$1" 2>/dev/null; }

M="$tmp/m.gguf"
"$BIN" mkmodel -o "$M" "${MODEL_ARCH[@]}" --type f32 --layers 2 --embd 128 --heads 4 --head-dim 32 \
    --ff 128 --ff-exp 64 --seed 5 >/dev/null || bad "mkmodel"
"$BIN" run -m "$M" -p "Hello secure cell" -n 12 --temp 0 --json 2>/dev/null | tokens >"$tmp/ref"
"$BIN" keygen -o "$tmp/req.key" >/dev/null || bad "keygen"
REG=(registry --model "$M" --db "$tmp/reg.db" --key "$tmp/reg.key" --shards "$tmp/seed" --replicas 1
    --spares 0 --heartbeat-ms 200 --dead-after-ms 1500)

# ==== (c) no plain HTTP off loopback unless asked for =========================================
expect 1 "refusing plain HTTP on 0.0.0.0:0, which is not a loopback address.*--tls-cert FILE --tls-key FILE.*--insecure-http" \
    "$BIN" "${REG[@]}" --listen 0.0.0.0:0 --no-tls
[ ! -e "$tmp/reg.db" ] && ok || bad "the refused registry created its database"
expect 2 "--no-tls asks for plain HTTP and cannot go with --tls" "$BIN" "${REG[@]}" --tls --no-tls
expect 2 "--insecure-http asks for plain HTTP and cannot go with --tls-cert" "$BIN" "${REG[@]}" \
    --insecure-http --tls-cert "$tmp/x.pem" --tls-key "$tmp/x.key"
expect 2 "--tls-cert and --tls-key go together" "$BIN" "${REG[@]}" --tls-cert "$tmp/x.pem"
# a start that fails leaves no certificate: the admin token file is read before one is made...
expect 2 "--admin-token-file $tmp/no-such-token: cannot open it" "$BIN" "${REG[@]}" --db "$tmp/adm.db" \
    --key "$tmp/adm.key" --listen 127.0.0.1:0 --tls --admin-token-file "$tmp/no-such-token"
[ -z "$(find "$tmp" -maxdepth 1 -name 'adm.key*')" ] && ok ||
    bad "a start refused for its admin token file left $(find "$tmp" -maxdepth 1 -name 'adm.key*')"
# ...and a certificate that cannot be written takes its new key with it (a directory in the way)
mkdir "$tmp/w.key.tls.pem.tmp"
expect 1 "$tmp/w.key.tls.pem.tmp: cannot create" "$BIN" "${REG[@]}" --db "$tmp/w.db" --key "$tmp/w.key" \
    --listen 127.0.0.1:0 --tls
[ -z "$(find "$tmp" -maxdepth 1 -name 'w.key*' ! -name w.key.tls.pem.tmp)" ] && ok ||
    bad "a certificate that could not be written left $(find "$tmp" -maxdepth 1 -name 'w.key*')"
# nothing said: TLS with a self-signed certificate kept beside --key
start_bg any "$BIN" registry --model "$M" --db "$tmp/any.db" --key "$tmp/any.key" --shards "$tmp/seed-any" \
    --listen 0.0.0.0:0
[[ "$ADDR" == https://0.0.0.0:* ]] && ok || bad "0.0.0.0 without flags did not serve https: $ADDR"
[ -n "$(printed_pin any)" ] && [ "$(printed_pin any)" = "$(ossl_pin "$tmp/any.key.tls.pem")" ] && ok ||
    bad "0.0.0.0: printed pin '$(printed_pin any)' is not openssl's"
openssl x509 -in "$tmp/any.key.tls.pem" -noout -ext subjectAltName 2>/dev/null | grep -q "$(hostname)" &&
    ok || bad "the certificate for 0.0.0.0 does not name this host: $(openssl x509 -in "$tmp/any.key.tls.pem" -noout -text)"
stop "$PID"
# --insecure-http: plain on 0.0.0.0 (kept for (b): https:// to a plain registry)
start_bg plain "$BIN" registry --model "$M" --db "$tmp/plain.db" --key "$tmp/plain.key" --shards "$tmp/seed-plain" \
    --listen 0.0.0.0:0 --insecure-http
PLAIN=$ADDR PLAIN_PID=$PID
[[ "$PLAIN" == http://0.0.0.0:* ]] && ok || bad "--insecure-http did not serve plain http: $PLAIN"
[ -z "$(printed_pin plain)" ] && ok || bad "a plain registry printed a TLS certificate"

# ==== (a) a cell over TLS ======================================================================
start_bg reg "$BIN" "${REG[@]}" --listen 127.0.0.1:0 --tls
URL=$ADDR REG_PID=$PID
PIN=$(printed_pin reg)
[[ "$URL" == https://127.0.0.1:* ]] && ok || bad "--tls: the registry does not listen on https: $URL"
[ -n "$PIN" ] && [ "$PIN" = "$(ossl_pin "$tmp/reg.key.tls.pem")" ] && ok ||
    bad "printed pin '$PIN' is not openssl's '$(ossl_pin "$tmp/reg.key.tls.pem")'"
[ "$(stat -c %a "$tmp/reg.key.tls.key")" = 600 ] && ok || bad "the TLS key is not 0600"
openssl x509 -in "$tmp/reg.key.tls.pem" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:127.0.0.1" &&
    ok || bad "the certificate does not name 127.0.0.1"
curl -s --cacert "$tmp/reg.key.tls.pem" "$URL/" | json "process.exit(o.tls_pin == '$PIN' ? 0 : 1)" && ok ||
    bad "GET / (CA-verified with the certificate itself) does not show the pin"
P=(--registry "$URL" --registry-pin "$PIN")
$T "$BIN" account new cafe "${P[@]}" -o "$tmp/cafe.token" >/dev/null 2>"$tmp/acct.err" && ok ||
    bad "account new over TLS: $(cat "$tmp/acct.err")"
for k in 1 2; do
    start_bg "n$k" "$BIN" node "${P[@]}" --token-file "$tmp/cafe.token" --key "$tmp/n$k.key" \
        --data "$tmp/d$k" --listen 127.0.0.1:0 --name "pc$k" --speed 1 --threads 1
done
status() { timeout 10 "$BIN" status "${P[@]}" --json 2>/dev/null; }
wait_for 'o.ready && o.nodes_alive == 2' 60 && ok || bad "the cell did not get ready over TLS: $(status | head -c 800)"
status | json "process.exit(o.tls_pin == '$PIN' ? 0 : 1)" && ok || bad "/v1/status does not show the pin"
$T "$BIN" prompt "${P[@]}" --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache" \
    -p "Hello secure cell" -n 12 --temp 0 --json 2>"$tmp/p.err" | tokens >"$tmp/got"
[ -s "$tmp/ref" ] && cmp -s "$tmp/ref" "$tmp/got" && ok ||
    bad "prompt over TLS: $(cat "$tmp/got") vs $(cat "$tmp/ref"); $(cat "$tmp/p.err")"
[ -n "$(find "$tmp/d1" "$tmp/d2" -type f -size +1k)" ] && ok || bad "the nodes downloaded no shard over TLS"

# ==== (b) refusals =============================================================================
WRONG=sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=
expect 1 "does not match the pinned fingerprint $WRONG" "$BIN" status --registry "$URL" --registry-pin "$WRONG"
grep -q "registry at 127.0.0.1:" "$tmp/o" && grep -q "registry-pin" "$tmp/o" && ok ||
    bad "the pin error does not name the registry and the fix: $(cat "$tmp/o")"
expect 1 "does not match the pinned fingerprint" "$BIN" prompt --registry "$URL" --registry-pin "$WRONG" \
    --token-file "$tmp/cafe.token" --key "$tmp/req.key" --cache "$tmp/cache" -p "x" -n 2
expect 1 "is not trusted.*--registry-pin" "$BIN" status --registry "$URL"
expect 2 "registry pin 'sha256//short' is malformed" "$BIN" status --registry "$URL" --registry-pin sha256//short
expect 2 "given 2 times" "$BIN" status --registry "$URL" --registry-pin "$PIN" --registry-pin "$PIN"
# the TLS port answers no plain request, with or without a token
HOSTPORT=${URL#https://}
code=$(curl -s -o "$tmp/plain.body" -w '%{http_code}' -H "Authorization: Bearer $(cat "$tmp/cafe.token")" \
    "http://$HOSTPORT/v1/accounts/me")
[ "$code" = 000 ] && [ ! -s "$tmp/plain.body" ] && ok || bad "plain HTTP to the TLS port got HTTP $code: $(cat "$tmp/plain.body")"
expect 1 "closed the connection without an answer.*use an https:// URL" "$BIN" status --registry "http://$HOSTPORT"
PLAINPORT=${PLAIN##*:}
expect 1 "TLS handshake with 127.0.0.1:$PLAINPORT failed.*use an http:// URL" "$BIN" status \
    --registry "https://127.0.0.1:$PLAINPORT" --registry-pin "$PIN"
stop "$PLAIN_PID"

# ==== (d) a restart keeps the certificate and its pin ==========================================
for k in 1 2; do stop "${pids[-$k]}"; done
sum=$(md5sum <"$tmp/reg.key.tls.pem")
stop "$REG_PID"
start_bg reg2 "$BIN" "${REG[@]}" --listen 127.0.0.1:0 --tls
URL=$ADDR
[ "$(printed_pin reg2)" = "$PIN" ] && ok || bad "the pin changed across a restart: $(printed_pin reg2) vs $PIN"
[ "$(md5sum <"$tmp/reg.key.tls.pem")" = "$sum" ] && ok || bad "the certificate file changed across a restart"
grep -q "self-signed, kept in" "$tmp/reg2.out" && ok || bad "the restart did not say it kept the certificate"
expect 0 "" "$BIN" status --registry "$URL" --registry-pin "$PIN"
chmod 644 "$tmp/reg.key.tls.key"
expect 1 "TLS key $tmp/reg.key.tls.key: other users may access it (mode 0644).*chmod 600 $tmp/reg.key.tls.key" \
    "$BIN" "${REG[@]}" --db "$tmp/reg3.db" --listen 127.0.0.1:0 --tls
chmod 600 "$tmp/reg.key.tls.key"

# ==== (f) setup pins on first use ==============================================================
expect 0 "presents TLS certificate $PIN" "$BIN" setup --accept-terms --registry "$URL" --no-start \
    --listen 127.0.0.1:0
json "process.exit(o.registry_pin == '$PIN' && o.registry == '$URL' ? 0 : 1)" <"$MOONTAIL_HOME/config.json" &&
    ok || bad "config.json does not keep the pin: $(cat "$MOONTAIL_HOME/config.json")"
$T "$BIN" status --json 2>"$tmp/s.err" | json "process.exit(o.tls_pin == '$PIN' ? 0 : 1)" && ok ||
    bad "status with the config's registry and pin: $(cat "$tmp/s.err")"
MOONTAIL_HOME="$tmp/home2" expect 1 "does not match the pinned fingerprint" "$BIN" setup --accept-terms \
    --registry "$URL" --registry-pin "$WRONG" --no-start
MOONTAIL_HOME="$tmp/home3" expect 2 "is for an https:// registry" "$BIN" setup --accept-terms \
    --registry "http://$HOSTPORT" --registry-pin "$PIN" --no-start

# ==== (e) an operator's certificate ============================================================
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/op.key" -out "$tmp/op.pem" -days 2 \
    -subj /CN=localhost -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null || bad "openssl req"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tmp/other.key" 2>/dev/null || bad "openssl genpkey"
expect 1 "TLS key .*other.key is not the key of certificate" "$BIN" "${REG[@]}" --db "$tmp/op.db" \
    --listen 127.0.0.1:0 --tls-cert "$tmp/op.pem" --tls-key "$tmp/other.key"
chmod 640 "$tmp/op.key"
expect 1 "TLS key $tmp/op.key: other users may access it (mode 0640).*chmod 600 $tmp/op.key" "$BIN" "${REG[@]}" \
    --db "$tmp/op.db" --listen 127.0.0.1:0 --tls-cert "$tmp/op.pem" --tls-key "$tmp/op.key"
chmod 600 "$tmp/op.key"
start_bg op "$BIN" "${REG[@]}" --db "$tmp/op.db" --listen 127.0.0.1:0 --tls-cert "$tmp/op.pem" \
    --tls-key "$tmp/op.key"
OP=$ADDR OPPIN=$(printed_pin op)
[[ "$OP" == https://* ]] && ok || bad "--tls-cert: not https: $OP"
[ -n "$OPPIN" ] && [ "$OPPIN" = "$(ossl_pin "$tmp/op.pem")" ] && ok || bad "operator cert: pin '$OPPIN' is not openssl's"
grep -q "from $tmp/op.pem" "$tmp/op.out" && ok || bad "the registry does not say whose certificate it serves"
expect 0 "" "$BIN" status --registry "$OP" --registry-pin "$OPPIN"
expect 0 "" "$BIN" status --registry "$OP" --ca-file "$tmp/op.pem"
expect 1 "not trusted" "$BIN" status --registry "https://localhost:${OP##*:}" --ca-file "$tmp/reg.key.tls.pem"
expect 1 "does not match the pinned fingerprint" "$BIN" status --registry "$OP" --registry-pin "$PIN"

finish
