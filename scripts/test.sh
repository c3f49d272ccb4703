#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest; the long property run is
# labelled "long" and left out unless KVCACHE_LONG=1). KVCACHE_SANITIZE=ON tests the
# address+undefined build. KVCACHE_TEST_ONLY=1 skips set-up and build and runs ctest on the
# existing build; extra arguments go to ctest (e.g. KVCACHE_ISA=scalar ... -L 'cpu|kernels').
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${KVCACHE_TEST_ONLY:-0}" = "1" ]; then
  dir=${BUILD_DIR:-build}
  [ "${KVCACHE_SANITIZE:-OFF}" = "ON" ] && dir=${BUILD_DIR:-build-asan}
else
  scripts/setup.sh --tests
  dir=$(scripts/build.sh)
fi
exclude=(-LE long)
[ "${KVCACHE_LONG:-0}" = "1" ] && exclude=()
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "${exclude[@]}" "$@"
