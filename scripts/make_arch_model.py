"""Random-weight GGUF test models for the architectures beyond plain llama/qwen.

Writes a small file for one of:
  gemma2          alternating sliding window from layer 0, soft-caps, post-norms, GELU-tanh MLP
  gemma3          5 sliding : 1 full, q/k norms, rope.freq_base on full layers (+ linear
                  scaling), 10000 on sliding layers
  llama-rope-freqs  llama with a rope_freqs.weight tensor (Llama 3.1 per-pair divisors)
  qwen3moe        mixture of experts: router ffn_gate_inp, 8 experts of which 3 are used,
                  3-D ffn_{gate,up,down}_exps stacks, expert_feed_forward_length, q/k norms
  qwen3moe-a3b    the same at Qwen3-30B-A3B's layer shape, 2 layers (benchmarks)
  llama-moe       Mixtral's layout: llama with expert_count 8, expert_used_count 2, the expert
                  width in feed_forward_length
  llama-swa       llama with sliding_window 5 and sliding_window_pattern 2 (layers 0 and 2
                  slide, 1 and 3 are full: gpt-oss's alternation)
  llama-yarn      llama-swa with YaRN RoPE as gpt-oss's keys give it (rope.scaling.type yarn,
                  factor 32, original_context_length 4096, freq_base 150000, head width 16)
  gpt-oss         4 layers alternating Sliding(5) (even) / full, learned attn_sinks per query
                  head, q/k/v/output biases, 4 experts of which 2 are used with router and
                  expert biases (ffn_*_exps.bias [experts, width]), the MLP input norm named
                  post_attention_norm, YaRN RoPE (factor 32, original context 4096); gate and
                  up weights scaled so that the clamps at +-7 of its activation are reached;
                  --mxfp4 stores the expert stacks as MXFP4
  gpt-oss-20b     the same at gpt-oss-20b's layer shape, 2 layers, vocabulary 32000
                  (benchmarks)
--sinks adds blk.N.attn_sinks.weight (one f32 logit per query head, learned attention sinks)
to every layer of any of them.
with llama.cpp's key and tensor names and no kvcache.* keys, so the cache geometry must be
derived from the architecture. Norm weights hold the final multiplier (llama.cpp's converter
stores Gemma's 1 + w). No tokenizer keys: ids are raw bytes (vocab >= 256).

  /usr/bin/python3 scripts/make_arch_model.py --arch gemma3 --out /tmp/g3.gguf
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

# Shapes per architecture. head_count * key_length differs from embedding_length on purpose.
CONFIGS = {
    "gemma2": dict(arch="gemma2", layers=4, d=48, ff=64, vocab=300, heads=4, kv_heads=2, dk=16,
                   eps=1e-6, base=10000.0, window=6, attn_cap=1.5, final_cap=3.0),
    "gemma3": dict(arch="gemma3", layers=7, d=48, ff=64, vocab=300, heads=4, kv_heads=2, dk=16,
                   eps=1e-6, base=1000000.0, window=5, linear=4.0, qk_norm=True),
    "llama-rope-freqs": dict(arch="llama", layers=3, d=32, ff=48, vocab=300, heads=4,
                             kv_heads=2, dk=8, eps=1e-5, base=10000.0, rope_freqs=True),
    # feed_forward_length 96 is the dense width Qwen3-MoE files also carry; the experts use
    # expert_feed_forward_length. Widths are multiples of 32 so that `kvcache quantize` can
    # encode every matrix as Q8_0 / Q4_0.
    "qwen3moe": dict(arch="qwen3moe", layers=3, d=64, ff=96, vocab=300, heads=6, kv_heads=2,
                     dk=16, eps=1e-6, base=1000000.0, qk_norm=True, experts=8, used=3,
                     expert_ff=32),
    # Qwen3-30B-A3B's published layer (d 2048, 32 heads / 4 kv of 128, 128 experts of 768, 8
    # used) in 2 layers, vocabulary 32000: a file for MoE benchmarks side by side with other
    # engines; --f16, then `kvcache quantize` (1.35B parameters: 2.7 GB as F16).
    "qwen3moe-a3b": dict(arch="qwen3moe", layers=2, d=2048, ff=6144, vocab=32000, heads=32,
                         kv_heads=4, dk=128, eps=1e-6, base=1000000.0, qk_norm=True,
                         experts=128, used=8, expert_ff=768),
    "llama-moe": dict(arch="llama", layers=3, d=32, ff=40, vocab=300, heads=4, kv_heads=2,
                      dk=8, eps=1e-5, base=10000.0, experts=8, used=2),
    "llama-swa": dict(arch="llama", layers=4, d=32, ff=48, vocab=300, heads=4, kv_heads=2, dk=8,
                      eps=1e-5, base=10000.0, window=5, pattern=2),
    "llama-yarn": dict(arch="llama", layers=4, d=32, ff=48, vocab=300, heads=4, kv_heads=2, dk=16,
                       eps=1e-5, base=150000.0, window=5, pattern=2, yarn=32.0, yarn_ctx=4096),
    # gpt-oss-20b publishes 24 layers, d 2880, 64 heads / 8 kv of 64, window 128, 32 experts
    # (4 used) of 2880, base 150000, YaRN x32 from 4096. Here: small, window 5, rope_dim 16
    # so that YaRN's ramp (pairs 2..5 of 8) lies inside the rotated pairs.
    "gpt-oss": dict(arch="gpt-oss", layers=4, d=64, ff=32, vocab=300, heads=4, kv_heads=2,
                    dk=16, eps=1e-5, base=150000.0, window=5, experts=4, used=2, expert_ff=32,
                    yarn=32.0, yarn_ctx=4096, gpt_oss=True),
    # gpt-oss-20b's published layer (d 2880, 64 heads / 8 kv of 64, window 128, 32 experts of
    # 2880 with 4 used, YaRN x32 from 4096, base 150000) in 2 layers (one sliding, one full) and
    # a vocabulary of 32000 (its 201088 rows would outweigh two layers' experts): a file for
    # MoE benchmarks side by side with other engines; --f16 --mxfp4 --context 32768.
    "gpt-oss-20b": dict(arch="gpt-oss", layers=2, d=2880, ff=2880, vocab=32000, heads=64,
                        kv_heads=8, dk=64, eps=1e-5, base=150000.0, window=128, experts=32,
                        used=4, expert_ff=2880, yarn=32.0, yarn_ctx=4096, gpt_oss=True),
}


def add_experts(w, p, c, mat, rng, mxfp4=False):
    """A mixture-of-experts MLP with llama.cpp's names: the router ffn_gate_inp [experts, d]
    (f32, as converters keep it) and the experts stacked in 3-D tensors of numpy shape
    [experts, out, in] (GGUF dims [in, out, experts]). Router logits of about unit scale times
    2 keep the top-k choice far from ties. gpt-oss: biases on router and experts, gate/up
    times 4 (the activation's clamps at +-7 are reached); mxfp4: stacks stored as MXFP4."""
    n, d, ff = c["experts"], c["d"], c.get("expert_ff", c["ff"])
    router = 2.0 * rng.standard_normal((n, d)) / np.sqrt(d)
    w.add_tensor(p + "ffn_gate_inp.weight", router.astype(np.float32))
    gain = 4.0 if c.get("gpt_oss") else 1.0
    stacks = {"ffn_gate_exps": (ff, d, gain), "ffn_up_exps": (ff, d, gain),
              "ffn_down_exps": (d, ff, 1.0)}
    for name, (out, inp, g) in stacks.items():
        x = np.stack([mat(out, inp) for _ in range(n)]) * g
        if mxfp4:
            w.add_quantized_tensor(p + name + ".weight", x, gguf_py.GGML_MXFP4)
        else:
            w.add_tensor(p + name + ".weight", x)
    if c.get("gpt_oss"):
        w.add_tensor(p + "ffn_gate_inp.bias", (0.5 * rng.standard_normal(n)).astype(np.float32))
        for name, (out, _, _) in stacks.items():
            bias = 0.5 * rng.standard_normal((n, out))
            w.add_tensor(p + name + ".bias", bias.astype(np.float32))


def build(name, seed, arch=None, rope_scaling=None, f16=False, context=256, expert_used=None,
          sinks=False, mxfp4=False, drop=None):
    """arch / rope_scaling override general.architecture (keys follow it) and write
    rope.scaling.type: files the engine must refuse by name. f16: matrices stored as F16.
    expert_used: write this expert_used_count instead (refusal tests). sinks: every layer
    gets attn_sinks (one logit per query head; gpt-oss always has them). mxfp4: expert
    stacks as MXFP4. drop: leave out this tensor (refusal tests)."""
    c = dict(CONFIGS[name])
    sinks = sinks or c.get("gpt_oss", False)
    if arch:
        c["arch"] = arch
    if rope_scaling:
        c["scaling"] = rope_scaling
    if expert_used is not None:
        c["used"] = expert_used
    rng = np.random.default_rng(seed)
    a = c["arch"] + "."
    w = gguf_py.GGUFWriter()
    w.add_string("general.architecture", c["arch"])
    w.add_string("general.name", f"random {name}")
    w.add_uint32(a + "block_count", c["layers"])
    w.add_uint32(a + "context_length", context)
    w.add_uint32(a + "embedding_length", c["d"])
    w.add_uint32(a + "feed_forward_length", c["ff"])
    w.add_uint32(a + "attention.head_count", c["heads"])
    w.add_uint32(a + "attention.head_count_kv", c["kv_heads"])
    w.add_uint32(a + "attention.key_length", c["dk"])
    w.add_uint32(a + "attention.value_length", c["dk"])
    w.add_float32(a + "attention.layer_norm_rms_epsilon", c["eps"])
    w.add_float32(a + "rope.freq_base", c["base"])
    if "window" in c:
        w.add_uint32(a + "attention.sliding_window", c["window"])
    if "pattern" in c:
        w.add_uint32(a + "attention.sliding_window_pattern", c["pattern"])
    if "attn_cap" in c:
        w.add_float32(a + "attn_logit_softcapping", c["attn_cap"])
        w.add_float32(a + "final_logit_softcapping", c["final_cap"])
    if "experts" in c:
        w.add_uint32(a + "expert_count", c["experts"])
        w.add_uint32(a + "expert_used_count", c["used"])
        if "expert_ff" in c:
            w.add_uint32(a + "expert_feed_forward_length", c["expert_ff"])
    if "yarn" in c:
        w.add_string(a + "rope.scaling.type", "yarn")
        w.add_float32(a + "rope.scaling.factor", c["yarn"])
        w.add_uint32(a + "rope.scaling.original_context_length", c["yarn_ctx"])
    elif "linear" in c or "scaling" in c:
        w.add_string(a + "rope.scaling.type", c.get("scaling", "linear"))
        w.add_float32(a + "rope.scaling.factor", c.get("linear", 4.0))

    wtype = np.float16 if f16 else np.float32

    def mat(out, inp):
        return (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(wtype)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    d, ff, dk = c["d"], c["ff"], c["dk"]
    qd, kd = c["heads"] * dk, c["kv_heads"] * dk
    gemma = c["arch"].startswith("gemma")
    # Gemma multiplies embeddings by sqrt(d): keep the scaled rows near unit RMS so the
    # blocks, not the tied embedding, decide the logits.
    embd_std = 1.0 / np.sqrt(d) if gemma else 1.0
    embd = embd_std * rng.standard_normal((c["vocab"], d))
    w.add_tensor("token_embd.weight", embd.astype(wtype))
    if c.get("rope_freqs"):
        # Divisors in Llama 3.1's range [1, 8], on every pair so that short tests see them.
        w.add_tensor("rope_freqs.weight", rng.uniform(1.0, 8.0, dk // 2).astype(np.float32))
    for i in range(c["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(d))
        w.add_tensor(p + "attn_q.weight", mat(qd, d))
        w.add_tensor(p + "attn_k.weight", mat(kd, d))
        w.add_tensor(p + "attn_v.weight", mat(kd, d))
        if c.get("qk_norm"):
            w.add_tensor(p + "attn_q_norm.weight", norm(dk))
            w.add_tensor(p + "attn_k_norm.weight", norm(dk))
        w.add_tensor(p + "attn_output.weight", mat(d, qd))
        if sinks:  # around the logits' scale, some heads' sinks well above it
            w.add_tensor(p + "attn_sinks.weight",
                         (1.5 * rng.standard_normal(c["heads"]) + 0.5).astype(np.float32))
        if c.get("gpt_oss"):
            for n, size in (("attn_q", qd), ("attn_k", kd), ("attn_v", kd), ("attn_output", d)):
                w.add_tensor(p + n + ".bias", bias(size))
            w.add_tensor(p + "post_attention_norm.weight", norm(d))  # the MLP's input norm
        else:
            w.add_tensor(p + "ffn_norm.weight", norm(d))
        if "experts" in c:
            add_experts(w, p, c, mat, rng, mxfp4)
        else:
            w.add_tensor(p + "ffn_gate.weight", mat(ff, d))
            w.add_tensor(p + "ffn_up.weight", mat(ff, d))
            w.add_tensor(p + "ffn_down.weight", mat(d, ff))
        if gemma:
            w.add_tensor(p + "post_attention_norm.weight", norm(d))
            w.add_tensor(p + "post_ffw_norm.weight", norm(d))
    w.add_tensor("output_norm.weight", norm(d))
    if not gemma:  # Gemma ties the output to the embedding: llama.cpp writes no output.weight
        w.add_tensor("output.weight", mat(c["vocab"], d))
    if drop:
        w.tensors = [(n, t) for n, t in w.tensors if n != drop]
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--out", required=True, help="output GGUF path")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--set-arch", help="write this general.architecture instead (refusal tests)")
    ap.add_argument("--rope-scaling", help="write this rope.scaling.type (refusal tests)")
    ap.add_argument("--f16", action="store_true", help="store the matrices as F16")
    ap.add_argument("--context", type=int, default=256, help="context_length (tool prompts)")
    ap.add_argument("--expert-used", type=int,
                    help="write this expert_used_count (refusal tests; MoE configs)")
    ap.add_argument("--sinks", action="store_true",
                    help="write blk.N.attn_sinks.weight (learned attention sinks) on every layer")
    ap.add_argument("--mxfp4", action="store_true", help="store the expert stacks as MXFP4")
    ap.add_argument("--drop", help="leave out this tensor (refusal tests)")
    args = ap.parse_args()
    build(args.arch, args.seed, args.set_arch, args.rope_scaling, args.f16,
          args.context, args.expert_used, args.sinks, args.mxfp4, args.drop).write(args.out)
    print(f"wrote {args.out} ({args.arch})")


if __name__ == "__main__":
    main()
