#!/usr/bin/env bash
# The main job: installs what building the CLI needs, builds the `kvcache` target only, and
# runs it on the embedded model. Extra arguments go to `kvcache run` (e.g. --prompt "In the
# beginning" --json). A build/ folder that scripts/test.sh configured keeps its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
dir=$(KVCACHE_BUILD_TESTS=keep KVCACHE_BUILD_BENCH=keep scripts/build.sh kvcache)
exec "$dir/tools/kvcache" run "$@"
