#!/usr/bin/python3
"""Independent float64 oracle for `kvcache op-test` (SPEC §9).

For every case directory under --cases (a directory holding case.json) this runs
`kvcache op-test CASE --out TMP`, then replays the case on its own small model of the cache —
the sequence layout as one length with per-position K/V, the cell layout as cells with a
position and a set of owners — and compares: result.json ok / verb values / error code, and
every output array (float64 softmax over the keys each query may see, K/V rounded to the
storage types first: f16/bf16 rounding, q8_0/q4_0 blocks of 32 by the GGUF rule). Exits non-zero with a readable diff on any mismatch.
Run: /usr/bin/python3 scripts/op_test_oracle.py --kvcache build/tools/kvcache --cases examples/op_test
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

MAX_SEQS = 256
# One tolerance for every dtype: the model rounds K/V to the storage dtype exactly as the cache
# does, so what remains is float32 arithmetic (dot products, exp, the sum of the weights, the
# weighted sum of V, and the merge of key ranges split over threads). Each output is a convex
# combination of V rows, so its error is a few float32 ulps of the V scale: 32 ulps (32 * 2^-23
# = 3.8e-6) per unit of (1 + |expected|). Measured worst at every ISA ceiling and --threads 2:
# 3.8e-7 over the examples (<= 64 keys), 1.4e-6 over 1100 keys (tests/cpu/op_test_threads_test.sh,
# scalar). The storage rounding itself is ~2^-11 (f16) and 2^-8 (bf16) relative, 100-1000x this,
# so a kernel that skipped or doubled it fails (check_sensitivity proves it per case).
TOL = 32 * 2.0 ** -23
# Block types (q8_0 / q4_0): the oracle rounds K/V exactly as stored too, but the kernel also
# quantizes the query to int8 per block of 32 for block keys (<= 1/254 of a block's max |q|),
# so a case with a block type is held to 2e-2.
BLOCK_TOL = 2e-2
BLOCK_TYPES = ("q8_0", "q4_0")


class Refused(Exception):
    def __init__(self, code, why):
        super().__init__(why)
        self.code = code


def nearest(y):
    """C's lround (halves away from zero) of float32 values, exactly."""
    y = y.astype(np.float64)
    return np.sign(y) * np.floor(np.abs(y) + 0.5)


def round_blocks(dtype, a):
    """What storing rows (last axis, a multiple of 32) as q8_0 / q4_0 blocks and reading them
    back gives: f16 scale d; q8_0 d = max|x| / 127, q = clamp(round(x / d), -127, 127); q4_0 d =
    (the value of largest |x|) / -8, q = clamp(round(x / d) + 8, 0, 15) - 8; value = q * d."""
    b = a.reshape(a.shape[:-1] + (a.shape[-1] // 32, 32))
    if dtype == "q8_0":
        d = (np.abs(b).max(axis=-1, keepdims=True) / np.float32(127)).astype(np.float16)
        lo, hi, off = -127, 127, 0
    else:
        idx = np.abs(b).argmax(axis=-1)[..., None]
        d = (np.take_along_axis(b, idx, axis=-1) / np.float32(-8)).astype(np.float16)
        lo, hi, off = 0, 15, 8
    d = d.astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0))
    q = np.clip(nearest((b * inv).astype(np.float32)) + off, lo, hi) - off
    return (q * d.astype(np.float64)).reshape(a.shape)


def hadamard(a):
    """The cache's rotation (cpu/hadamard.h) of the last axis: power-of-two blocks, the largest
    that fit, each times the normalized Sylvester-Hadamard matrix. Its own inverse."""
    a = np.asarray(a, dtype=np.float64)
    out, at, width = np.empty_like(a), 0, a.shape[-1]
    while at < width:
        n = 1 << ((width - at).bit_length() - 1)
        i = np.arange(n)
        h = np.where(np.vectorize(lambda x: bin(x).count("1") % 2)(i[:, None] & i[None, :]), -1.0, 1.0)
        out[..., at:at + n] = a[..., at:at + n] @ h / math.sqrt(n)
        at += n
    return out


