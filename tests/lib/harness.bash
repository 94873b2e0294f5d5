# harness.bash - shared by the tests/*.sh end-to-end scripts: the moontail
# binary, a scratch directory removed on exit, and check counting.
#   ok / bad MESSAGE   count a passed / failed check
#   finish             print "N passed, N failed" and exit non-zero on failure
BIN=${MT_BIN:?MT_BIN must point at the moontail binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
ok() { checks=$((checks + 1)); }
bad() {
    checks=$((checks + 1))
    fails=$((fails + 1))
    echo "FAIL: $*" >&2
}
finish() {
    echo "$((checks - fails)) passed, $fails failed"
    [ "$fails" -eq 0 ]
}
