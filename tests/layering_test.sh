#!/usr/bin/env bash
# The layering of SPEC §1 as the compiler sees it: the headers in the layers' public/ folders
# compile with only those folders on the include path, and no header left beside a layer's
# sources (internal) can be reached that way. Usage: layering_test.sh SRC_DIR CXX
set -euo pipefail
src=$1
cxx=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
inc=()
for d in "$src"/src/*/public; do inc+=("-I$d"); done
checked=0
all="${TMPDIR:-/tmp}/layering_public_$$.cpp"
trap 'rm -f "$all" "$all.err"' EXIT
: >"$all"
for pub in "$src"/src/*/public/*/*.h; do
  echo "#include \"$(basename "$(dirname "$pub")")/$(basename "$pub")\"" >>"$all"
  checked=$((checked + 1))
done
# One translation unit of every public header: all reachable, and together consistent.
"$cxx" -std=c++20 -fsyntax-only "${inc[@]}" "$all" 2>"$all.err" ||
  { cat "$all.err" >&2; fail "the public headers do not compile with only public/ on the path"; }
for internal in "$src"/src/*/*.h; do
  layer=$(basename "$(dirname "$internal")")
  h="$layer/$(basename "$internal")"
  if echo "#include \"$h\"" | "$cxx" -std=c++20 -fsyntax-only "${inc[@]}" -x c++ - 2>/dev/null; then
    fail "internal header $h is reachable from another layer"
  fi
  checked=$((checked + 1))
done
[ "$checked" -gt 40 ] || fail "only $checked headers checked"
echo "layering: $checked headers checked"
