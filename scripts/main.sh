#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs kvcache on the embedded model.
# Extra arguments go to `kvcache run` (e.g. --prompt "In the beginning" --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
dir=$(KVCACHE_BUILD_BENCH=OFF scripts/build.sh)
exec "$dir/tools/kvcache" run "$@"
