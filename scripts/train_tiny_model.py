"""Train the embedded tiny default model (models/tiny.gguf) on the King James Bible.

Byte-level (vocab 256, token id = byte value) llama-architecture decoder whose cache geometry
exercises the runtime: per-cache-layer kv heads [2,1,2,1], windows [0,32,0,32] (full and
sliding(32)), and model layer 4 KV-shared reading cache 2. Forward math per docs/model_format.md
with llama's interleaved RoPE pairing (dims 2j, 2j+1), trained that way so no permutation applies.

  /usr/bin/python3 scripts/train_tiny_model.py --out models/tiny.gguf          # train + write
  /usr/bin/python3 scripts/train_tiny_model.py --load models/tiny.gguf --sample "In the beginning"
  /usr/bin/python3 scripts/train_tiny_model.py --load models/tiny.gguf --tokens 1,2,3 --logits-out x.npy
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_py  # noqa: E402

# Geometry (model layers 0..4 read caches layer_cache[i]).
VOCAB = 256
D_MODEL = 128
N_LAYERS = 5
N_HEAD = 4
HEAD_DIM = 32
VALUE_DIM = 32
FF = 384
CACHE_KV_HEADS = [2, 1, 2, 1]
CACHE_WINDOWS = [0, 32, 0, 32]
LAYER_CACHE = [0, 1, 2, 3, 2]
OWNER_OF_CACHE = [0, 1, 2, 3]       # model layer that writes each cache
EPS = 1e-5
ROPE_BASE = 10000.0
TRAIN_CTX = 128
MAX_CONTEXT = 256
MAX_STEP_TOKENS = 16


def load_kjv_text():
    """Whole KJV from Debian's bible-kjv(-text): one verse per line, no numbers or headings."""
    # A huge COLUMNS keeps `bible` from wrapping verses (wrapping would eat the text's double spaces).
    raw = subprocess.run(["bible", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         env={**os.environ, "COLUMNS": "1000000"}).stdout.decode("ascii")
    verses, cur, prev_blank = [], [], True
    for line in raw.splitlines():
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m or (prev_blank and line.strip()):          # a new verse, or a chapter heading
            if cur:
                verses.append(" ".join(cur))
            cur = [m.group(1).strip()] if m else []
        elif line.strip():
            cur.append(line.strip())
        prev_blank = not line.strip()
    if cur:
        verses.append(" ".join(cur))
    return "\n".join(verses) + "\n"


def rope_interleaved(x, pos):
    """x [B, T, H, D]; rotate pairs (2j, 2j+1) by pos * base^(-2j/D)."""
    d = x.shape[-1]
    inv = ROPE_BASE ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]            # [T, D/2]
    cos = torch.cos(ang).to(x.dtype)[None, :, None, :]
    sin = torch.sin(ang).to(x.dtype)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    return out.flatten(-2)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


