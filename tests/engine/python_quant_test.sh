#!/usr/bin/env bash
# Quantized files from an independent writer: scripts/make_quant_gguf.py encodes a tiny llama
# as Q8_0, Q4_K or MXFP4 with its own numpy code; scripts/reference_forward.py decodes the same
# file with its own numpy code and computes float64 logits. kvcache runs the file (prefill in one
# chunk of 20 > kSmallBatch tokens: decoded tiles + sgemm, tolerance 1e-4 — but where the int8
# GEMM runs (below) it takes int8 activations like decode; then one token per
# step: int8 activations, tolerance 3e-2, see quant_matvec_test.cpp; the same with the file
# mapped in place, bit for bit). inspect names the stored types; it reads a file with a Q3_K
# tensor, which run refuses naming the tensor and the type.
# Usage: python_quant_test.sh KVCACHE_BIN REPO_DIR TYPE
set -euo pipefail
bin=$1; repo=$2; type=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
ids=3,17,42,99,5,250,7,7,128,64,1,299,33,8,200,11,19,23,29,31
$py "$repo/scripts/make_quant_gguf.py" --type "$type" --out "$tmp/m.gguf"
$py "$repo/scripts/reference_forward.py" --model "$tmp/m.gguf" --tokens "$ids" --out "$tmp/ref.npy" >/dev/null
check() {  # engine logits, tolerance, label
  $py - "$1" "$tmp/ref.npy" "$2" "$3" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2])
assert got.shape == want.shape, (got.shape, want.shape)
rel = np.abs(got - want).max() / max(1.0, np.abs(want).max())
print(f"{sys.argv[4]}: max abs diff relative to logit scale = {rel:.3e} (tolerance {sys.argv[3]})")
sys.exit(0 if rel <= float(sys.argv[3]) else 1)
PY
}
"$bin" run "$tmp/m.gguf" --max-step-tokens 20 --prompt-ids "$ids" --max-new-tokens 0 \
  --dump-logits "$tmp/prefill.npy" 2>/dev/null
# The int8 GEMM runs wherever an int8 level is in force (KVCACHE_ISA caps it): AVX-512 VNNI's
# own kernel for Q8_0 and MXFP4, the AVX2 kernel for every other block type (at the AVX-512
# level too); at scalar, decoded tiles + sgemm.
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { [[ " $flags " == *" $1 "* ]]; }
int8=scalar
if has avx2 && has fma && has f16c && [[ ${KVCACHE_ISA:-auto} != scalar ]]; then
  int8=avx2
fi
prefill_tol=1e-4
if [[ $int8 != scalar ]]; then
  prefill_tol=3e-2
fi
check "$tmp/prefill.npy" "$prefill_tol" "$type prefill"
"$bin" run "$tmp/m.gguf" --max-step-tokens 1 --prompt-ids "$ids" --max-new-tokens 0 \
  --dump-logits "$tmp/decode.npy" 2>/dev/null
check "$tmp/decode.npy" 3e-2 "$type decode"
# --map-weights maps the file in place instead of reading it into huge pages: same logits, bit
# for bit.
"$bin" run "$tmp/m.gguf" --max-step-tokens 1 --prompt-ids "$ids" --max-new-tokens 0 \
  --map-weights --dump-logits "$tmp/mapped.npy" 2>/dev/null
cmp "$tmp/decode.npy" "$tmp/mapped.npy" || { echo "--map-weights changed the logits"; exit 1; }
# inspect names the stored types: the 16 matrices in the file's type, the 5 norms F32.
upper=$(tr a-z A-Z <<<"$type")
"$bin" inspect "$tmp/m.gguf" >"$tmp/inspect.txt"
grep -q "^weights: 5 F32, 16 $upper (" "$tmp/inspect.txt" || { cat "$tmp/inspect.txt"; exit 1; }
"$bin" inspect "$tmp/m.gguf" --json | $py -c '
import json, sys
w = {e["type"]: e for e in json.load(sys.stdin)["weights"]}
assert w[sys.argv[1]]["tensors"] == 16 and w["F32"]["tensors"] == 5, w' "$upper"
$py "$repo/scripts/make_quant_gguf.py" --type "$type" --out "$tmp/q3k.gguf" \
  --raw-q3k blk.1.ffn_up.weight
"$bin" inspect "$tmp/q3k.gguf" >/dev/null
rc=0
"$bin" run "$tmp/q3k.gguf" --prompt-ids 1,2 --max-new-tokens 1 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/err"; echo "run on a Q3_K tensor exited $rc, expected 1 (refused)"; exit 1; }
grep -q "tensor blk.1.ffn_up.weight has type Q3_K" "$tmp/err" || { cat "$tmp/err"; exit 1; }
echo "$type: ok"
