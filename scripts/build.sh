#!/usr/bin/env bash
# Configures and builds kvcache into $BUILD_DIR (default build/). Set KVCACHE_SANITIZE=ON for
# the address+undefined build (default dir build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=${KVCACHE_SANITIZE:-OFF}
default_dir=build
[ "$sanitize" = "ON" ] && default_dir=build-asan
dir=${BUILD_DIR:-$default_dir}
build_type=Release
[ "$sanitize" = "ON" ] && build_type=RelWithDebInfo
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DKVCACHE_SANITIZE="$sanitize" \
  -DKVCACHE_BUILD_TESTS=ON -DKVCACHE_BUILD_BENCH="${KVCACHE_BUILD_BENCH:-ON}" >&2
cmake --build "$dir" -j "$(nproc)" >&2
echo "$dir"
