"""Write a random-weight llama GGUF of the benchmark model's shape (bench/common/bench_model.h).

d_model 768, 12 layers, 12 q heads / 4 kv heads of 64 (GQA group 3), ff 2048, vocab 32000,
tied embeddings, F16 matrices drawn uniformly from +-1.7/sqrt(fan_in), unit norms, context
512. No tokenizer keys unless --vocab names a vocabulary-only GGUF (32000 tokens, e.g. the
Llama 2 SentencePiece one in ../shared/fixtures/vocab), whose tokenizer.* keys are copied: then
text prompts work and another engine reads the same file. The benchmarks build the same shape in C++
with their own generator; this file is for the CLI (docs/perplexity.md measures K/V types on
it). The weights differ from the benchmarks' (another generator); the shape is the same.

  /usr/bin/python3 scripts/make_bench_model.py --out /tmp/bench.gguf [--outliers 8] [--vocab V.gguf]
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

HEAD_DIM, VOCAB = 64, 32000


def copy_tokenizer(path, w):
    v = gguf_py.read(path)
    tokens = v.kv.get("tokenizer.ggml.tokens")
    if tokens is None or len(tokens) != VOCAB:
        sys.exit(f"--vocab {path}: {0 if tokens is None else len(tokens)} tokens, expected {VOCAB}")
    for k, val in v.kv.items():
        if k.startswith("tokenizer."):
            t, e = v.kv_types[k]
            w._add(k, t, val, e)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--outliers", type=float, default=1.0,
                    help="scale two K and two V channels of every kv head by this (as trained "
                         "models' outlier channels; 1 = none)")
    ap.add_argument("--vocab", help="a vocabulary-only GGUF whose tokenizer.* keys to copy")
    ap.add_argument("--d-model", type=int, default=768,
                    help="width (a multiple of 192: heads of 64, GQA group 3); with --layers and "
                         "--ff a larger model of the same family, e.g. 1536 / 24 / 4096 (650M "
                         "parameters), whose decode is bound by reading its weights")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--ff", type=int, default=2048)
    args = ap.parse_args()
    if args.d_model % (3 * HEAD_DIM):
        sys.exit(f"--d-model {args.d_model}: expected a multiple of {3 * HEAD_DIM}")
    D, LAYERS, FF = args.d_model, args.layers, args.ff
    HEADS = D // HEAD_DIM
    KV_HEADS = HEADS // 3
    rng = np.random.default_rng(args.seed)
    w = gguf_py.GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "random llama, benchmark shape" if (D, LAYERS, FF) == (768, 12, 2048)
                 else f"random llama, d {D}, {LAYERS} layers, ff {FF}")
    for key, v in (("block_count", LAYERS), ("context_length", args.context),
                   ("embedding_length", D), ("feed_forward_length", FF),
                   ("attention.head_count", HEADS), ("attention.head_count_kv", KV_HEADS)):
        w.add_uint32("llama." + key, v)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    if args.vocab:
        copy_tokenizer(args.vocab, w)

    def mat(rows, cols):
        s = 1.7 / np.sqrt(cols)
        return rng.uniform(-s, s, (rows, cols)).astype(np.float16)

    def outlying(m, channels):
        for h in range(KV_HEADS):
            for c in channels:
                m[h * HEAD_DIM + c] *= np.float16(args.outliers)
        return m

    ones = np.ones(D, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(VOCAB, D))
    for i in range(LAYERS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", mat(HEADS * HEAD_DIM, D))
        w.add_tensor(p + "attn_k.weight", outlying(mat(KV_HEADS * HEAD_DIM, D), (3, 17)))
        w.add_tensor(p + "attn_v.weight", outlying(mat(KV_HEADS * HEAD_DIM, D), (5, 40)))
        w.add_tensor(p + "attn_output.weight", mat(D, HEADS * HEAD_DIM))
        w.add_tensor(p + "ffn_gate.weight", mat(FF, D))
        w.add_tensor(p + "ffn_up.weight", mat(FF, D))
        w.add_tensor(p + "ffn_down.weight", mat(D, FF))
    w.add_tensor("output_norm.weight", ones)
    w.write(args.out)


if __name__ == "__main__":
    main()
