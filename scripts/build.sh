#!/usr/bin/env bash
# Configures and builds kvcache into $BUILD_DIR (default build/; build-asan/ with
# KVCACHE_SANITIZE=ON, the address+undefined build), then prints the folder on stdout.
# Arguments name the targets to build (default: all), e.g. `scripts/build.sh kvcache`.
# KVCACHE_BUILD_TESTS / KVCACHE_BUILD_BENCH: ON (the default), OFF, or keep (the folder's
# earlier choice; OFF in a new folder). With ccache installed it is the compiler launcher
# (CCACHE_BASEDIR = this checkout unless set). cmake's and ninja's output go to
# build/logs/<folder>.log (KVCACHE_LOG_DIR to move it); the terminal gets one line per phase.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/log.sh
sanitize=${KVCACHE_SANITIZE:-OFF}
default_dir=build
[ "$sanitize" = "ON" ] && default_dir=build-asan
dir=${BUILD_DIR:-$default_dir}
build_type=Release
[ "$sanitize" = "ON" ] && build_type=RelWithDebInfo
targets=("$@")

# option NAME: the ON/OFF value to configure NAME with.
option() {
  local v=${!1:-ON}
  if [ "$v" = keep ]; then
    v=$(sed -n "s/^$1:BOOL=//p" "$dir/CMakeCache.txt" 2>/dev/null || true)
    v=${v:-OFF}
  fi
  echo "$v"
}
flags=(-G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DKVCACHE_SANITIZE="$sanitize"
       -DKVCACHE_BUILD_TESTS="$(option KVCACHE_BUILD_TESTS)"
       -DKVCACHE_BUILD_BENCH="$(option KVCACHE_BUILD_BENCH)")
if [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && command -v ccache > /dev/null; then
  flags+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}  # cache hits across checkouts
fi

log_to "${KVCACHE_LOG_DIR:-build/logs}/$(basename "$dir").log"
start=$SECONDS
step "build: configuring $dir (tests $(option KVCACHE_BUILD_TESTS), benchmarks $(option KVCACHE_BUILD_BENCH))" \
  cmake -S . -B "$dir" "${flags[@]}"
# The steps ninja would run (a dry run), to say how much is to do.
n=$(ninja -C "$dir" -n "${targets[@]}" | grep -c '^\[' || true)
what=${targets[*]:-everything}
if [ "$n" -eq 0 ]; then
  echo "build: $what is up to date" >&2
else
  step "build: compiling $what ($n steps; $(nproc) jobs)" \
    cmake --build "$dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"}
  echo "build: done in $((SECONDS - start)) s" >&2
fi
echo "$dir"
