"""Float64 numpy reference forward of a GGUF model, per docs/model_format.md.

Full causal recomputation without a cache: logits of every token [T, vocab]. Handles arch llama
(interleaved RoPE pairs 2j, 2j+1) and qwen2/qwen3 (rotate-half pairs i, i + r/2), q/k/v biases,
q/k norm, per-layer kv heads, sliding windows (kvcache.cache.windows via kvcache.layer_cache),
KV-shared layers, tied/untied output, linear RoPE scaling.

  /usr/bin/python3 scripts/reference_forward.py --model models/tiny.gguf --tokens 1,2,3 --out logits.npy
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

INTERLEAVED_ARCHS = {"llama"}
ROTATE_HALF_ARCHS = {"qwen2", "qwen3"}


def _per_layer(value, n, what):
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{what}: array of {len(value)} entries, expected {n}")
        return [int(v) for v in value]
    return [int(value)] * n


class Hparams:
    def __init__(self, g):
        self.arch = g.get("general.architecture")
        if self.arch not in INTERLEAVED_ARCHS | ROTATE_HALF_ARCHS:
            raise ValueError(f"general.architecture {self.arch!r} unsupported (llama, qwen2, qwen3)")
        a = self.arch + "."
        self.n_layers = int(g.kv[a + "block_count"])
        self.d = int(g.kv[a + "embedding_length"])
        self.n_head = int(g.kv[a + "attention.head_count"])
        self.kv_heads = _per_layer(g.get(a + "attention.head_count_kv", self.n_head), self.n_layers,
                                   a + "attention.head_count_kv")
        self.dk = int(g.get(a + "attention.key_length", self.d // self.n_head))
        self.dv = int(g.get(a + "attention.value_length", self.d // self.n_head))
        self.eps = float(g.get(a + "attention.layer_norm_rms_epsilon", 1e-5))
        self.base = float(g.get(a + "rope.freq_base", 10000.0))
        self.rope_dim = int(g.get(a + "rope.dimension_count", self.dk))
        self.rope_factor = 1.0
        if g.get(a + "rope.scaling.type", "none") == "linear":
            self.rope_factor = float(g.kv[a + "rope.scaling.factor"])
        self.layer_cache = [int(c) for c in g.get("kvcache.layer_cache", range(self.n_layers))]
        n_caches = max(self.layer_cache) + 1
        self.windows = [int(w) for w in g.get("kvcache.cache.windows", [0] * n_caches)]
        if len(self.layer_cache) != self.n_layers:
            raise ValueError(f"kvcache.layer_cache has {len(self.layer_cache)} entries, expected {self.n_layers}")


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, hp):
    """x [T, H, D] float64; rotate the first rope_dim dims of each head."""
    r = hp.rope_dim
    j = np.arange(r // 2, dtype=np.float64)
    ang = (pos.astype(np.float64)[:, None] / hp.rope_factor) * hp.base ** (-2.0 * j / r)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    if hp.arch in INTERLEAVED_ARCHS:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        out[..., 0:r:2] = a * cos - b * sin
        out[..., 1:r:2] = a * sin + b * cos
    else:
        a, b = x[..., : r // 2], x[..., r // 2: r]
        out[..., : r // 2] = a * cos - b * sin
        out[..., r // 2: r] = b * cos + a * sin
    return out


def attend(q, k, v, window, dk):
    """q [T, Hq, Dk], k [T, Hkv, Dk], v [T, Hkv, Dv] -> [T, Hq*Dv]; causal, optional window."""
    t, hq, _ = q.shape
    rep = hq // k.shape[1]
    pos = np.arange(t)
    diff = pos[:, None] - pos[None, :]
    allowed = diff >= 0
    if window > 0:
        allowed &= diff < window
    out = np.empty((t, hq, v.shape[2]))
    for h in range(hq):
        s = q[:, h, :] @ k[:, h // rep, :].T / np.sqrt(dk)
        s = np.where(allowed, s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        out[:, h, :] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, h // rep, :]
    return out.reshape(t, -1)


def forward(g, tokens):
    hp = Hparams(g)
    W = {n: np.asarray(a, dtype=np.float64) for n, a in g.tensors.items()}
    tokens = np.asarray(tokens, dtype=np.int64)
    pos = np.arange(len(tokens))
    x = W["token_embd.weight"][tokens]
    caches = {}
    for i in range(hp.n_layers):
        p = f"blk.{i}."
        c = hp.layer_cache[i]
        h = rmsnorm(x, W[p + "attn_norm.weight"], hp.eps)

        def proj(name):
            y = h @ W[p + name + ".weight"].T
            return y + W[p + name + ".bias"] if p + name + ".bias" in W else y

        q = proj("attn_q").reshape(len(tokens), hp.n_head, hp.dk)
        if p + "attn_q_norm.weight" in W:
            q = rmsnorm(q, W[p + "attn_q_norm.weight"], hp.eps)
        q = rope(q, pos, hp)
        if c not in caches:                      # this layer owns cache c
            k = proj("attn_k").reshape(len(tokens), hp.kv_heads[i], hp.dk)
            if p + "attn_k_norm.weight" in W:
                k = rmsnorm(k, W[p + "attn_k_norm.weight"], hp.eps)
            v = proj("attn_v").reshape(len(tokens), hp.kv_heads[i], hp.dv)
            caches[c] = (rope(k, pos, hp), v)
        elif p + "attn_k.weight" in W:
            raise ValueError(f"layer {i} reads cache {c} written by an earlier layer but has attn_k")
        k, v = caches[c]
        x = x + attend(q, k, v, hp.windows[c], hp.dk) @ W[p + "attn_output.weight"].T
        h = rmsnorm(x, W[p + "ffn_norm.weight"], hp.eps)
        gate = h @ W[p + "ffn_gate.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    out_w = W.get("output.weight", W["token_embd.weight"])
    return rmsnorm(x, W["output_norm.weight"], hp.eps) @ out_w.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="output .npy (float64 [T, vocab])")
    args = ap.parse_args()
    g = gguf_py.read(args.model)
    toks = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not toks:
        raise SystemExit("reference_forward: --tokens is empty")
    vocab = g.tensors["token_embd.weight"].shape[0]
    bad = [t for t in toks if not 0 <= t < vocab]
    if bad:
        raise SystemExit(f"reference_forward: token ids {bad} out of range [0, {vocab})")
    logits = forward(g, toks)
    np.save(args.out, logits)
    print(f"wrote {args.out}: logits [{logits.shape[0]}, {logits.shape[1]}] float64, "
          f"argmax {logits.argmax(-1).tolist()}")


if __name__ == "__main__":
    main()
