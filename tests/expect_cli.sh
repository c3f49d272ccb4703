#!/usr/bin/env bash
# One CLI call checked for its exact exit code and a message on one stream (ctest's
# PASS_REGULAR_EXPRESSION ignores the exit code, WILL_FAIL accepts any failure, a crash too).
# Usage: expect_cli.sh EXIT_CODE stdout|stderr PATTERN COMMAND [ARGS...]
# PATTERN is an extended regular expression (grep -E) that some line of the stream must match.
set -euo pipefail
want=$1 stream=$2 pattern=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
timeout 60 "$@" > "$tmp/stdout" 2> "$tmp/stderr" || rc=$?
show() { for s in stdout stderr; do echo "--- $s:"; head -c 2000 "$tmp/$s"; echo; done; }
[ "$rc" = "$want" ] || { echo "FAIL: exit code $rc, expected $want: $*"; show; exit 1; }
grep -Eq -e "$pattern" "$tmp/$stream" || { echo "FAIL: no line of $stream matches '$pattern': $*"; show; exit 1; }
echo "PASS: exit $rc and $stream matches '$pattern'"
