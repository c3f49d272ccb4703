#!/usr/bin/env bash
# `kvcache run --save-session / --load-session` and interactive `/save` on the embedded model:
# a restored conversation continues with exactly the greedy tokens of the uninterrupted run
# (f32 and f16 K/V, saved from one layout and restored into the other); mismatched dtype or
# windows, corrupt, truncated and missing files are refused by name. Usage: KVCACHE_BIN
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

. "$(dirname "$0")/../embedded_model.sh"
require_embedded_model

tokens() { /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
# tokens [a, b) of a JSON list printed by tokens()
slice() { /usr/bin/python3 -c 'import ast,sys; print(ast.literal_eval(sys.argv[1])[int(sys.argv[2]):int(sys.argv[3])])' "$@"; }

for dtype in f32 f16; do
  for layouts in "sequence cell" "cell sequence" "sequence sequence"; do
    set -- $layouts
    save_kind=$1 load_kind=$2
    want=$("$bin" run --json --max-new-tokens 16 --kv-dtype $dtype 2>/dev/null | tokens)
    first=$("$bin" run --json --max-new-tokens 8 --kv-dtype $dtype --cache $save_kind \
              --save-session "$tmp/s.kvs" 2>"$tmp/err" | tokens)
    grep -q "saved session: $((16 + 7)) positions, 24 token ids" "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "save message ($dtype $layouts)"; }
    [ "$first" = "$(slice "$want" 0 8)" ] || fail "first half differs ($dtype $layouts)"
    rest=$("$bin" run --json --max-new-tokens 8 --kv-dtype $dtype --cache $load_kind \
             --load-session "$tmp/s.kvs" 2>"$tmp/err" | tokens)
    grep -q "loaded session: 23 positions, 24 token ids" "$tmp/err" ||
      { cat "$tmp/err" >&2; fail "load message ($dtype $layouts)"; }
    [ "$rest" = "$(slice "$want" 8 16)" ] ||
      fail "restored run differs ($dtype $layouts): $rest vs $(slice "$want" 8 16)"
  done
done

# A new prompt after a restore equals the second turn of one interactive run.
printf 'In the\nAnd\n/quit\n' | "$bin" run --interactive --json --max-new-tokens 4 \
  2>/dev/null >"$tmp/turns"
want=$(sed -n 2p "$tmp/turns" | tokens)
"$bin" run --prompt "In the" --max-new-tokens 4 --save-session "$tmp/t.kvs" >/dev/null 2>&1
got=$("$bin" run --json --prompt "And" --max-new-tokens 4 --load-session "$tmp/t.kvs" \
        2>/dev/null | tokens)
[ "$got" = "$want" ] || fail "second turn after restore: $got vs $want"

# /save in interactive mode, then continue from the file.
want=$("$bin" run --json --prompt "In the" --max-new-tokens 8 2>/dev/null | tokens)
printf 'In the\n/save %s\n/save\n/quit\n' "$tmp/i.kvs" |
  "$bin" run --interactive --max-new-tokens 4 >/dev/null 2>"$tmp/err"
grep -q "saved session: " "$tmp/err" || { cat "$tmp/err" >&2; fail "/save"; }
grep -q "save refused: expected /save FILE" "$tmp/err" || { cat "$tmp/err" >&2; fail "/save alone"; }
got=$("$bin" run --json --max-new-tokens 4 --load-session "$tmp/i.kvs" 2>/dev/null | tokens)
[ "$got" = "$(slice "$want" 4 8)" ] || fail "continue after /save: $got vs $(slice "$want" 4 8)"

expect_error() {  # expect_error CODE PATTERN args...: exit CODE (1 refused, 2 usage), PATTERN
  local code=$1 pattern=$2 rc=0; shift 2
  "$bin" run "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = "$code" ] || { cat "$tmp/err" >&2; fail "run $* exited $rc, expected $code"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "run $*: no '$pattern'"; }
}
"$bin" run --max-new-tokens 2 --save-session "$tmp/f32.kvs" >/dev/null 2>&1
expect_error 1 "kv dtype f32, this cache stores f16" --load-session "$tmp/f32.kvs" --kv-dtype f16
expect_error 1 "window = 0 in the snapshot, 4 in this cache" --load-session "$tmp/f32.kvs" --windows 4
expect_error 1 "cannot open" --load-session "$tmp/none.kvs"
expect_error 1 "not with --chat" --chat --save-session "$tmp/x.kvs"
size=$(stat -c %s "$tmp/f32.kvs")
head -c $((size - 3)) "$tmp/f32.kvs" > "$tmp/short.kvs"
expect_error 1 "truncated" --load-session "$tmp/short.kvs"
/usr/bin/python3 - "$tmp/f32.kvs" "$tmp/flip.kvs" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-20] ^= 0x40
open(sys.argv[2], "wb").write(b)
PY
expect_error 1 "rows checksum mismatch" --load-session "$tmp/flip.kvs"
echo "not a snapshot at all" > "$tmp/text.kvs"
expect_error 1 "not a kvcache snapshot" --load-session "$tmp/text.kvs"
echo PASS
