#!/usr/bin/env bash
# `kvcache run` end to end on the embedded model: --json fields, greedy output identical
# across layouts / chunk sizes / threads, --windows handling, interactive /undo and /reset
# (bounded by --undo-turns, its cost in the summary and in --json), the capacity a --kv-memory
# budget buys, and flag errors that name the flag. Usage: run_cli_test.sh KVCACHE_BIN
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

. "$(dirname "$0")/../embedded_model.sh"
require_embedded_model

json() { "$bin" run --json --max-new-tokens 12 "$@" 2>/dev/null; }
json > "$tmp/base.json"
/usr/bin/python3 - "$tmp/base.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("text", "tokens", "prompt_tokens", "prefill_tokens_per_s", "decode_tokens_per_s", "cache"):
    assert k in j, k
assert len(j["tokens"]) == 12, j["tokens"]
assert j["prompt_tokens"] == len("In the beginning"), j["prompt_tokens"]
assert j["cache"]["kv_dtype"] == "f32" and len(j["cache"]["layers"]) >= 1
assert j["position"] == j["prompt_tokens"] + 11
PY
want=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$tmp/base.json")
for args in "--cache cell" "--max-step-tokens 1" "--max-step-tokens 3 --cache cell" "--threads 1" \
            "--prompt-ids 73,110,32,116,104,101,32,98,101,103,105,110,110,105,110,103"; do
  got=$(json $args | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  [ "$got" = "$want" ] || fail "greedy tokens differ with $args: $got vs $want"
done

# The model's 16-token step is kept over Sliding(8) layers (their rings widen to 8 + 16 - 1)
# and gives the greedy tokens of one-token steps: a 16-token prompt is one step twice the window.
ids=73,110,32,116,104,101,32,98,101,103,105,110,110,105,110,103
narrow=$(json --windows 8,0 --prompt-ids $ids --max-step-tokens 1 | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
read -r step wide < <(json --windows 8,0 --prompt-ids $ids | /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["step_tokens"], j["tokens"])')
[ "$step" = 16 ] || fail "--windows 8,0 should keep the model's step 16, got $step"
[ "$wide" = "$narrow" ] || fail "16-token steps over an 8-token window: $wide vs one-token steps $narrow"

expect_error() {  # expect_error CODE PATTERN args...: exit CODE (1 refused, 2 usage), PATTERN
  local code=$1 pattern=$2 rc=0; shift 2
  "$bin" run "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = "$code" ] || { cat "$tmp/err" >&2; fail "run $* exited $rc, expected $code"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "run $*: no '$pattern'"; }
}
expect_error 2 "--windows: entry 1 = -1, expected 0 (Full) or a window in \\[1, 2^30\\]$" --windows 4,-1
expect_error 2 "--windows: \"x\" is not an integer (expected a comma list)$" --windows 4,x
expect_error 2 "--windows: \"\" is not an integer" --windows 4,,0
expect_error 1 "--prompt-ids: \"\" is not an integer" --prompt-ids 1,,2
expect_error 2 "--capacity: Value 3000000000 not in range" --capacity 3000000000
expect_error 2 "^--top-p: Value 2 not in range 0.000000 to 1.000000$" --top-p 2
expect_error 2 "^--max-new-tokens: Value -1 not in range 0 to 1048576$" --max-new-tokens -1
expect_error 2 "^--kv-dtype: q4 not in {" --kv-dtype q4
expect_error 2 "^--k-dtype: q5 not in {" --k-dtype q5
expect_error 2 "^--v-dtype: f8 not in {" --v-dtype f8

# Quantized K/V (the embedded model: 6 kv heads over 4 cache layers, rows of 32 values): the
# summary names both types and counts bytes exactly — q8_0 6 x 2 x 34 = 408 bytes a cell;
# q8_0 keys with f16 values 6 x (34 + 64) = 588.
json --kv-dtype q8_0 > "$tmp/q8.json"
json --k-dtype q8_0 --v-dtype f16 --cache cell > "$tmp/mixed.json"
/usr/bin/python3 - "$tmp/q8.json" "$tmp/mixed.json" <<'PY'
import json, sys
q8, mixed = (json.load(open(f))["cache"] for f in sys.argv[1:3])
assert (q8["kv_dtype"], q8["k_dtype"], q8["v_dtype"]) == ("q8_0", "q8_0", "q8_0"), q8["kv_dtype"]
assert q8["bytes_per_cell"] == 408 and q8["bytes_per_cell_f16"] == 768, q8["bytes_per_cell"]
assert mixed["kv_dtype"] == "k=q8_0,v=f16" and mixed["bytes_per_cell"] == 588, mixed["kv_dtype"]
assert sum(p["bytes"] for p in mixed["pools"]) == mixed["bytes_at_capacity"]
PY
[ "$(/usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tokens"]))' "$tmp/q8.json")" = 12 ] ||
  fail "run --kv-dtype q8_0 generated the wrong count"
expect_error 1 "^kvcache run: gguf: cannot open '/nonexistent/model.gguf': No such file or directory$" \
  /nonexistent/model.gguf

printf 'In the\n/undo\n/undo\nAnd\n/undo 2\n/reset\n/quit\nnever read\n' |
  "$bin" run --interactive --max-new-tokens 3 >"$tmp/out" 2>"$tmp/err"
