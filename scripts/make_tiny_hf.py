"""Write a tiny random-weight Hugging Face checkpoint directory (config.json + safetensors).

Used by the export -> run round-trip test: this script makes DIR, `kvcache export --from-hf DIR`
makes a GGUF, the engine runs it, and its logits are compared with the float64 HF-convention
reference logits written here (--tokens/--logits-out). --arch llama or qwen3 (head_dim 24 !=
hidden/heads, q/k norm). RoPE follows HF: rotate-half pairs (i, i + head_dim/2).

--gguf-out FILE also converts DIR to GGUF in Python (llama: q/k rows permuted to the interleaved
pairing as llama.cpp's converter does), and --check verifies that reference_forward.py on that
GGUF reproduces the HF logits. The permutation, per head h of head_dim D (rows of q or k):
    gguf_row[h*D + 2*i + s] = hf_row[h*D + s*(D/2) + i]     for i in [0, D/2), s in {0, 1}

  /usr/bin/python3 scripts/make_tiny_hf.py --out /tmp/hf --arch llama --tokens 1,2,3 --logits-out ref.npy
"""

import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

ST_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


# ---------------------------------------------------------------------------------------------
# config and weights

def make_config(args):
    qwen = args.arch == "qwen3"
    cfg = {
        "architectures": ["Qwen3ForCausalLM" if qwen else "LlamaForCausalLM"],
        "model_type": args.arch,
        "vocab_size": 300,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": args.layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 24 if qwen else 16,
        "hidden_act": "silu",
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0 if qwen else 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": args.tied,
        "torch_dtype": TORCH_DTYPES[args.dtype],
        "bos_token_id": 1,
        "eos_token_id": 2,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    if args.rope_linear:
        cfg["rope_scaling"] = {"type": "linear", "rope_type": "linear", "factor": args.rope_linear}
    if qwen:
        cfg.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": args.layers})
    else:
        cfg["mlp_bias"] = False
    return cfg


def make_weights(cfg, seed):
    """HF-named float32 tensors. Scales keep activations O(1) so logit differences are visible."""
    rng = np.random.default_rng(seed)
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hq, hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

    def lin(out, inp):
        return (rng.standard_normal((out, inp)) / np.sqrt(inp)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((v, d)).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = lin(hq * hd, d)
        w[p + "self_attn.k_proj.weight"] = lin(hkv * hd, d)
        w[p + "self_attn.v_proj.weight"] = lin(hkv * hd, d)
        w[p + "self_attn.o_proj.weight"] = lin(d, hq * hd)
        if cfg["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "mlp.gate_proj.weight"] = lin(ff, d)
        w[p + "mlp.up_proj.weight"] = lin(ff, d)
        w[p + "mlp.down_proj.weight"] = lin(d, ff)
    w["model.norm.weight"] = norm(d)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, d)
    return w


# ---------------------------------------------------------------------------------------------
# safetensors (by hand)

def f32_to_bf16_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bit pattern (uint16)."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def encode(a, dtype):
    if dtype == "f32":
        return a.astype("<f4").tobytes()
    if dtype == "f16":
        return a.astype("<f2").tobytes()
    return f32_to_bf16_bits(a).astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        blob = encode(a, dtype)
        header[name] = {"dtype": ST_DTYPES[dtype], "shape": list(a.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
    return off


def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    n = struct.unpack_from("<Q", buf, 0)[0]
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[8 + n + b: 8 + n + e]
        if info["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        elif info["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        elif info["dtype"] == "BF16":
            a = bf16_bits_to_f32(np.frombuffer(raw, "<u2"))
        else:
            raise ValueError(f"{path}: tensor {name} dtype {info['dtype']} unsupported")
        out[name] = a.reshape(info["shape"])
    return out


def write_checkpoint(out_dir, cfg, weights, dtype, shards):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(weights)
    if shards <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), weights, dtype)
        return
    groups = np.array_split(np.arange(len(names)), shards)
    weight_map, total = {}, 0
    for k, idx in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {names[i]: weights[names[i]] for i in idx}
        total += write_safetensors(os.path.join(out_dir, fname), part, dtype)
        weight_map.update({n: fname for n in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def read_checkpoint(out_dir):
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(out_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for fname in files:
        w.update(read_safetensors(os.path.join(out_dir, fname)))
    return cfg, w


# ---------------------------------------------------------------------------------------------
# HF-convention float64 forward (rotate-half RoPE on unpermuted weights)

def hf_forward(cfg, w, tokens):
    W = {n: a.astype(np.float64) for n, a in w.items()}
    eps, hd = cfg["rms_norm_eps"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    t = len(tokens)
    factor = (cfg.get("rope_scaling") or {}).get("factor", 1.0)
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    freqs = (np.arange(t, dtype=np.float64) / factor)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    def norm(x, wt):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * wt

    def rotate_half(x):
        return np.concatenate([-x[..., hd // 2:], x[..., : hd // 2]], axis=-1)

    x = W["model.embed_tokens.weight"][np.asarray(tokens)]
    causal = np.tril(np.ones((t, t), dtype=bool))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = norm(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(t, hq, hd)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(t, hkv, hd)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(t, hkv, hd)
        if p + "self_attn.q_norm.weight" in W:
            q = norm(q, W[p + "self_attn.q_norm.weight"])
            k = norm(k, W[p + "self_attn.k_norm.weight"])
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, hq // hkv, axis=1)          # repeat_kv: q head h uses kv head h // n_rep
        v = np.repeat(v, hq // hkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        s = np.where(causal[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = np.einsum("hts,shd->thd", s, v).reshape(t, hq * hd)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = norm(x, W[p + "post_attention_layernorm.weight"])
        g = h @ W[p + "mlp.gate_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    out = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return norm(x, W["model.norm.weight"]) @ out.T


# ---------------------------------------------------------------------------------------------
# Python HF -> GGUF conversion (the check for engineer C's exporter and the permutation direction)

def permute_rows(w, n_heads):
    """HF rotate-half rows -> GGUF llama interleaved rows, per head (llama.cpp's permute)."""
    rows = w.shape[0]
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_gguf(cfg, w, path):
    arch = cfg["model_type"]
    hq, hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    g = gguf_py.GGUFWriter()
    a = arch + "."
    g.add_string("general.architecture", arch)
    g.add_string("general.name", f"kvcache-tiny-hf-{arch}")
    g.add_uint32(a + "block_count", cfg["num_hidden_layers"])
    g.add_uint32(a + "context_length", cfg["max_position_embeddings"])
    g.add_uint32(a + "embedding_length", cfg["hidden_size"])
    g.add_uint32(a + "feed_forward_length", cfg["intermediate_size"])
    g.add_uint32(a + "attention.head_count", hq)
    g.add_uint32(a + "attention.head_count_kv", hkv)
    g.add_uint32(a + "attention.key_length", hd)
    g.add_uint32(a + "attention.value_length", hd)
    g.add_float32(a + "attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    g.add_float32(a + "rope.freq_base", cfg["rope_theta"])
    g.add_uint32(a + "rope.dimension_count", hd)
    if cfg.get("rope_scaling"):
        g.add_string(a + "rope.scaling.type", "linear")
        g.add_float32(a + "rope.scaling.factor", cfg["rope_scaling"]["factor"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, t in w.items():
        t = t.astype(np.float32)
        if name == "model.embed_tokens.weight":
            g.add_tensor("token_embd.weight", t)
        elif name == "model.norm.weight":
            g.add_tensor("output_norm.weight", t)
        elif name == "lm_head.weight":
            if not cfg["tie_word_embeddings"]:
                g.add_tensor("output.weight", t)
        else:
            parts = name.split(".")                       # model.layers.{i}.<module...>.weight
            i, module, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
            if arch == "llama" and module in ("self_attn.q_proj", "self_attn.k_proj"):
                t = permute_rows(t, hq if module == "self_attn.q_proj" else hkv)
            g.add_tensor(f"blk.{i}.{names[module]}.{kind}", t)
    g.write(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--arch", choices=["llama", "qwen3"], default="llama")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--tied", dest="tied", action="store_true", default=True,
                    help="tie_word_embeddings true (default): no lm_head.weight")
    ap.add_argument("--untied", dest="tied", action="store_false", help="write lm_head.weight")
    ap.add_argument("--dtype", choices=list(ST_DTYPES), default="f32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--rope-linear", type=float, default=None, help="linear RoPE scaling factor")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", help="comma-separated token ids (< 300) for reference logits")
    ap.add_argument("--logits-out", help="float64 HF-convention logits [T, vocab] (.npy)")
    ap.add_argument("--gguf-out", help="also convert the written checkpoint to GGUF in Python")
    ap.add_argument("--check", action="store_true",
                    help="verify reference_forward.py on the Python GGUF equals the HF logits")
    args = ap.parse_args()
    if args.shards < 1:
        raise SystemExit(f"make_tiny_hf: --shards {args.shards} must be >= 1")
    cfg = make_config(args)
    write_checkpoint(args.out, cfg, make_weights(cfg, args.seed), args.dtype, args.shards)
    print(f"wrote {args.out} ({args.arch}, {args.dtype}, {args.shards} shard(s), tied={args.tied})")
    cfg, w = read_checkpoint(args.out)            # the stored (rounded) weights are the truth
    if args.tokens:
        toks = [int(t) for t in args.tokens.split(",") if t.strip()]
        if not toks or any(not 0 <= t < cfg["vocab_size"] for t in toks):
            raise SystemExit(f"make_tiny_hf: --tokens must be non-empty ids in [0, {cfg['vocab_size']})")
        logits = hf_forward(cfg, w, toks)
        if args.logits_out:
            np.save(args.logits_out, logits)
            print(f"wrote {args.logits_out}: logits [{logits.shape[0]}, {logits.shape[1]}] float64")
    gguf_path = args.gguf_out
    if args.check and not gguf_path:              # keep the checkpoint directory clean
        gguf_path = os.path.join(tempfile.mkdtemp(prefix="make_tiny_hf_"), "python_export.gguf")
    if gguf_path:
        to_gguf(cfg, w, gguf_path)
        print(f"wrote {gguf_path}")
    if args.check:
        import reference_forward
        if not args.tokens:
            raise SystemExit("make_tiny_hf: --check needs --tokens")
        ref = reference_forward.forward(gguf_py.read(gguf_path), toks)
        diff = float(np.abs(ref - logits).max())
        print(f"check: max |reference_forward(gguf) - hf| = {diff:.3e}")
        if not diff < 1e-9:
            raise SystemExit("make_tiny_hf: check FAILED")
        print("check: ok")


if __name__ == "__main__":
    main()
