#!/usr/bin/env bash
# `kvcache quantize --type MIX` for one mix: a random-weight llama file whose rows are whole
# 256-value blocks (so no tensor falls back) is quantized; every tensor's type in the output,
# read from the GGUF header here, is what docs/model_format.md promises for the mix (vectors
# F32; output.weight Q6_K except q8_0 and mxfp4 (Q8_0); attn_v/ffn_down Q6_K in the "more
# bits" layers 2 and 3 of 4 for the _M mixes; the rest the mix's base type); the output runs, and its logits stay within
# the mix's bound of the f32 file's (relative RMS difference; the bounds are 1.5x what was
# measured, and ordered as the bits are).
# Usage: quantize_types_test.sh KVCACHE_BIN REPO_DIR MIX
set -euo pipefail
bin=$1; repo=$2; mix=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
ids=3,17,42,99,5,250,7,7,128,64,1,299,33,8,200,11
"$py" - "$repo/scripts" "$tmp/f32.gguf" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import gguf_py
layers, d, ff, vocab, heads, kv_heads, dk = 4, 256, 512, 300, 4, 2, 64
rng = np.random.default_rng(5)
w = gguf_py.GGUFWriter()
a = "llama."
w.add_string("general.architecture", "llama")
w.add_string("general.name", "random llama for quantize")
for key, v in [("block_count", layers), ("context_length", 256), ("embedding_length", d),
               ("feed_forward_length", ff), ("attention.head_count", heads),
               ("attention.head_count_kv", kv_heads)]:
    w.add_uint32(a + key, v)
w.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-5)
mat = lambda o, i: (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
norm = lambda n: (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)
w.add_tensor("token_embd.weight", rng.standard_normal((vocab, d)).astype(np.float32))
for i in range(layers):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", norm(d))
    w.add_tensor(p + "attn_q.weight", mat(heads * dk, d))
    w.add_tensor(p + "attn_k.weight", mat(kv_heads * dk, d))
    w.add_tensor(p + "attn_v.weight", mat(kv_heads * dk, d))
    w.add_tensor(p + "attn_output.weight", mat(d, heads * dk))
    w.add_tensor(p + "ffn_norm.weight", norm(d))
    w.add_tensor(p + "ffn_gate.weight", mat(ff, d))
    w.add_tensor(p + "ffn_up.weight", mat(ff, d))
    w.add_tensor(p + "ffn_down.weight", mat(d, ff))
w.add_tensor("output_norm.weight", norm(d))
w.add_tensor("output.weight", mat(vocab, d))
w.write(sys.argv[2])
PY
"$bin" quantize "$tmp/f32.gguf" "$tmp/q.gguf" --type "$mix" 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; exit 1; }
"$py" - "$repo/scripts" "$tmp/q.gguf" "$mix" <<'PY'
import struct
import sys
sys.path.insert(0, sys.argv[1])
import gguf_py
path, mix = sys.argv[2], sys.argv[3]
# ggml type ids
F32, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4 = 0, 2, 8, 12, 13, 14, 39
names = {0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
         39: "MXFP4"}
base = {"q8_0": Q8_0, "q4_0": Q4_0, "q4_k_m": Q4_K, "q5_k_m": Q5_K, "q6_k": Q6_K,
        "mxfp4": MXFP4}[mix]
file_type = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18, "mxfp4": 38}[mix]
# The header only (the reader here decodes no K types): kv pairs, then tensor infos.
buf = open(path, "rb").read()
cur = gguf_py._Cursor(buf)
assert cur.take(4, "magic") == b"GGUF"
assert cur.unpack("<I", "version") == 3
n_tensors, n_kv = cur.unpack("<Q", "tensors"), cur.unpack("<Q", "kv")
reader = gguf_py.GGUFFile.__new__(gguf_py.GGUFFile)
kv = {}
for _ in range(n_kv):
    key = cur.string("key")
    kv[key] = reader._read_value(cur, cur.unpack("<I", "type"), key)
