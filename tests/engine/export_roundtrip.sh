#!/usr/bin/env bash
# Export -> run round trip: a tiny random HF checkpoint (scripts/make_tiny_hf.py) is exported
# with `kvcache export`, run by the engine (`kvcache run --dump-logits`), and the logits are
# compared with the script's float64 HF-convention reference.
# Usage: export_roundtrip.sh KVCACHE_BIN REPO_DIR ARCH [extra make_tiny_hf flags...]
set -euo pipefail
bin=$1; repo=$2; arch=$3; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids=3,17,42,99,5,250,7,7,128,64,1,299,33,8,200,11
/usr/bin/python3 "$repo/scripts/make_tiny_hf.py" --out "$tmp/hf" --arch "$arch" --tokens "$ids" \
  --logits-out "$tmp/ref.npy" "$@" >/dev/null
"$bin" export --from-hf "$tmp/hf" --out "$tmp/model.gguf" >/dev/null
for kind in sequence cell; do
  "$bin" run "$tmp/model.gguf" --cache "$kind" --max-step-tokens 5 --prompt-ids "$ids" \
    --dump-logits "$tmp/eng_$kind.npy" 2>/dev/null
  /usr/bin/python3 - "$tmp/eng_$kind.npy" "$tmp/ref.npy" "$arch/$kind" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2])
assert got.shape == want.shape, (got.shape, want.shape)
rel = np.abs(got - want).max() / max(1.0, np.abs(want).max())
print(f"{sys.argv[3]}: max abs diff relative to logit scale = {rel:.3e}")
sys.exit(0 if rel <= 1e-4 else 1)
PY
done