class Layer(torch.nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.idx = idx
        self.cache = LAYER_CACHE[idx]
        self.owner = OWNER_OF_CACHE[self.cache] == idx
        self.hkv = CACHE_KV_HEADS[self.cache]
        self.window = CACHE_WINDOWS[self.cache]
        self.attn_norm = torch.nn.Parameter(torch.ones(D_MODEL))
        self.wq = torch.nn.Linear(D_MODEL, N_HEAD * HEAD_DIM, bias=False)
        if self.owner:
            self.wk = torch.nn.Linear(D_MODEL, self.hkv * HEAD_DIM, bias=False)
            self.wv = torch.nn.Linear(D_MODEL, self.hkv * VALUE_DIM, bias=False)
        self.wo = torch.nn.Linear(N_HEAD * VALUE_DIM, D_MODEL, bias=False)
        self.ffn_norm = torch.nn.Parameter(torch.ones(D_MODEL))
        self.w_gate = torch.nn.Linear(D_MODEL, FF, bias=False)
        self.w_up = torch.nn.Linear(D_MODEL, FF, bias=False)
        self.w_down = torch.nn.Linear(FF, D_MODEL, bias=False)

    def forward(self, x, pos, caches):
        b, t, _ = x.shape
        h = rmsnorm(x, self.attn_norm)
        q = rope_interleaved(self.wq(h).view(b, t, N_HEAD, HEAD_DIM), pos)
        if self.owner:
            k = rope_interleaved(self.wk(h).view(b, t, self.hkv, HEAD_DIM), pos)
            v = self.wv(h).view(b, t, self.hkv, VALUE_DIM)
            caches[self.cache] = (k, v)
        k, v = caches[self.cache]
        rep = N_HEAD // self.hkv
        k = k.repeat_interleave(rep, dim=2).transpose(1, 2)              # [B, H, T, D]
        v = v.repeat_interleave(rep, dim=2).transpose(1, 2)
        q = q.transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HEAD_DIM)
        diff = pos[:, None] - pos[None, :]                              # query - key
        allowed = diff >= 0
        if self.window > 0:
            allowed = allowed & (diff < self.window)
        s = s.masked_fill(~allowed, float("-inf"))
        a = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, N_HEAD * VALUE_DIM)
        x = x + self.wo(a)
        h = rmsnorm(x, self.ffn_norm)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embd = torch.nn.Embedding(VOCAB, D_MODEL)
        self.layers = torch.nn.ModuleList([Layer(i) for i in range(N_LAYERS)])
        self.out_norm = torch.nn.Parameter(torch.ones(D_MODEL))
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * N_LAYERS) if ("wo" in name or "w_down" in name) else 0.02
                torch.nn.init.normal_(p, std=std)

    def forward(self, tokens):
        t = tokens.shape[1]
        pos = torch.arange(t)
        x = self.embd(tokens)
        caches = [None] * len(CACHE_KV_HEADS)
        for layer in self.layers:
            x = layer(x, pos, caches)
        return rmsnorm(x, self.out_norm) @ self.embd.weight.T       # tied output


def tensor_map(model):
    """GGUF tensor name -> torch parameter."""
    m = {"token_embd.weight": model.embd.weight, "output_norm.weight": model.out_norm}
    for i, L in enumerate(model.layers):
        p = f"blk.{i}."
        m[p + "attn_norm.weight"] = L.attn_norm
        m[p + "attn_q.weight"] = L.wq.weight
        if L.owner:
            m[p + "attn_k.weight"] = L.wk.weight
            m[p + "attn_v.weight"] = L.wv.weight
        m[p + "attn_output.weight"] = L.wo.weight
        m[p + "ffn_norm.weight"] = L.ffn_norm
        m[p + "ffn_gate.weight"] = L.w_gate.weight
        m[p + "ffn_up.weight"] = L.w_up.weight
        m[p + "ffn_down.weight"] = L.w_down.weight
    return m


def write_gguf(model, path):
    w = gguf_py.GGUFWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "kvcache-tiny-kjv")
    w.add_string("general.license", "public domain text (KJV); weights trained by scripts/train_tiny_model.py")
    w.add_uint32("llama.block_count", N_LAYERS)
    w.add_uint32("llama.embedding_length", D_MODEL)
    w.add_uint32("llama.feed_forward_length", FF)
    w.add_uint32("llama.context_length", MAX_CONTEXT)
    w.add_uint32("llama.attention.head_count", N_HEAD)
    w.add_array("llama.attention.head_count_kv", gguf_py.INT32,
                [CACHE_KV_HEADS[c] for c in LAYER_CACHE])
    w.add_uint32("llama.attention.key_length", HEAD_DIM)
    w.add_uint32("llama.attention.value_length", VALUE_DIM)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", EPS)
    w.add_float32("llama.rope.freq_base", ROPE_BASE)
    w.add_uint32("llama.rope.dimension_count", HEAD_DIM)
    w.add_uint32("llama.vocab_size", VOCAB)
    w.add_array("kvcache.cache.kv_heads", gguf_py.INT32, CACHE_KV_HEADS)
    w.add_array("kvcache.cache.head_dims", gguf_py.INT32, [HEAD_DIM] * len(CACHE_KV_HEADS))
    w.add_array("kvcache.cache.value_dims", gguf_py.INT32, [VALUE_DIM] * len(CACHE_KV_HEADS))
    w.add_array("kvcache.cache.windows", gguf_py.INT32, CACHE_WINDOWS)
    w.add_array("kvcache.layer_cache", gguf_py.INT32, LAYER_CACHE)
    w.add_uint32("kvcache.max_context", MAX_CONTEXT)
    w.add_uint32("kvcache.max_step_tokens", MAX_STEP_TOKENS)
    b2u = gguf_py.gpt2_byte_to_unicode()
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", gguf_py.STRING, [b2u[b] for b in range(256)])
    w.add_array("tokenizer.ggml.merges", gguf_py.STRING, [])
    w.add_array("tokenizer.ggml.token_type", gguf_py.INT32, [1] * 256)
    for name, p in tensor_map(model).items():
        w.add_tensor(name, p.detach().to(torch.float32).numpy())
    w.write(path)