grep -q "undo: back to position 0 (0 turn(s) left)" "$tmp/err" || { cat "$tmp/err"; fail "undo"; }
grep -q "undo refused: undo 1: 0 turn(s) to undo" "$tmp/err" || { cat "$tmp/err"; fail "undo refusal"; }
grep -q "undo refused: undo 2" "$tmp/err" || { cat "$tmp/err"; fail "undo 2 refusal"; }
grep -q "reset: the conversation is empty" "$tmp/err" || { cat "$tmp/err"; fail "reset"; }
# Undo past the ring (all layers sliding(4); the long second turn moves the rings past the
# first) and a refused turn (too long for --capacity 24) leave the conversation exactly as a
# run without that turn: the third turn's greedy tokens and position agree, in both layouts.
turns() {  # prints "tokens position" per turn of an interactive --json run
  "$bin" run --interactive --json --max-new-tokens 2 "$@" 2>"$tmp/err" |
    /usr/bin/python3 -c 'import sys, json
for l in sys.stdin: j = json.loads(l); print(j["tokens"], j["position"])'
}
long='In the beginning God created the heaven and the earth'
for kind in sequence cell; do
  printf 'ab\nc\n/quit\n' | turns --cache $kind --windows 4 >"$tmp/want"
  printf 'ab\n%s\n/undo\nc\n/quit\n' "$long" | turns --cache $kind --windows 4 >"$tmp/got"
  grep -q "undo: back to position 3 (1 turn(s) left)" "$tmp/err" || { cat "$tmp/err"; fail "ring undo $kind"; }
  [ "$(sed -n '1p;3p' "$tmp/got")" = "$(cat "$tmp/want")" ] || fail "undo past the ring ($kind)"
  printf 'ab\nc\n/quit\n' | turns --cache $kind --capacity 24 --windows 0,4 >"$tmp/want"
  printf 'ab\n%s\nc\n/quit\n' "$long" | turns --cache $kind --capacity 24 --windows 0,4 >"$tmp/got"
  grep -q "kvcache run: the prompt is .* tokens after the conversation.s 3, but the cache holds 24 positions; raise --capacity" "$tmp/err" || { cat "$tmp/err"; fail "refused turn $kind"; }
  cmp -s "$tmp/got" "$tmp/want" || fail "a refused turn changed the conversation ($kind)"
done
# --undo-turns 1: only the newest turn keeps its start; an older one past the rings is refused
# naming the flag and changes nothing; the kept one and the one at position 0 still undo.
expect_error 2 "^--undo-turns: Value -1 not in range 0 to 65536$" --undo-turns -1
for kind in sequence cell; do
  printf 'ab\n%s\n%s\n/undo 2\n/undo\n/undo 2\n/quit\n' "$long" "$long" |
    turns --cache $kind --windows 4 --undo-turns 1 >"$tmp/got"
  grep -q "^undo history: the last 1 turn(s) keep their start (--undo-turns)" "$tmp/err" ||
    { cat "$tmp/err"; fail "undo summary $kind"; }
  grep -q "undo refused: undo 2: cannot return to position 3 .*that turn's saved start was released (the session keeps it for the last 1 turn(s)) -- raise --undo-turns" "$tmp/err" ||
    { cat "$tmp/err"; fail "released undo $kind"; }
  second=$(sed -n 2p "$tmp/got" | awk '{print $NF}')
  grep -q "undo: back to position $second (2 turn(s) left)" "$tmp/err" || { cat "$tmp/err"; fail "kept undo $kind"; }
  grep -q "undo: back to position 0 (0 turn(s) left)" "$tmp/err" || { cat "$tmp/err"; fail "undo to 0 $kind"; }
done
printf 'ab\n%s\n%s\n/quit\n' "$long" "$long" | "$bin" run --interactive --json --max-new-tokens 2 \
  --windows 4 --undo-turns 1 2>"$tmp/err" |
  /usr/bin/python3 -c 'import sys, json
u = [json.loads(l)["undo"] for l in sys.stdin]
assert [x["turns"] for x in u] == [1, 2, 3] and all(x["turns_kept"] == 1 for x in u), u
assert u[2]["checkpoint_bytes"] > 0 and u[2]["forks"] == 0, u' || fail "run --json undo cost"
# --kv-memory: the largest capacity whose K/V fits. The embedded model at f32: 2 full caches of
# 2 heads x 32 (512 B per cell each) and 2 Sliding(32) caches of 1 x 32 (256 B) holding a ring
# of 32 + 16 - 1 = 47 slots: 1024 C + 512 x 47 <= 102400 -> C = 76.
json --kv-memory 100KiB > "$tmp/budget.json"
/usr/bin/python3 -c 'import sys, json
c = json.load(open(sys.argv[1]))["cache"]
assert c["capacity"] == 76 and c["bytes_at_capacity"] == 1024 * 76 + 512 * 47, c
assert c["kv_memory"] == {"budget": 102400, "bytes": 101888, "capacity": 76, "sessions": 1}, c
' "$tmp/budget.json" || fail "run --kv-memory 100KiB"
expect_error 2 "^kvcache run: --kv-memory: cache options: kv_memory = 1000 bytes holds no cache: capacity 1 (sequence layout, k_dtype f32, v_dtype f32) needs 1536 bytes of K/V$" --kv-memory 1000
expect_error 2 "^--capacity excludes --kv-memory$" --kv-memory 1MiB --capacity 8
expect_error 2 "^--kv-memory: \"1.5\" is not a whole number of bytes$" --kv-memory 1.5
echo "run CLI: all checks passed"
