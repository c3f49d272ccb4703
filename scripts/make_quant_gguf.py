"""A tiny random llama GGUF whose matrices are Q8_0, Q4_K or MXFP4 blocks, written by gguf_py's
own numpy encoders (independent of kvcache's C++ writer), for the engine's quantized-file tests.

  /usr/bin/python3 scripts/make_quant_gguf.py --type q4_k|q8_0|mxfp4 --out m.gguf [--raw-q3k NAME]

--raw-q3k NAME stores tensor NAME as zero bytes of type Q3_K (ggml type 11), a type kvcache
reads the metadata of but does not compute with. Vectors (norms) stay F32; matrices are
[out, in] with in = 256 or 512 (whole Q4_K super-blocks).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

TYPES = {"q8_0": gguf_py.GGML_Q8_0, "q4_k": gguf_py.GGML_Q4_K, "mxfp4": gguf_py.GGML_MXFP4}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", choices=list(TYPES), required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--raw-q3k", default=None, help="tensor to store as raw Q3_K bytes")
    args = ap.parse_args()
    d, ff, heads, kv_heads, hd, vocab = 256, 512, 4, 2, 64, 300
    rng = np.random.default_rng(args.seed)
    g = gguf_py.GGUFWriter()
    a = "llama."
    g.add_string("general.architecture", "llama")
    g.add_string("general.name", f"kvcache-tiny-{args.type}")
    g.add_uint32(a + "block_count", args.layers)
    g.add_uint32(a + "context_length", 256)
    g.add_uint32(a + "embedding_length", d)
    g.add_uint32(a + "feed_forward_length", ff)
    g.add_uint32(a + "attention.head_count", heads)
    g.add_uint32(a + "attention.head_count_kv", kv_heads)
    g.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-5)
    g.add_float32(a + "rope.freq_base", 10000.0)

    def mat(name, out, inp, std=None):
        w = rng.standard_normal((out, inp)).astype(np.float32) * (std or 1.0 / np.sqrt(inp))
        if name == args.raw_q3k:
            per, size = gguf_py.BLOCKS[11]
            g.add_raw_tensor(name, (out, inp), 11, bytes(out * inp // per * size))
        else:
            g.add_quantized_tensor(name, w, TYPES[args.type])

    def norm(name, n):
        g.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", vocab, d, std=1.0)
    for i in range(args.layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", d)
        mat(p + "attn_q.weight", heads * hd, d)
        mat(p + "attn_k.weight", kv_heads * hd, d)
        mat(p + "attn_v.weight", kv_heads * hd, d)
        mat(p + "attn_output.weight", d, heads * hd)
        norm(p + "ffn_norm.weight", d)
        mat(p + "ffn_gate.weight", ff, d)
        mat(p + "ffn_up.weight", ff, d)
        mat(p + "ffn_down.weight", d, ff)
    norm("output_norm.weight", d)
    mat("output.weight", vocab, d)
    g.write(args.out)


if __name__ == "__main__":
    main()
