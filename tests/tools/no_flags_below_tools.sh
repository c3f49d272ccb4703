#!/usr/bin/env bash
# Library code names options and fields; only tools/ speaks of command-line flags (they are
# mapped there, tools/flag_names.h). Collects every long flag from `kvcache SUB --help` and
# fails naming each place under src/ that spells one. Usage: no_flags_below_tools.sh KVCACHE_BIN SRC_DIR
set -euo pipefail
bin=$1 src=$2
subs=$("$bin" --help | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}')
[ -n "$subs" ] || { echo "FAIL: no subcommands in kvcache --help"; exit 1; }
flags=$(for s in $subs; do "$bin" "$s" --help; done | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
[ "$(echo "$flags" | wc -l)" -ge 20 ] || { echo "FAIL: too few flags read: $flags"; exit 1; }
found=0
for f in $flags; do
  # A flag ends where the name does: "--max-queue 2" and "--kv-store)" count, "--max-queue-x" not.
  if grep -rnE -- "${f}([^a-z0-9_-]|\$)" "$src"; then found=1; fi
done
[ "$found" = 0 ] || { echo "FAIL: flag names above (src/ should name options, not flags)"; exit 1; }
echo "no flag names under $src ($(echo "$flags" | wc -l) flags checked)"
