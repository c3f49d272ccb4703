#!/usr/bin/python3
"""Writes the example cases of `kvcache op-test` into examples/op_test/<case>/ (SPEC §9).

Deterministic (fixed seed); rerun after changing a case and commit the output. Arrays are small
float32 .npy files. Expected results are not stored here: scripts/op_test_oracle.py computes
them independently and compares with what the binary writes.
Run: /usr/bin/python3 scripts/make_op_test_examples.py [--out examples/op_test]
"""
import argparse
import json
import os
import shutil

import numpy as np

RNG = np.random.default_rng(20261129)


class CaseWriter:
    """Builds one case: tracks the next position of each sequence to fill in "positions"."""

    def __init__(self, name, kind, geometry, config, q_heads, **extra):
        self.name, self.kind, self.geometry, self.q_heads = name, kind, geometry, q_heads
        self.case = dict(kind=kind, geometry=geometry, config=config, q_heads=q_heads, **extra)
        self.case["steps"] = []
        self.arrays = {}
        self.next_pos = {0: 0} if kind == "sequence" else {}

    def track(self, verbs):
        for v in verbs:  # positions only; the oracle decides what was refused
            op = v["op"]
            if op == "seq_new":
                self.next_pos[min(set(range(300)) - set(self.next_pos))] = 0
            elif op == "seq_clone" and v["src"] in self.next_pos:
                upto = v.get("upto")
                p = self.next_pos[v["src"]]
                self.next_pos[min(set(range(300)) - set(self.next_pos))] = p if upto is None else min(p, upto)
            elif op == "seq_rm":
                self.next_pos.pop(v["seq"], None)
            elif op == "rewind" and v.get("seq", 0) in self.next_pos:
                s = v.get("seq", 0)
                if 0 <= v["pos"] <= self.next_pos[s]:
                    self.next_pos[s] = v["pos"]
            elif op == "clear":
                self.next_pos = {0: 0} if self.kind == "sequence" else {}

    def step(self, verbs=(), seq_ids=None, layers=(), positions=None, advance=True,
             attend_only=(), t=None):
        verbs = list(verbs)
        self.track(verbs)
        s = len(self.case["steps"])
        step = {"verbs": verbs}
        if layers:
            n = t if t is not None else (len(seq_ids) if seq_ids is not None else 1)
            if self.kind == "cell":
                step["seq_ids"] = seq_ids
                if positions is None:
                    nxt = dict(self.next_pos)
                    positions = []
                    for i in seq_ids:
                        positions.append(nxt.get(i, 0))
                        nxt[i] = nxt.get(i, 0) + 1
                step["positions"] = positions
            elif positions is not None:
                step["positions"] = positions
            step["layers"] = []
            for layer in layers:
                shared = isinstance(layer, tuple)  # ("shared", layer): attend only
                layer = layer[1] if shared else layer
                g = self.geometry[layer]
                entry = {"layer": layer, "q": f"s{s}_l{layer}{'_shared' if shared else ''}_q.npy"}
                self.arrays[entry["q"]] = RNG.standard_normal((n, self.q_heads[layer], g["head_dim"]))
                if layer not in attend_only and not shared:
                    entry["k"], entry["v"] = f"s{s}_l{layer}_k.npy", f"s{s}_l{layer}_v.npy"
                    self.arrays[entry["k"]] = RNG.standard_normal((n, g["kv_heads"], g["head_dim"]))
                    self.arrays[entry["v"]] = RNG.standard_normal((n, g["kv_heads"], g["value_dim"]))
                step["layers"].append(entry)
            if advance:
                if self.kind == "sequence":
                    self.next_pos[0] += n
                else:
                    for i in seq_ids:
                        self.next_pos[i] = self.next_pos.get(i, 0) + 1
        self.case["steps"].append(step)

    def write(self, root):
        d = os.path.join(root, self.name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(self.case, f, indent=1)
            f.write("\n")
        for name, a in self.arrays.items():
            np.save(os.path.join(d, name), np.ascontiguousarray(a, dtype="<f4"))


def layer(kv, hd, vd=None, w=0):
    return {"kv_heads": kv, "head_dim": hd, "value_dim": vd or hd, "window": w}


def seq_wrap_rewind():
    c = CaseWriter("sequence_full_sliding_wrap_rewind", "sequence",
                   [layer(2, 8), layer(1, 8, 4, w=3)],
                   {"capacity": 24, "kv_dtype": "f32", "initial_capacity": 1, "max_write": 2},
                   [4, 2])
    for t in [2, 2, 1, 2, 2]:  # the ring of 3 + 2 - 1 = 4 slots wraps twice
        c.step(layers=[0, 1], t=t)
    c.step(verbs=[{"op": "rewind", "pos": 2}, {"op": "rewind", "pos": 7}], layers=[0, 1], t=1)
    c.step(verbs=[{"op": "rewind", "pos": 9}], layers=[0, 1], t=2)  # 9 > length 8: refused
    c.step(verbs=[{"op": "clear"}], layers=[0, 1], t=2)
    return c


def cell_forks():
    c = CaseWriter("cell_forks_rm_refill", "cell", [layer(1, 8), layer(1, 8, w=2)],
                   {"capacity": 16, "kv_dtype": "f32", "initial_capacity": 2}, [2, 1])
    c.step(verbs=[{"op": "seq_new"}, {"op": "seq_new"}], seq_ids=[0, 1, 0, 1, 0], layers=[0, 1])
    # Sequence 0 is at 3; its sliding(2) pool holds position 2 only: a clone up to 3 is exact.
    c.step(verbs=[{"op": "seq_clone", "src": 0, "upto": 3}], seq_ids=[2, 0, 1], layers=[0, 1])
    c.step(verbs=[{"op": "seq_rm", "seq": 1}, {"op": "rewind", "seq": 0, "pos": 0},
                  {"op": "seq_new"}], seq_ids=[1, 1, 1, 0, 2], layers=[0, 1])
    c.step(verbs=[{"op": "seq_clone", "src": 2}, {"op": "seq_rm", "seq": 7}],
           seq_ids=[3, 2], layers=[0, 1])
    # Sequence 2 is at 6: back to 2 or a clone up to 2 needs position 1, long freed (refused).
    c.step(verbs=[{"op": "rewind", "seq": 2, "pos": 2}, {"op": "seq_clone", "src": 2, "upto": 2}],
           seq_ids=[2], positions=[6], layers=[0, 1])
    return c


def gqa_value_dim():
    c = CaseWriter("sequence_gqa_value_dim", "sequence", [layer(2, 16, 8)],
                   {"capacity": 8, "kv_dtype": "f32"}, [8], scale=0.3)
    c.step(layers=[0], t=3)
    c.step(layers=[0], t=1)
    return c


def softcap_shared():
    c = CaseWriter("cell_softcap_attend_only", "cell", [layer(2, 8), layer(1, 8, 6, w=2)],
                   {"capacity": 12, "kv_dtype": "f32"}, [2, 3], scale=1.0, softcap=1.5)
    c.step(verbs=[{"op": "seq_new"}], seq_ids=[0, 0, 0], layers=[0, 1])
    c.step(seq_ids=[0, 0], layers=[0, 1, ("shared", 0), ("shared", 1)])
    return c


def dtypes():
    out = []
    for dt, kind in [("f16", "sequence"), ("bf16", "cell")]:
        c = CaseWriter(f"{kind}_{dt}", kind, [layer(2, 16), layer(1, 8, w=3)],
                       {"capacity": 16, "kv_dtype": dt, "max_write": 3}, [4, 1])
        if kind == "cell":
            c.step(verbs=[{"op": "seq_new"}, {"op": "seq_new"}], seq_ids=[0, 1, 1], layers=[0, 1])
            c.step(seq_ids=[1, 0, 0], layers=[0, 1])
        else:
            c.step(layers=[0, 1], t=3)
            c.step(layers=[0, 1], t=3)
            c.step(layers=[0, 1], t=1)
        out.append(c)
    return out


def refused():
    c = CaseWriter("cell_refused_steps", "cell", [layer(1, 8)],
                   {"capacity": 4, "kv_dtype": "f32"}, [1])
    c.step(verbs=[{"op": "seq_new"}], seq_ids=[0, 0, 0], layers=[0])
    c.step(seq_ids=[0, 0], layers=[0], advance=False)              # 2 tokens, 1 free cell
    c.step(seq_ids=[5], layers=[0], advance=False)                 # sequence 5 not live
    c.step(seq_ids=[0], layers=[0], positions=[7], advance=False)  # position must be 3
    c.step(seq_ids=[0], layers=[0], attend_only=(0,), advance=False)  # nothing written yet
    c.step(verbs=[{"op": "seq_clone", "src": 0, "upto": 1}, {"op": "rewind", "seq": 0, "pos": 9}],
           seq_ids=[0], layers=[0])
    s = CaseWriter("sequence_refused_steps", "sequence", [layer(1, 8, w=2)],
                   {"capacity": 6, "kv_dtype": "f32"}, [1])
    s.step(layers=[0], t=3, advance=False)          # wider than max_write = window = 2
    s.step(layers=[0], t=2)
    s.step(layers=[0], t=1, positions=[5], advance=False)  # position must be 2
    s.step(verbs=[{"op": "seq_new"}, {"op": "rewind", "pos": 0}], layers=[0], t=2)  # floor is 0
    s.step(layers=[0], t=2)
    s.step(layers=[0], t=2)
    s.step(layers=[0], t=1, advance=False)          # capacity 6 is full
    return [c, s]


def max_seqs_pool():
    # max_seqs = 2 bounds the ids and sizes the sliding(3) pool: 2 * (3 - 1) + max_write 2 = 6.
    c = CaseWriter("cell_max_seqs_sliding_pool", "cell", [layer(1, 8), layer(1, 8, w=3)],
                   {"capacity": 16, "kv_dtype": "f32", "max_write": 2, "max_seqs": 2}, [2, 1])
    c.step(verbs=[{"op": "seq_new"}] * 3, seq_ids=[0, 0, 0, 1, 1, 1], layers=[0, 1])  # 3rd: null
    c.step(seq_ids=[0, 1], layers=[0, 1])  # the sliding pool holds 2 + 2, 2 cells free
    c.step(seq_ids=[0, 0, 1], layers=[0, 1], advance=False)  # 3 > 2 sliding cells free: refused
    c.step(verbs=[{"op": "seq_rm", "seq": 1}, {"op": "seq_new"}], seq_ids=[0, 0, 1],
           layers=[0, 1])
    return c


def quantized():
    # q8_0 K and V through a sequence ring; q4_0 keys with f16 values over cell forks. Widths
    # are multiples of 32 (a block); the oracle rounds K/V by the GGUF block rule.
    s = CaseWriter("sequence_q8_0", "sequence", [layer(2, 32), layer(1, 64, 32, w=3)],
                   {"capacity": 16, "kv_dtype": "q8_0", "max_write": 3}, [4, 3])
    for t in (3, 3, 2, 1):
        s.step(layers=[0, 1], t=t)
    c = CaseWriter("cell_q4_0_keys_f16_values", "cell", [layer(2, 64, 32), layer(1, 32, w=4)],
                   {"capacity": 24, "kv_dtype": "f16", "k_dtype": "q4_0", "max_write": 3},
                   [2, 4])
    c.step(verbs=[{"op": "seq_new"}], seq_ids=[0, 0, 0], layers=[0, 1])
    c.step(verbs=[{"op": "seq_clone", "src": 0}], seq_ids=[0, 1], layers=[0, 1])
    c.step(seq_ids=[1, 1, 0], layers=[0, 1])
    return [s, c]


def sinks():
    # Learned attention sinks (one logit per q head) on a sequence ring with a full layer, and on
    # cell forks over a sliding pool; one sink far above the logits takes nearly all its head's
    # weight, one far below nearly none.
    sq = layer(2, 16)
    sq["sinks"] = [0.5, -1.0, 8.0, -20.0]
    sw = layer(1, 8, 4, w=3)
    sw["sinks"] = [0.0, 1.5]
    s = CaseWriter("sequence_sinks_ring", "sequence", [sq, sw],
                   {"capacity": 16, "kv_dtype": "f32", "max_write": 2}, [4, 2])
    for t in (2, 2, 1, 2, 2):  # the ring of 3 + 2 - 1 = 4 slots wraps
        s.step(layers=[0, 1], t=t)
    cf = layer(1, 32, 32, w=2)
    cf["sinks"] = [2.0, -0.5, 0.25]
    c = CaseWriter("cell_sinks_forks_q8_0", "cell", [layer(2, 32), cf],
                   {"capacity": 16, "kv_dtype": "q8_0", "max_write": 3}, [2, 3])
    c.step(verbs=[{"op": "seq_new"}], seq_ids=[0, 0, 0], layers=[0, 1])
    c.step(verbs=[{"op": "seq_clone", "src": 0}], seq_ids=[0, 1], layers=[0, 1])
    c.step(seq_ids=[1, 1, 0], layers=[0, 1])
    return [s, c]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "examples", "op_test"))
    args = ap.parse_args()
    cases = [seq_wrap_rewind(), cell_forks(), gqa_value_dim(), softcap_shared(), *dtypes(),
             *refused(), max_seqs_pool(), *quantized(), *sinks()]
    for c in cases:
        c.write(args.out)
    print(f"wrote {len(cases)} cases to {os.path.normpath(args.out)}")


if __name__ == "__main__":
    main()
