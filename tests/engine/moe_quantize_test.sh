#!/usr/bin/env bash
# `kvcache quantize` on a mixture of experts (scripts/make_arch_model.py qwen3moe, F32): the
# routers (ffn_gate_inp) and norms stay F32, the 3-D expert stacks are encoded row by row
# (Q8_0, shape kept), and with 8 experts attn_k/attn_v get Q8_0 even in q4_0; the q8_0 file's
# logits, and the mxfp4 file's (MXFP4 expert stacks), match scripts/reference_forward.py (its
# own numpy decoders) within 3e-2 of the logit scale (the int8 activations of the block
# products, as for dense files); q4_0 runs.
# Usage: moe_quantize_test.sh KVCACHE_BIN REPO_DIR
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3
ids=3,17,42,99,5,250,7,7,128,64,1,299,33,8
"$py" "$repo/scripts/make_arch_model.py" --arch qwen3moe --out "$tmp/f32.gguf" >/dev/null
"$bin" quantize "$tmp/f32.gguf" "$tmp/q8.gguf" --type q8_0 2>/dev/null
"$bin" quantize "$tmp/f32.gguf" "$tmp/q4.gguf" --type q4_0 2>/dev/null
"$py" - "$repo/scripts" "$tmp/q8.gguf" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import gguf_py
g = gguf_py.read(sys.argv[2])
F32, Q8_0 = 0, 8
t = g.tensor_types
for i in range(3):
    p = f"blk.{i}."
    assert t[p + "ffn_gate_inp.weight"] == F32, t[p + "ffn_gate_inp.weight"]
    assert t[p + "ffn_norm.weight"] == F32
    for s in ("gate", "up", "down"):
        assert t[p + f"ffn_{s}_exps.weight"] == Q8_0, (s, t[p + f"ffn_{s}_exps.weight"])
assert g.tensors["blk.0.ffn_down_exps.weight"].shape == (8, 64, 32)
print("moe quantize q8_0: routers and norms F32, expert stacks Q8_0 [8, 64, 32]")
PY
against_reference() {  # against_reference MIX: the MIX file's logits vs the numpy reference
  "$bin" run "$tmp/$1.gguf" --max-step-tokens 16 --prompt-ids "$ids" --max-new-tokens 0 \
    --dump-logits "$tmp/got.npy" 2>/dev/null
  "$py" "$repo/scripts/reference_forward.py" --model "$tmp/$1.gguf" --tokens "$ids" \
    --out "$tmp/ref.npy" >/dev/null
  "$py" - "$tmp/got.npy" "$tmp/ref.npy" "$1" <<'PY'
import sys
import numpy as np
got, want = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2])
rel = np.abs(got - want).max() / max(1.0, np.abs(want).max())
print(f"moe quantize {sys.argv[3]}: max abs diff relative to logit scale = {rel:.3e}")
sys.exit(0 if got.shape == want.shape and rel <= 3e-2 else 1)
PY
}
against_reference q8
"$bin" quantize "$tmp/f32.gguf" "$tmp/mxfp4.gguf" --type mxfp4 2>/dev/null
against_reference mxfp4
"$py" - "$repo/scripts" "$tmp/q4.gguf" <<'PY'
import struct, sys
# The Python reader decodes no Q4_0: read the tensor types from the header alone.
sys.path.insert(0, sys.argv[1])
import gguf_py
buf = open(sys.argv[2], "rb").read()
n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)  # after magic and version
cur = gguf_py._Cursor(buf)
cur.pos = 24
reader = gguf_py.GGUFFile.__new__(gguf_py.GGUFFile)  # only its value parser
for _ in range(n_kv):
    key = cur.string("key")
    reader._read_value(cur, cur.unpack("<I", "type"), key)
types = {}
for _ in range(n_tensors):
    name = cur.string("name")
    nd = cur.unpack("<I", "nd")
    for _ in range(nd):
        cur.unpack("<Q", "dim")
    types[name] = cur.unpack("<I", "type")
    cur.unpack("<Q", "offset")
Q4_0, Q8_0, F32 = 2, 8, 0
assert types["blk.1.attn_v.weight"] == Q8_0 and types["blk.1.attn_k.weight"] == Q8_0, types
assert types["blk.1.attn_q.weight"] == Q4_0 and types["blk.1.ffn_up_exps.weight"] == Q4_0, types
assert types["blk.1.ffn_gate_inp.weight"] == F32, types
print("moe quantize q4_0: experts Q4_0, attn_k/attn_v Q8_0 (8 experts), routers F32")
PY
"$bin" run "$tmp/q4.gguf" --prompt-ids "$ids" --max-new-tokens 4 --json >"$tmp/q4.json" 2>/dev/null
"$py" -c "import json,sys; j=json.load(open(sys.argv[1])); assert len(j['tokens']) == 4, j" \
  "$tmp/q4.json"
echo "moe quantize: ok"
