#!/usr/bin/env bash
# `kvcache quantize` end to end: the repository's tiny model re-encoded as q8_0 and q4_k_m;
# the q8_0 file's logits (one prefill chunk of 14 tokens: at most kSmallBatch rows run the int8
# decode kernels, tolerance 3e-2 as for decode) against scripts/reference_forward.py, which
# decodes the file with its own numpy code; q4_k_m runs; re-quantizing a quantized file and an unknown
# --type are refused with the reason.
# Usage: quantize_cli_test.sh KVCACHE_BIN REPO_DIR
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
ids=3,17,42,99,5,25,7,7,128,64,1,29,33,8
"$bin" quantize "$repo/models/tiny.gguf" "$tmp/q8.gguf" --type q8_0 2>/dev/null
"$bin" quantize "$repo/models/tiny.gguf" "$tmp/q4km.gguf" --type q4_k_m 2>/dev/null
"$bin" run "$tmp/q8.gguf" --max-step-tokens 16 --prompt-ids "$ids" --max-new-tokens 0 \
  --dump-logits "$tmp/got.npy" 2>/dev/null
$py "$repo/scripts/reference_forward.py" --model "$tmp/q8.gguf" --tokens "$ids" --out "$tmp/ref.npy" >/dev/null
$py - "$tmp/got.npy" "$tmp/ref.npy" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2])
rel = np.abs(got - want).max() / max(1.0, np.abs(want).max())
print(f"quantize q8_0: max abs diff relative to logit scale = {rel:.3e}")
sys.exit(0 if got.shape == want.shape and rel <= 3e-2 else 1)
PY
"$bin" run "$tmp/q4km.gguf" --prompt-ids "$ids" --max-new-tokens 4 >/dev/null 2>&1
# refused PATTERN args...: `kvcache quantize args...` exits 1 with PATTERN on stderr.
refused() {
  local pattern=$1 rc=0
  shift
  "$bin" quantize "$@" 2>"$tmp/err" || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/err"; echo "quantize $*: exit $rc, expected 1 (refused)"; exit 1; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err"; echo "quantize $*: no '$pattern'"; exit 1; }
}
refused "tensor 'token_embd.weight' is already Q8_0" "$tmp/q8.gguf" "$tmp/again.gguf" --type q4_0
refused "^kvcache quantize: --type = 'q3_k', expected q8_0, q4_0, q4_k_m, q5_k_m, q6_k or mxfp4$" \
  "$repo/models/tiny.gguf" "$tmp/x.gguf" --type q3_k
echo "quantize cli: ok"