def load_gguf(model, path):
    g = gguf_py.read(path)
    tm = tensor_map(model)
    if set(tm) != set(g.tensors):
        raise SystemExit(f"tensor set mismatch: {sorted(set(tm) ^ set(g.tensors))}")
    with torch.no_grad():
        for name, p in tm.items():
            p.copy_(torch.from_numpy(g.tensors[name].astype(np.float32)))


@torch.no_grad()
def greedy(model, prompt, n):
    toks = list(prompt.encode("utf-8"))
    for _ in range(n):
        ctx = toks[-MAX_CONTEXT:]
        logits = model(torch.tensor([ctx]))
        toks.append(int(logits[0, -1].argmax()))
    return bytes(toks).decode("utf-8", errors="replace")


def train(args, model):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    text = load_kjv_text()
    data = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    print(f"corpus: {len(data)} bytes, params: {sum(p.numel() for p in model.parameters())}", flush=True)
    split = int(len(data) * 0.98)
    rng = np.random.default_rng(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    t0 = time.time()
    for step in range(args.steps):
        warm = min(1.0, (step + 1) / 30)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = rng.integers(0, split - TRAIN_CTX - 1, size=args.batch)
        batch = torch.from_numpy(np.stack([data[s:s + TRAIN_CTX + 1] for s in starts]).astype(np.int64))
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item():.4f} lr {lr:.2e} elapsed {time.time() - t0:.0f}s", flush=True)
    with torch.no_grad():
        vstarts = np.random.default_rng(1).integers(split, len(data) - TRAIN_CTX - 1, size=32)
        vb = torch.from_numpy(np.stack([data[s:s + TRAIN_CTX + 1] for s in vstarts]).astype(np.int64))
        vloss = F.cross_entropy(model(vb[:, :-1]).reshape(-1, VOCAB), vb[:, 1:].reshape(-1)).item()
    print(f"done: {args.steps} steps in {time.time() - t0:.0f}s, final train loss {loss.item():.4f}, "
          f"held-out loss {vloss:.4f} ({vloss / math.log(2):.3f} bits/byte)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the trained model here (GGUF)")
    ap.add_argument("--load", help="load weights from this GGUF instead of training")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sample", help="print a greedy continuation of this prompt")
    ap.add_argument("--sample-len", type=int, default=200)
    ap.add_argument("--tokens", help="comma-separated token ids to score")
    ap.add_argument("--logits-out", help="write float32 logits [T, vocab] for --tokens here (.npy)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = TinyModel()
    if args.load:
        load_gguf(model, args.load)
    else:
        model.train()
        train(args, model)
    model.eval()
    if args.out:
        write_gguf(model, args.out)
        print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    if args.sample:
        print(repr(greedy(model, args.sample, args.sample_len)))
    if args.tokens:
        toks = [int(t) for t in args.tokens.split(",")]
        with torch.no_grad():
            logits = model(torch.tensor([toks]))[0].numpy()
        if args.logits_out:
            np.save(args.logits_out, logits.astype(np.float32))
        print(f"logits [{logits.shape[0]}, {logits.shape[1]}] argmax {logits.argmax(-1).tolist()}")


if __name__ == "__main__":
    main()
