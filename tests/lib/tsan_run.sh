#!/usr/bin/env bash
# tsan_run.sh - runs one test of the ThreadSanitizer build (cmake -DMT_TSAN=ON,
# docs/testing.md): CTest starts every test of that build through it. Each
# process the test starts (the test program, and the registry, nodes and
# requesters a script starts) writes its reports into a scratch directory, and
# the test fails if any process reported anything: a node that a script kills,
# or whose exit status it does not check, would otherwise race unnoticed.
#   tsan_run.sh COMMAND [ARGS...]
# TSAN_OPTIONS from the environment are kept and override these.
set -u
logs=$(mktemp -d "${TMPDIR:-/tmp}/mt-tsan-XXXXXX") || exit 1
export TSAN_OPTIONS="log_path=$logs/report second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
"$@"
rc=$?
reports=("$logs"/report.*)
if [ -e "${reports[0]}" ]; then
    cat "${reports[@]}" >&2
    echo "tsan_run: ThreadSanitizer reported in ${#reports[@]} process(es) of '$*' (reports above," \
        "kept in $logs): fix the race (docs/testing.md, ThreadSanitizer)" >&2
    exit 1
fi
rm -rf "$logs"
exit "$rc"