types = {}
for _ in range(n_tensors):
    name = cur.string("name")
    nd = cur.unpack("<I", "n_dims")
    for _ in range(nd):
        cur.unpack("<Q", "dim")
    types[name] = cur.unpack("<I", "type")
    cur.unpack("<Q", "offset")
problems = []
if kv.get("general.file_type") != file_type:
    problems.append(f"general.file_type = {kv.get('general.file_type')}, expected {file_type}")
if kv.get("general.quantization_version") != 2:
    problems.append(f"general.quantization_version = {kv.get('general.quantization_version')}")
m_mix = mix in ("q4_k_m", "q5_k_m")
for name, t in sorted(types.items()):
    if not name.endswith(".weight") or "norm" in name:
        want = F32
    elif name == "output.weight":
        want = Q8_0 if mix in ("q8_0", "mxfp4") else Q6_K
    elif m_mix and name.split(".")[-2] in ("attn_v", "ffn_down") and int(name.split(".")[1]) in (2, 3):
        want = Q6_K
    else:
        want = base
    if t != want:
        problems.append(f"{name}: {names.get(t, t)}, expected {names[want]}")
if len(types) != 2 + 4 * 9 + 1:
    problems.append(f"{len(types)} tensors, expected 39")
for p in problems:
    print(f"quantize {mix}: {p}")
print(f"quantize {mix}: tensor types " + ("differ" if problems else "as promised"))
sys.exit(1 if problems else 0)
PY
for f in f32 q; do
  "$bin" run "$tmp/$f.gguf" --max-step-tokens 4 --prompt-ids "$ids" --max-new-tokens 0 \
    --dump-logits "$tmp/$f.npy" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
done
"$py" - "$tmp/q.npy" "$tmp/f32.npy" "$mix" <<'PY'
import sys
import numpy as np
got, want, mix = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]), sys.argv[3]
# RMS of the difference over the RMS of the f32 logits. Four random layers pass the weights'
# rounding (and q8_0's int8 activations) on at several times its per-weight size; measured
# 2.1e-2 (q8_0), 5.7e-2 (q6_k), 1.08e-1 (q5_k_m), 2.0e-1 (q4_k_m), 2.26e-1 (q4_0), 3.0e-1
# (mxfp4) at every ISA ceiling: each bound is 1.5x its measure. A wrong block decoder gives ~1.
bound = {"q8_0": 0.032, "q6_k": 0.085, "q5_k_m": 0.16, "q4_k_m": 0.3, "q4_0": 0.34,
         "mxfp4": 0.45}[mix]
assert got.shape == want.shape == (16, 300), (got.shape, want.shape)
rel = np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2))
print(f"quantize {mix}: logits vs the f32 file, relative RMS difference = {rel:.3e} "
      f"(bound {bound})")
sys.exit(0 if 0 < rel <= bound else 1)
PY
# Where scripts/gguf_py.py decodes every type of the output (Q8_0, MXFP4), its own numpy
# decoder and float64 forward (scripts/reference_forward.py) on the quantized file agree with
# kvcache's logits of it within the int8 activations' tolerance (3e-2, python_quant_test.sh):
# the C++ encoder writes the bytes an independent reader expects.
if [[ $mix == q8_0 || $mix == mxfp4 ]]; then
  "$py" "$repo/scripts/reference_forward.py" --model "$tmp/q.gguf" --tokens "$ids" \
    --out "$tmp/ref.npy" >/dev/null
  "$py" - "$tmp/q.npy" "$tmp/ref.npy" "$mix" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2])
assert got.shape == want.shape, (got.shape, want.shape)
rel = np.abs(got - want).max() / max(1.0, np.abs(want).max())
print(f"quantize {sys.argv[3]}: kvcache vs the numpy decoder's float64 forward, max abs diff "
      f"relative to logit scale = {rel:.3e} (tolerance 3e-2)")
sys.exit(0 if rel <= 3e-2 else 1)
PY
fi
