#!/usr/bin/env bash
# qwen2 end to end against the independent Python float64 reference: a random-weight GGUF with
# llama.cpp's tensor names and Qwen2's traits (biases on q/k/v, rotate-half RoPE with base 1e6,
# grouped kv heads, head_count * key_length != embedding_length, output tied to the embedding
# when --tied) is run by `kvcache run --dump-logits` through both cache layouts in chunks of 3,
# and every position's logits must match scripts/reference_forward.py within 1e-4 of the logit
# scale. Biases of std 0.5 move the logits far more than that, so a dropped bias fails.
# Usage: qwen2_golden.sh KVCACHE_BIN REPO_DIR [--tied]
set -euo pipefail
bin=$1; repo=$2; tied=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
ids=3,17,42,99,5,250,7,7,128,64,1,299,33,8,200,11,256,90,45,12
"$py" - "$repo/scripts" "$tmp/model.gguf" "$tied" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import gguf_py
out, tied = sys.argv[2], sys.argv[3] == "--tied"
layers, d, ff, vocab, heads, kv_heads, dk = 3, 40, 64, 300, 4, 2, 12
rng = np.random.default_rng(2)
w = gguf_py.GGUFWriter()
a = "qwen2."
w.add_string("general.architecture", "qwen2")
w.add_string("general.name", "random qwen2")
for key, v in [("block_count", layers), ("context_length", 256), ("embedding_length", d),
               ("feed_forward_length", ff), ("attention.head_count", heads),
               ("attention.head_count_kv", kv_heads), ("attention.key_length", dk),
               ("attention.value_length", dk)]:
    w.add_uint32(a + key, v)
w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-6)
w.add_float32(a + "rope.freq_base", 1000000.0)
mat = lambda o, i: (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
vec = lambda n, s: (s * rng.standard_normal(n)).astype(np.float32)
w.add_tensor("token_embd.weight", rng.standard_normal((vocab, d)).astype(np.float32))
for i in range(layers):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", 1.0 + vec(d, 0.1))
    for name, rows in [("attn_q", heads * dk), ("attn_k", kv_heads * dk), ("attn_v", kv_heads * dk)]:
        w.add_tensor(p + name + ".weight", mat(rows, d))
        w.add_tensor(p + name + ".bias", vec(rows, 0.5))
    w.add_tensor(p + "attn_output.weight", mat(d, heads * dk))
    w.add_tensor(p + "ffn_norm.weight", 1.0 + vec(d, 0.1))
    w.add_tensor(p + "ffn_gate.weight", mat(ff, d))
    w.add_tensor(p + "ffn_up.weight", mat(ff, d))
    w.add_tensor(p + "ffn_down.weight", mat(d, ff))
w.add_tensor("output_norm.weight", 1.0 + vec(d, 0.1))
if not tied:
    w.add_tensor("output.weight", mat(vocab, d))
w.write(out)
PY
"$py" "$repo/scripts/reference_forward.py" --model "$tmp/model.gguf" --tokens "$ids" \
  --out "$tmp/ref.npy" >/dev/null
for kind in sequence cell; do
  "$bin" run "$tmp/model.gguf" --cache "$kind" --max-step-tokens 3 --prompt-ids "$ids" \
    --dump-logits "$tmp/eng_$kind.npy" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  "$py" - "$tmp/eng_$kind.npy" "$tmp/ref.npy" "qwen2${tied:+ tied}/$kind" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2])
assert got.shape == want.shape == (20, 300), (got.shape, want.shape)
rel = np.abs(got - want).max() / max(1.0, np.abs(want).max())
print(f"{sys.argv[3]}: max abs diff relative to logit scale = {rel:.3e}")
sys.exit(0 if rel <= 1e-4 else 1)
PY
done
