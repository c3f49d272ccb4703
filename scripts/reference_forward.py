"""Float64 numpy reference forward of a GGUF model, per docs/model_format.md.

Full causal recomputation without a cache: logits of every token [T, vocab]. Handles arch llama
(interleaved RoPE pairs 2j, 2j+1; rope_freqs.weight divides pair j's frequency) and qwen2/qwen3
(rotate-half pairs i, i + r/2), q/k/v biases, q/k norm, per-layer kv heads, sliding windows
(kvcache.cache.windows via kvcache.layer_cache), KV-shared layers, tied/untied output, linear
RoPE scaling. Gemma 2 and Gemma 3 (text) follow their published model definitions:
embeddings times sqrt(hidden), rotate-half RoPE, GELU-tanh gated MLP, RMSNorm before and after
attention and MLP (the file holds the final multiplier 1 + w), attention scale
query_pre_attn_scalar^-0.5, sliding layers (Gemma 2: even layers; Gemma 3: all but every
sixth), Gemma 2 attention/final logit soft-caps, Gemma 3 q/k norms and a local RoPE base of
10000 (unscaled) on sliding layers against rope.freq_base (+ linear scaling) on global ones.
Mixtures of experts (qwen3moe, as Qwen3-MoE; llama with expert_count, as Mixtral), where a
block has ffn_gate_inp: per token the router's softmax over all experts, the expert_used_count
most probable kept and their weights renormalised to sum 1 (expert_weights_norm, default true;
false keeps the softmax values), the weighted sum of those experts' SwiGLU MLPs.
gpt-oss (the published model definition): rotate-half RoPE with YaRN as above, even layers
sliding, the sinks, q/k/v/output biases, the MLP input norm post_attention_norm, a router with
bias whose top-k logits are softmaxed among themselves, experts with biases and the clamped
SwiGLU: g = min(g, 7), u = clamp(u, -7, 7), g * sigmoid(1.702 g) * (u + 1).
Other architectures slide where the file gives attention.sliding_window and an integer
attention.sliding_window_pattern (period p: layer i slides iff (i + 1) % p != 0). Learned
attention sinks (blk.N.attn_sinks.weight, one logit per query head, as gpt-oss): the sink joins
each softmax's denominator as exp(sink) and contributes no value. YaRN RoPE (rope.scaling.type
yarn; Peng et al. 2023): inverse frequencies blend extrapolation base^(-2j/d) and interpolation
base^(-2j/d) / factor with a linear ramp between the correction dims of beta_fast (32) and
beta_slow (1) rotations over original_context_length, and cos/sin are multiplied by the
attention factor 0.1 ln(factor) + 1.

  /usr/bin/python3 scripts/reference_forward.py --model models/tiny.gguf --tokens 1,2,3 --out logits.npy
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

INTERLEAVED_ARCHS = {"llama"}
ROTATE_HALF_ARCHS = {"qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "gpt-oss"}
GEMMA_ARCHS = {"gemma2", "gemma3"}


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
            raise ValueError(f"general.architecture {self.arch!r} unsupported "
                             "(llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, gpt-oss)")
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
        self.yarn = None  # (inverse frequencies [rope_dim / 2], attention factor)
        if g.get(a + "rope.scaling.type", "none") == "linear":
            self.rope_factor = float(g.kv[a + "rope.scaling.factor"])
        elif g.get(a + "rope.scaling.type", "none") == "yarn":
            self.yarn = self.yarn_inv_freq(g, a)
        self.gpt_oss = self.arch == "gpt-oss"
        self.layer_cache = [int(c) for c in g.get("kvcache.layer_cache", range(self.n_layers))]
        if len(self.layer_cache) != self.n_layers:
            raise ValueError(f"kvcache.layer_cache has {len(self.layer_cache)} entries, "
                             f"expected {self.n_layers}")
        if "kvcache.cache.windows" in g.kv:
            self.windows = [int(w) for w in g.kv["kvcache.cache.windows"]]
        else:
            self.windows = self.model_windows(g)
        # The layer kind of the model (selects Gemma 3's RoPE), per model layer.
        self.sliding = [self.windows[c] > 0 for c in self.layer_cache]
        self.gemma = self.arch in GEMMA_ARCHS
        self.embed_scale = np.sqrt(self.d) if self.gemma else 1.0
        # query_pre_attn_scalar is not in GGUF files: head_dim, except the 27B models
        # (Gemma 2: 46 layers, Gemma 3: 62), whose config says hidden_size / num_heads.
        qpas = self.dk
        if (self.arch, self.n_layers) in {("gemma2", 46), ("gemma3", 62)}:
            qpas = self.d // self.n_head
        self.attn_scale = qpas ** -0.5
        self.attn_cap = self.final_cap = 0.0
        if self.arch == "gemma2":
            self.attn_cap = float(g.get(a + "attn_logit_softcapping", 50.0))
            self.final_cap = float(g.get(a + "final_logit_softcapping", 30.0))
        # (base, position divisor) for global and sliding layers.
        self.rope_global = (self.base, self.rope_factor)
        self.rope_local = (float(g.get(a + "rope.freq_base_swa", 10000.0)), 1.0) \
            if self.arch == "gemma3" else self.rope_global
        self.rope_freqs = g.tensors.get("rope_freqs.weight")
        self.n_expert_used = int(g.get(a + "expert_used_count", 0))
        self.expert_norm = bool(g.get(a + "expert_weights_norm", True))

    def yarn_inv_freq(self, g, a):
        factor = float(g.kv[a + "rope.scaling.factor"])
        orig = float(g.kv[a + "rope.scaling.original_context_length"])
        beta_fast = float(g.get(a + "rope.scaling.yarn_beta_fast", 32.0))
        beta_slow = float(g.get(a + "rope.scaling.yarn_beta_slow", 1.0))
        dim, base = self.rope_dim, self.base

        def correction_dim(rotations):  # the dim whose wavelength fits `rotations` times in orig
            return dim * np.log(orig / (rotations * 2 * np.pi)) / (2 * np.log(base))

        low = max(np.floor(correction_dim(beta_fast)), 0)
        high = min(np.ceil(correction_dim(beta_slow)), dim - 1)
        pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / max(high - low, 0.001), 0, 1)
        extrapolation_weight = 1.0 - ramp
        inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
        attention_factor = 0.1 * np.log(factor) + 1.0 if factor > 1 else 1.0
        return inv_freq, attention_factor

    def model_windows(self, g):
        """Windows per layer of a file without kvcache.* keys, from the published layer
        patterns: Gemma 2 slides on even layers (window 4096 unless the file says), Gemma 3
        on every layer but each sixth; llama/qwen do not slide."""
        a = self.arch + "."
        n = self.n_layers
        if self.arch == "gemma2":
            w = int(g.get(a + "attention.sliding_window", 4096))
            return [w if i % 2 == 0 else 0 for i in range(n)]
        if self.arch == "gemma3":
            w = int(g.get(a + "attention.sliding_window", 0))
            return [w if (i + 1) % 6 != 0 else 0 for i in range(n)]
        if self.arch == "gpt-oss":  # sliding and full attention alternate, layer 0 sliding
            w = int(g.get(a + "attention.sliding_window", 0))
            return [w if i % 2 == 0 else 0 for i in range(n)]
        w = int(g.get(a + "attention.sliding_window", 0))
        period = g.get(a + "attention.sliding_window_pattern")
        if w > 0 and isinstance(period, int):
            return [w if period == 0 or (i + 1) % period != 0 else 0 for i in range(n)]
        return [0] * n


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def softcap(x, cap):
    return cap * np.tanh(x / cap) if cap > 0 else x


def rope(x, pos, hp, sliding=False):
    """x [T, H, D] float64; rotate the first rope_dim dims of each head."""
    r = hp.rope_dim
    base, factor = hp.rope_local if sliding else hp.rope_global
    j = np.arange(r // 2, dtype=np.float64)
    freq = base ** (-2.0 * j / r)
    mscale = 1.0
    if hp.yarn is not None:
        freq, mscale = hp.yarn
    if hp.rope_freqs is not None:
        freq = freq / np.asarray(hp.rope_freqs, dtype=np.float64)
    ang = (pos.astype(np.float64)[:, None] / factor) * freq
    cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
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


def attend(q, k, v, window, hp, sinks=None):
    """q [T, Hq, Dk], k [T, Hkv, Dk], v [T, Hkv, Dv] -> [T, Hq*Dv]; causal, optional window
    (query p sees keys p - window < j <= p), scaled then soft-capped logits; sinks [Hq] (or
    None): head h's softmax denominator gains exp(sinks[h])."""
    t, hq, _ = q.shape
    rep = hq // k.shape[1]
    pos = np.arange(t)
    diff = pos[:, None] - pos[None, :]
    allowed = diff >= 0
    if window > 0:
        allowed &= diff < window
    out = np.empty((t, hq, v.shape[2]))
    for h in range(hq):
        s = softcap(q[:, h, :] @ k[:, h // rep, :].T * hp.attn_scale, hp.attn_cap)
        s = np.where(allowed, s, -np.inf)
        sink = -np.inf if sinks is None else float(sinks[h])
        m = np.maximum(s.max(axis=-1, keepdims=True), sink)
        s = np.exp(s - m)
        denom = s.sum(axis=-1, keepdims=True) + np.exp(sink - m)
        out[:, h, :] = (s / denom) @ v[:, h // rep, :]
    return out.reshape(t, -1)


def moe_mlp(h, W, p, hp):
    """Mixture-of-experts MLP of h [T, d]: the ffn_*_exps stacks hold numpy [experts, out, in]."""
    logits = h @ W[p + "ffn_gate_inp.weight"].T                  # [T, experts]
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-probs[t], kind="stable")[: hp.n_expert_used]
        weights = probs[t, chosen]
        if hp.expert_norm:
            weights = weights / weights.sum()
        for e, wt in zip(chosen, weights):
            gate = W[p + "ffn_gate_exps.weight"][e] @ h[t]
            up = W[p + "ffn_up_exps.weight"][e] @ h[t]
            out[t] += wt * (W[p + "ffn_down_exps.weight"][e] @ (gate / (1.0 + np.exp(-gate)) * up))
    return out


def gpt_oss_mlp(h, W, p, hp):
    """gpt-oss's MLP of h [T, d]: router logits (+ bias), the top-k logits softmaxed among
    themselves, each chosen expert's clamped SwiGLU with biases, weighted and summed."""
    logits = h @ W[p + "ffn_gate_inp.weight"].T + W[p + "ffn_gate_inp.bias"]
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        chosen = np.argsort(-logits[t], kind="stable")[: hp.n_expert_used]
        top = logits[t, chosen]
        weights = np.exp(top - top.max())
        weights /= weights.sum()
        for e, wt in zip(chosen, weights):
            gate = W[p + "ffn_gate_exps.weight"][e] @ h[t] + W[p + "ffn_gate_exps.bias"][e]
            up = W[p + "ffn_up_exps.weight"][e] @ h[t] + W[p + "ffn_up_exps.bias"][e]
            gate = np.minimum(gate, 7.0)
            up = np.clip(up, -7.0, 7.0)
            act = gate / (1.0 + np.exp(-1.702 * gate)) * (up + 1.0)
            out[t] += wt * (W[p + "ffn_down_exps.weight"][e] @ act + W[p + "ffn_down_exps.bias"][e])
    return out


def forward(g, tokens):
    hp = Hparams(g)
    W = {n: np.asarray(a, dtype=np.float64) for n, a in g.tensors.items()}
    tokens = np.asarray(tokens, dtype=np.int64)
    pos = np.arange(len(tokens))
    x = W["token_embd.weight"][tokens] * hp.embed_scale
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
        q = rope(q, pos, hp, hp.sliding[i])
        if c not in caches:                      # this layer owns cache c
            k = proj("attn_k").reshape(len(tokens), hp.kv_heads[i], hp.dk)
            if p + "attn_k_norm.weight" in W:
                k = rmsnorm(k, W[p + "attn_k_norm.weight"], hp.eps)
            v = proj("attn_v").reshape(len(tokens), hp.kv_heads[i], hp.dv)
            caches[c] = (rope(k, pos, hp, hp.sliding[i]), v)
        elif p + "attn_k.weight" in W:
            raise ValueError(f"layer {i} reads cache {c} written by an earlier layer but has attn_k")
        k, v = caches[c]
        o = attend(q, k, v, hp.windows[c], hp, W.get(p + "attn_sinks.weight")) @ \
            W[p + "attn_output.weight"].T
        if hp.gpt_oss:
            x = x + o + W[p + "attn_output.bias"]
            x = x + gpt_oss_mlp(rmsnorm(x, W[p + "post_attention_norm.weight"], hp.eps), W, p, hp)
            continue
        if hp.gemma:
            o = rmsnorm(o, W[p + "post_attention_norm.weight"], hp.eps)
        x = x + o
        h = rmsnorm(x, W[p + "ffn_norm.weight"], hp.eps)
        if p + "ffn_gate_inp.weight" in W:
            x = x + moe_mlp(h, W, p, hp)
            continue
        gate = h @ W[p + "ffn_gate.weight"].T
        act = gelu_tanh(gate) if hp.gemma else gate / (1.0 + np.exp(-gate))
        m = (act * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
        if hp.gemma:
            m = rmsnorm(m, W[p + "post_ffw_norm.weight"], hp.eps)
        x = x + m
    out_w = W.get("output.weight", W["token_embd.weight"])
    return softcap(rmsnorm(x, W["output_norm.weight"], hp.eps) @ out_w.T, hp.final_cap)


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
