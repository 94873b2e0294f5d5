#!/usr/bin/env bash
# test_demo.sh - `moontail demo` (the quick start's main job): a registry and
# nodes as separate processes split a tiny kimi-k3, answer a prompt,
# say where each layer ran, and leave nothing behind (no process, no
# directory) unless --keep; bad options are refused with exit status 2.
set -u
. "$(dirname "$0")/lib/harness.bash"
export TMPDIR="$tmp"
T="timeout 120"
expect 0 "this request ran layers 0-[0-9]* on pc" "$BIN" demo -n 8
grep -q "^model: a tiny kimi-k3" "$tmp/o" && ok || bad "the demo's model is not a kimi-k3: $(cat "$tmp/o")"
grep -q "pipeline 1: layers [0-9]*-11" "$tmp/o" && ok || bad "placement lacks a second pipeline: $(cat "$tmp/o")"
grep -q "spare" "$tmp/o" && ok || bad "no spare in the placement"
grep -q "stopped the registry and 5 nodes" "$tmp/o" && ok || bad "demo did not say it stopped everything"
[ -z "$(ls -d "$tmp"/moontail-demo-* 2>/dev/null)" ] && ok || bad "demo left its directory behind"
pgrep -f "$tmp/moontail-demo" >/dev/null && bad "demo left processes running" || ok
expect 0 "kept in" "$BIN" demo -n 4 --nodes 3 --keep
kept=$(sed -n 's/^demo files and logs kept in //p' "$tmp/o")
[ -d "$kept" ] && [ -f "$kept/registry.log" ] && ok || bad "--keep did not keep $kept"
pgrep -f "$tmp/moontail-demo" >/dev/null && bad "demo --keep left processes running" || ok
expect 2 "--nodes" "$BIN" demo --nodes 2
expect 2 "unknown option" "$BIN" demo --bogus
expect 0 "usage: moontail demo" "$BIN" demo --help
finish
