#!/usr/bin/env bash
# `kvcache op-test --threads 1|2` on cases big enough to share attention over the pool (the
# example cases hold at most 64 keys, below attend()'s 2^18 multiply-add threshold, so their
# --threads 2 run is one thread): a 1100-token prefill (1100 x 1101 / 2 keys x 8 q heads x 128
# dims: the shared-prefix groups), then one-token decodes over 1101+ keys (>= 2 x 512 keys with
# 2 (token, kv head) pairs < 4 x 2 threads: the key range is split and merged), in the sequence
# layout (f16) and the cell layout (bf16, with a fork decoding beside its source). Every output
# is checked by scripts/op_test_oracle.py at its tolerance.
# Usage: op_test_threads_test.sh KVCACHE_BIN REPO_DIR WORK_DIR
set -euo pipefail
bin=$1; repo=$2; work=$3
rm -rf "$work"
mkdir -p "$work"
py=/usr/bin/python3
"$py" - "$work" <<'PY'
import json, os, sys
import numpy as np
root = sys.argv[1]
rng = np.random.default_rng(3)
geo = [{"kv_heads": 2, "head_dim": 64, "value_dim": 64, "window": 0}]
def arrays(d, name, t):
    for part, heads in (("q", 8), ("k", 2), ("v", 2)):
        np.save(os.path.join(d, f"{name}_{part}.npy"),
                rng.standard_normal((t, heads, 64)).astype("<f4"))
    return {"layer": 0, "q": f"{name}_q.npy", "k": f"{name}_k.npy", "v": f"{name}_v.npy"}
def case(name, kind, dtype, steps):
    d = os.path.join(root, name)
    os.makedirs(d)
    out = []
    for i, (verbs, ids, t) in enumerate(steps):
        st = {"verbs": verbs, "layers": [arrays(d, f"s{i}", t)]}
        if ids is not None:
            st["seq_ids"] = ids
        out.append(st)
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump({"kind": kind, "geometry": geo, "q_heads": [8],
                   "config": {"capacity": 2048, "kv_dtype": dtype}, "steps": out}, f)
case("sequence_long_f16", "sequence", "f16",
     [([], None, 1100), ([], None, 1), ([], None, 1)])
case("cell_long_fork_bf16", "cell", "bf16",
     [([{"op": "seq_new"}], [0] * 1100, 1100), ([{"op": "seq_clone", "src": 0}], [0, 1], 2),
      ([], [1], 1)])
PY
for threads in 1 2; do
  "$py" "$repo/scripts/op_test_oracle.py" --kvcache "$bin" --cases "$work" --threads "$threads"
done
