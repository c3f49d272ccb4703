#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest; the long property run is
# labelled "long" and left out unless KVCACHE_LONG=1). KVCACHE_SANITIZE=ON tests the
# address+undefined build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
dir=$(scripts/build.sh)
exclude=(-LE long)
[ "${KVCACHE_LONG:-0}" = "1" ] && exclude=()
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "${exclude[@]}"
