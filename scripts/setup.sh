#!/usr/bin/env bash
# Installs the Debian 12 packages kvcache builds and tests with (skips what is installed).
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev libopenblas-dev libxxhash-dev libcpp-httplib-dev
          libhiredis-dev redis-server
          python3 python3-numpy python3-regex python3-jinja2 python3-jsonschema curl nodejs chromium)
# python3-jsonschema validates constrained output (tests/server/structured_output_http_test.sh).
# nodejs and chromium serve the server's real-client tests (tests/server/serve_node_test.sh);
# they install the pinned npm packages themselves and skip without npm or a registry.
# redis-server serves the shared prefix-store tests, which start their own on a free loopback
# port (the package's system service is not needed).
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi
