#!/usr/bin/env bash
# Installs the Debian 12 packages kvcache needs, skipping what is installed:
#   scripts/setup.sh          what building the kvcache CLI needs (scripts/main.sh)
#   scripts/setup.sh --tests  that and what the tests need (scripts/test.sh)
# apt's output goes to build/logs/setup.log (KVCACHE_LOG_DIR to move it); the terminal gets one
# line, and the log's last lines on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/log.sh

# Building the CLI: the toolchain and the libraries the layers' CMakeLists find.
build_packages=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libcli11-dev libopenblas-dev
                libxxhash-dev libcpp-httplib-dev libhiredis-dev)
# Only the tests: GoogleTest/GoogleMock and Google Benchmark (KVCACHE_BUILD_TESTS/_BENCH);
# redis-server for the shared prefix-store tests (they start their own on a free loopback
# port; the package's system service is not needed); Python with numpy, regex and jinja2 for
# the independent references; python3-jsonschema to validate constrained output; curl for the
# HTTP tests; node, npm and chromium for the real-client
# tests (tests/server/serve_node_test.sh installs its pinned npm packages itself). Debian 12's
# nodejs does not bring npm.
test_packages=(libgtest-dev libgmock-dev libbenchmark-dev redis-server python3 python3-numpy
               python3-regex python3-jinja2 python3-jsonschema curl nodejs npm chromium)

case ${1:-} in
  "") packages=("${build_packages[@]}") ;;
  --tests) packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "usage: scripts/setup.sh [--tests]" >&2; exit 2 ;;
esac

installed() {
  # A nodejs from elsewhere (e.g. NodeSource) brings its own npm and conflicts with Debian's.
  [ "$1" = npm ] && command -v npm > /dev/null && return 0
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]} == 0)); then
  echo "setup: the ${#packages[@]} packages are installed" >&2
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo > /dev/null ||
    { echo "setup: missing ${missing[*]}; install them as root (there is no sudo)" >&2; exit 1; }
  sudo_cmd=(sudo)
  sudo -v  # asks for the password here, on the terminal, not inside the logged step
fi
log_to "${KVCACHE_LOG_DIR:-build/logs}/setup.log"
step "setup: updating the package lists (apt-get update)" "${sudo_cmd[@]}" apt-get update
step "setup: installing ${#missing[@]} packages: ${missing[*]}" \
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