def rotated(cfg):
    """kv_rotate, or on when K or V is a block type (the cache's default)."""
    if "kv_rotate" in cfg:
        return bool(cfg["kv_rotate"])
    types = [cfg.get(f, cfg.get("kv_dtype", "f32")) for f in ("k_dtype", "v_dtype")]
    return any(t in ("q8_0", "q4_0") for t in types)


def round_to(dtype, a):
    a = np.asarray(a, dtype=np.float32)
    if dtype in ("q8_0", "q4_0"):
        return round_blocks(dtype, a)
    if dtype == "f16":
        return a.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        u = a.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return (u & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


class SequenceModel:
    """One sequence: length L; kv[layer][pos] = (k, v)."""

    def __init__(self, case):
        self.geo, self.cfg = case["geometry"], case["config"]
        self.cap = self.cfg["capacity"]
        self.mw = self.cfg.get("max_write")
        self.clear()

    def clear(self):
        self.length = 0
        self.kv = [dict() for _ in self.geo]
        return True

    def step_limit(self):
        lim = self.mw if self.mw else self.cap
        for g in self.geo:
            if g.get("window", 0) > 0:
                lim = min(lim, self.mw if self.mw else g["window"])
        return min(lim, self.cap)

    def floor(self):
        f = 0
        for g in self.geo:
            if g.get("window", 0) > 0:
                f = max(f, self.length - (self.mw if self.mw else g["window"]))
        return max(0, f)

    def verb(self, v):
        result = self.apply_verb(v)
        if v["op"] != "seq_clone" and result is not None and result is not False:
            self.open = {}  # an accepted verb (but a clone) ends the open step
        return result

    def apply_verb(self, v):
        op = v["op"]
        if op in ("seq_new", "seq_clone"):
            return None
        if op == "seq_rm":
            return False
        if op == "clear":
            return self.clear()
        if op == "rewind":
            p = v["pos"]
            if v.get("seq", 0) != 0 or p > self.length or p < self.floor():
                return False
            self.length = p
            return True
        raise ValueError(op)

    def admit(self, ids, positions):
        T = len(ids)
        if any(i != 0 for i in ids):
            raise Refused("not_found", "only sequence 0")
        if T > self.step_limit():
            raise Refused("invalid_argument", "wider than the step limit")
        if self.length + T > self.cap:
            raise Refused("resource_exhausted", "capacity")
        want = list(range(self.length, self.length + T))
        if positions is not None and list(positions) != want:
            raise Refused("invalid_argument", f"positions {positions} != {want}")
        return [(0, p) for p in want]

    def commit(self, T):
        self.length += T

    def write(self, layer, seq, pos, k, v):
        self.kv[layer][pos] = (k, v)

    def keys(self, layer, seq, pos):
        w = self.geo[layer].get("window", 0)
        lo = max(0, pos - w + 1) if w > 0 else 0
        return [self.kv[layer][p] for p in range(lo, pos + 1)]


class CellModel:
    """Cells with a position and owners; per sequence its cells by position.

    Per-window pools (SPEC §15): a Sliding(W) pool holds, per sequence between steps, only its
    cells at positions >= max(0, len - W + 1), so its use is derived from these lists (a
    sliding pool's cells correspond one-to-one to the full cells of the same tokens); it holds
    min(capacity, max_seqs * (W - 1) + M) cells (M = max_write or W; max_seqs from the config,
    MAX_SEQS when unset, also bounds the live ids). A clone or rewind that
    needs positions a sliding pool has freed is refused — except that a rewind right after a
    step (no accepted verb but seq_clone since) is judged on what the pools still hold, the
    window the step started from (speculative decoding takes back a step's own tokens). The
    full pool exists only when some layer is full."""

    def __init__(self, case):
        self.geo, self.cap = case["geometry"], case["config"]["capacity"]
        mw = case["config"].get("max_write")
        self.max_seqs = case["config"].get("max_seqs") or MAX_SEQS
        self.windows = sorted({g.get("window", 0) for g in self.geo} - {0})
        self.has_full = any(g.get("window", 0) == 0 for g in self.geo)
        self.pool_cap = {w: min(self.cap, self.max_seqs * (w - 1) + (mw or w)) for w in self.windows}
        self.clear()

    @staticmethod
    def low(n, w):
        return max(0, n - w + 1)

    def window_lost(self, length, p):
        """Whether continuing from p (<= length) needs positions a sliding pool freed."""
        return p > 0 and any(w > 1 and self.low(p, w) < self.low(length, w) for w in self.windows)

    def pool_used(self, w):
        return len({c for cells in self.seqs.values() for c in cells[self.low(len(cells), w):]})

    def clear(self):
        self.seqs = {}      # id -> list of cell ids, index = position
        self.cells = {}     # cell id -> {"pos", "owners", "kv": [per layer (k, v)]}
        self.open = {}      # the open step: id -> its length when the step started
        return True

    def new_id(self):
        for i in range(self.max_seqs):
            if i not in self.seqs:
                return i
        return None

    def verb(self, v):
        result = self.apply_verb(v)
        if v["op"] != "seq_clone" and result is not None and result is not False:
            self.open = {}  # an accepted verb (but a clone) ends the open step
        return result

    def apply_verb(self, v):
        op = v["op"]
        if op == "clear":
            return self.clear()
        if op == "seq_new":
            i = self.new_id()
            if i is not None:
                self.seqs[i] = []
            return i
        if op == "seq_clone":
            src, upto = v["src"], v.get("upto")
            if src not in self.seqs or (upto is not None and upto < 0):
                return None
            i = self.new_id()
            if i is None:
                return None
            n = len(self.seqs[src]) if upto is None else min(upto, len(self.seqs[src]))
            if self.window_lost(len(self.seqs[src]), n):
                return None
            cells = self.seqs[src][:n]
            for c in cells:
                self.cells[c]["owners"] += 1
            self.seqs[i] = list(cells)
            return i
        if op == "seq_rm":
            s = v["seq"]
            if s not in self.seqs:
                return False
            self.drop(s, 0)
            del self.seqs[s]
            return True
        if op == "rewind":
            s, p = v["seq"], v["pos"]
            if s not in self.seqs or p < 0 or p > len(self.seqs[s]):
                return False
            if self.window_lost(self.open.get(s, len(self.seqs[s])), p):
                return False
            self.drop(s, p)
            return True
        raise ValueError(op)

    def drop(self, s, p):
        for c in self.seqs[s][p:]:
            self.cells[c]["owners"] -= 1
            if self.cells[c]["owners"] == 0:
                del self.cells[c]
        self.seqs[s] = self.seqs[s][:p]

    def admit(self, ids, positions):
        if not ids:
            raise Refused("invalid_argument", "empty step")
        for i in ids:
            if i not in self.seqs:
                raise Refused("not_found", f"sequence {i} is not live")
        if self.has_full and len(ids) > self.cap - len(self.cells):
            raise Refused("resource_exhausted", "not enough free cells")
        for w in self.windows:
            if len(ids) > self.pool_cap[w] - self.pool_used(w):
                raise Refused("resource_exhausted", f"sliding({w}) pool full")
        nxt, out = {}, []
        for i, p in zip(ids, positions):
            want = nxt.get(i, len(self.seqs[i]))
            if p != want:
                raise Refused("invalid_argument", f"sequence {i} position {p} != {want}")
            nxt[i] = want + 1
            out.append((i, p))
        return out

    def commit(self, placed):
        self.open = {}
        for s, _ in placed:
            self.open.setdefault(s, len(self.seqs[s]))
        used = set(self.cells)
        cid = 0
        for s, p in placed:
            while cid in used:
                cid += 1
            used.add(cid)
            self.cells[cid] = {"pos": p, "owners": 1, "kv": [None] * len(self.geo)}
            self.seqs[s].append(cid)

    def write(self, layer, seq, pos, k, v):
        self.cells[self.seqs[seq][pos]]["kv"][layer] = (k, v)

    def keys(self, layer, seq, pos):
        w = self.geo[layer].get("window", 0)
        lo = max(0, pos - w + 1) if w > 0 else 0
        return [self.cells[c]["kv"][layer] for c in self.seqs[seq][lo: pos + 1]]


def attend(case, layer, q, keyss, scale, softcap):
    g = case["geometry"][layer]
    hq, hkv = q.shape[1], g["kv_heads"]
    out = np.zeros((q.shape[0], hq, g.get("value_dim", g["head_dim"])))
    for t in range(q.shape[0]):
        K = np.stack([k for k, _ in keyss[t]])  # [n, hkv, D]
        V = np.stack([v for _, v in keyss[t]])
        for h in range(hq):
            kh = h // (hq // hkv)
            s = K[:, kh, :] @ q[t, h].astype(np.float64) * scale
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            # A learned sink logit (geometry "sinks", one per q head) joins the maximum and the
            # denominator and brings no value.
            sink = float(g["sinks"][h]) if "sinks" in g else -np.inf
            m = max(s.max(), sink)
            p = np.exp(s - m)
            out[t, h] = (p / (p.sum() + np.exp(sink - m))) @ V[:, kh, :]
    return out


def simulate(case, case_dir, kv_dtype=None):
    """Expected result.json steps and outputs {file name: array}; kv_dtype overrides the case's."""
    model = SequenceModel(case) if case["kind"] == "sequence" else CellModel(case)
    cfg = case["config"]
    dtype = ((kv_dtype, kv_dtype) if kv_dtype else
             (cfg.get("k_dtype", cfg.get("kv_dtype", "f32")),
              cfg.get("v_dtype", cfg.get("kv_dtype", "f32"))))
    steps, outputs = [], {}
    for si, st in enumerate(case["steps"]):
        verbs = [model.verb(v) for v in st.get("verbs", [])]
        entry = {"ok": True, "verbs": verbs, "code": None}
        layers = st.get("layers", [])
        if layers:
            try:
                outputs.update(run_tokens(case, case_dir, model, st, si, dtype))
            except Refused as r:
                entry["ok"], entry["code"] = False, r.code
        steps.append(entry)
    return steps, outputs


def run_tokens(case, case_dir, model, st, si, dtype):
    load = lambda name: np.load(os.path.join(case_dir, name))
    layers = st["layers"]
    T = load(layers[0]["q"]).shape[0]
    ids = st.get("seq_ids") or [0] * T
    positions = st.get("positions")
    if positions is None and case["kind"] == "cell":
        nxt, positions = {}, []
        for i in ids:
            p = nxt.get(i, len(model.seqs.get(i, [])))
            positions.append(p)
            nxt[i] = p + 1
    written = set()
    for e in layers:  # the checks the tool makes before declaring
        g = case["geometry"][e["layer"]]
        if case["q_heads"][e["layer"]] % g["kv_heads"] != 0:
            raise Refused("invalid_argument", "q_heads")
        if "k" not in e and e["layer"] not in written:
            raise Refused("failed_precondition", "attend only before the layer is written")
        if "k" in e and e["layer"] in written:
            raise Refused("failed_precondition", "layer written twice")
        if "k" in e:
            written.add(e["layer"])
    placed = model.admit(ids, positions)
    model.commit(placed if case["kind"] == "cell" else T)
    outs, seen = {}, {}
    for e in layers:
        l = e["layer"]
        g = case["geometry"][l]
        if "k" in e:
            k, v = load(e["k"]), load(e["v"])
            if rotated(case["config"]):  # stored rotated, rounded in float32 as the cache does
                k, v = hadamard(k).astype(np.float32), hadamard(v).astype(np.float32)
            k, v = round_to(dtype[0], k), round_to(dtype[1], v)
            for t, (s, p) in enumerate(placed):
                model.write(l, s, p, k[t], v[t])
        scale = case.get("scale")
        scale = 1.0 / math.sqrt(g["head_dim"]) if scale is None else scale
        keyss = [model.keys(l, s, p) for s, p in placed]
        n = seen.get(l, 0)
        seen[l] = n + 1
        name = f"s{si}_l{l}" + (f"_{n}" if n else "") + ".npy"
        q = load(e["q"])
        rot = rotated(case["config"])
        o = attend(case, l, hadamard(q) if rot else q, keyss, scale, case.get("softcap", 0.0) or 0.0)
        outs[name] = hadamard(o) if rot else o
    return outs


def check_case(kvcache, case_dir, threads):
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    problems = []
    with tempfile.TemporaryDirectory() as out:
        cmd = [kvcache, "op-test", case_dir, "--out", out] + (["--threads", str(threads)] if threads else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            return [f"`{' '.join(cmd)}` exited {r.returncode}: {r.stderr.strip()}"]
        with open(os.path.join(out, "result.json")) as f:
            got = json.load(f)["steps"]
        want, outputs = simulate(case, case_dir)
        if len(got) != len(want):
            return [f"result.json has {len(got)} steps, expected {len(want)}"]
        for i, (g, w) in enumerate(zip(got, want)):
            if g["ok"] != w["ok"] or g["verbs"] != w["verbs"]:
                problems.append(f"step {i}: got ok={g['ok']} verbs={g['verbs']} "
                                f"(error {g['error']}), expected ok={w['ok']} verbs={w['verbs']}")
            elif not w["ok"] and (g["error"] or {}).get("code") != w["code"]:
                problems.append(f"step {i}: error {g['error']}, expected code {w['code']}")
        present = {n for n in os.listdir(out) if n.endswith(".npy")}
        if present != set(outputs):
            problems.append(f"output files {sorted(present)}, expected {sorted(outputs)}")
        cfg = case["config"]
        types = [cfg.get(f, cfg.get("kv_dtype", "f32")) for f in ("k_dtype", "v_dtype")]
        tol = BLOCK_TOL if any(t in BLOCK_TYPES for t in types) else TOL
        for name, ref in sorted(outputs.items()):
            if name not in present:
                continue
            a = np.load(os.path.join(out, name)).astype(np.float64)
            if a.shape != ref.shape:
                problems.append(f"{name}: shape {a.shape}, expected {ref.shape}")
                continue
            err = np.abs(a - ref) - tol * (1 + np.abs(ref))
            if (err > 0).any():
                idx = np.unravel_index(np.argmax(err), err.shape)
                problems.append(f"{name}: worst at {idx}: got {a[idx]:.7g}, expected {ref[idx]:.7g} "
                                f"(tolerance {tol:.3g} * (1 + |expected|))")
        problems += check_sensitivity(case, case_dir, outputs)
    return problems


def check_sensitivity(case, case_dir, outputs):
    """For an f16/bf16 case, the outputs computed without the storage rounding must fall outside
    the tolerance: otherwise the case could not tell a kernel that skipped the rounding."""
    cfg = case["config"]
    types = {cfg.get(f, cfg.get("kv_dtype", "f32")) for f in ("k_dtype", "v_dtype")}
    if not outputs or types == {"f32"} or types & set(BLOCK_TYPES) or len(types) > 1:
        return []  # block types carry the query quantization's tolerance
    dtype = types.pop()
    _, unrounded = simulate(case, case_dir, kv_dtype="f32")
    worst = max(float(np.max(np.abs(unrounded[n] - ref) / (1 + np.abs(ref)))) for n, ref in outputs.items())
    if worst <= TOL:
        return [f"{dtype} case: skipping the {dtype} rounding moves the outputs by at most {worst:.3g} "
                f"(relative), within the tolerance {TOL:.3g}: the case cannot see the rounding"]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvcache", required=True, help="path of the kvcache binary")
    ap.add_argument("--cases", required=True, help="directory of case directories")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    dirs = sorted(d for d in (os.path.join(args.cases, n) for n in os.listdir(args.cases))
                  if os.path.isfile(os.path.join(d, "case.json")))
    if not dirs:
        print(f"op_test_oracle: no case directories under {args.cases}", file=sys.stderr)
        return 1
    failed = 0
    for d in dirs:
        problems = check_case(args.kvcache, d, args.threads)
        print(f"{'FAIL' if problems else 'ok  '} {os.path.basename(d)}")
        for p in problems:
            print(f"     {p}")
        failed += bool(problems)
    print(f"{len(dirs) - failed}/{len(dirs)} cases agree with the oracle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
