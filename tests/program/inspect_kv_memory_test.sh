#!/usr/bin/env bash
# `kvcache inspect --kv-memory` on a Llama-3-8B-shaped file (32 layers, 8 KV heads of 128,
# context 131072; metadata only: inspect reads the geometry): K/V bytes per cell of q8_0 and
# q4_0 against f16 (34/64 and 18/64 exactly), the cells and sessions a 4 GiB budget buys per
# type, and the refusals (exit 2 naming --kv-memory).
# Usage: inspect_kv_memory_test.sh KVCACHE_BIN SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$py" - "$src/scripts" "$tmp/llama3.gguf" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import gguf_py
w = gguf_py.GGUFWriter()
w.add_string("general.architecture", "llama")
for k, v in (("block_count", 32), ("context_length", 131072), ("embedding_length", 4096),
             ("attention.head_count", 32), ("attention.head_count_kv", 8)):
    w.add_uint32("llama." + k, v)
w.write(sys.argv[2])
PY
m=$tmp/llama3.gguf
for t in f16 q8_0 q4_0; do
  "$bin" inspect "$m" --cache sequence --kv-dtype "$t" --kv-memory 4GiB --json > "$tmp/$t.json"
  "$bin" inspect "$m" --kv-dtype "$t" --kv-memory 4GiB --session-tokens 4096 --json \
    > "$tmp/s_$t.json"
done
"$bin" inspect "$m" --cache sequence --k-dtype q8_0 --v-dtype f16 --kv-memory 4GiB --json \
  > "$tmp/mixed.json"
"$py" - "$tmp" <<'PY'
import json, sys
from fractions import Fraction
d = sys.argv[1]
j = {t: json.load(open(f"{d}/{t}.json")) for t in ("f16", "q8_0", "q4_0", "mixed")}
s = {t: json.load(open(f"{d}/s_{t}.json")) for t in ("f16", "q8_0", "q4_0")}
# 32 layers x 8 heads x (K + V) rows of 128: f16 2 x 256 B, q8_0 2 x 4 x 34, q4_0 2 x 4 x 18.
per_cell = {"f16": 131072, "q8_0": 69632, "q4_0": 36864, "mixed": 32 * 8 * (136 + 256)}
for t, n in per_cell.items():
    assert j[t]["bytes_per_cell"] == n and j[t]["bytes_per_cell_f16"] == 131072, (t, j[t])
assert Fraction(per_cell["q8_0"], 131072) == Fraction(34, 64)  # 0.53125
assert Fraction(per_cell["q4_0"], 131072) == Fraction(18, 64)  # 0.28125
# 4 GiB = 2^32 bytes buys floor(2^32 / bytes per cell) cells: 32768, 61680, 116508, 42799.
cells = {"f16": 32768, "q8_0": 61680, "q4_0": 116508, "mixed": 42799}
for t, n in cells.items():
    assert j[t]["capacity"] == n, (t, j[t]["capacity"])
    assert j[t]["kv_memory"] == {"budget": 2**32, "bytes": n * per_cell[t], "capacity": n,
                                 "sessions": 1}, (t, j[t]["kv_memory"])
    assert j[t]["bytes_at_capacity"] <= 2**32 < (n + 1) * per_cell[t]
assert cells["q8_0"] / cells["f16"] >= 1.85, cells
# Sessions of 4096 tokens (the pool batch and serve build): 8, 15, 28.
for t, n in {"f16": 8, "q8_0": 15, "q4_0": 28}.items():
    assert s[t]["sessions"] == n and s[t]["capacity"] == 4096 * n, (t, s[t]["sessions"])
    assert s[t]["kv_memory"]["sessions"] == n and s[t]["max_seqs"] == 2 * n + 8, (t, s[t])
print("4 GiB of K/V: 32768 cells at f16, 61680 at q8_0, 116508 at q4_0; 8 / 15 / 28 sessions")
PY

expect() {  # expect CODE PATTERN ARGS...
  local want=$1 pattern=$2 rc=0
  shift 2
  "$bin" inspect "$m" "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  [ "$rc" = "$want" ] || { cat "$tmp/out" "$tmp/err" >&2; fail "exit $rc, expected $want: $*"; }
  grep -Eq -- "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "no '$pattern': $*"; }
}
expect 2 "^kvcache inspect: --kv-memory: cache options: kv_memory = 100000 bytes holds no cache: \
capacity 1 \(cell layout, k_dtype f16, v_dtype f16\) needs 131072 bytes of K/V$" \
  --kv-dtype f16 --kv-memory 100000
expect 2 "^--kv-memory: \"4XB\" has an unknown unit \"XB\"" --kv-memory 4XB
expect 2 "^--kv-memory: \"-1GiB\" is not a size" --kv-memory=-1GiB
expect 2 "^--kv-memory: \"0\" is 0 bytes, expected > 0$" --kv-memory 0
expect 2 "^--kv-memory: \"99999999999GiB\" is more than 2\^63 - 1 bytes$" --kv-memory 99999999999GiB
expect 2 "--kv-memory excludes --capacity|--capacity excludes --kv-memory" --kv-memory 4GiB --capacity 64
expect 2 "--kv-memory excludes --sessions|--sessions excludes --kv-memory" --kv-memory 4GiB --sessions 4
echo "PASS"
