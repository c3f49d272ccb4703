"""Speculative decoding benchmark: plain decoding and each drafter on the same files, rounds
alternating in one sitting; one JSON line per run on stdout (docs/speculative.md).

  /usr/bin/python3 scripts/bench_speculative.py [--rounds 3] [--tokens 200] [--dir D]
      [--kvcache build/tools/kvcache] [--llama-cpp DIR] [--isa avx2]

Makes once, in --dir: the benchmark-shape F16 model (scripts/make_bench_model.py) with the
Llama 2 vocabulary of ../shared/fixtures (so text prompts work and another engine reads the
same file) and its `kvcache quantize` Q4_K_M copy. Runs, greedy, --tokens new tokens each:
  (a) the F16 target with --draft self:q4_0 and with the Q4_K_M copy as --draft-model,
  (b) the F16 target with --draft ngram on each prompt of examples/speculative,
  (c) the embedded model (256 positions) with --draft ngram on a short repetitive prompt,
each beside plain decoding of the same model and prompt in the same round. A line gives decode
tok/s, the speed-up over that plain run, and `kvcache run --json`'s drafting figures (alpha, k,
c, v in plain steps and the ideal speed-up E(k) / (k c + v)); `of_ideal` = speed-up / ideal.
With --llama-cpp DIR (the bin folder of a llama.cpp build made elsewhere), the same files and
prompts also go through its llama-speculative (the same draft file, --spec-draft-n-max 8) and
llama-lookup (n-grams), beside its plain decode rate from llama-bench -n TOKENS.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE_VOCAB = os.path.join(ROOT, "..", "shared", "fixtures", "vocab", "ggml-vocab-llama-spm.gguf")
EXAMPLES = os.path.join(ROOT, "examples", "speculative")
SHORT = "the cat sat on the mat. the dog sat on the log. the cat sat on the mat. the dog sat on the"


def sh(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr


def models(args):
    os.makedirs(args.dir, exist_ok=True)
    f16 = os.path.join(args.dir, "spec-f16.gguf")
    q4 = os.path.join(args.dir, "spec-q4_k_m.gguf")
    if not os.path.exists(f16):
        if not os.path.exists(FIXTURE_VOCAB):
            sys.exit(f"no vocabulary at {FIXTURE_VOCAB} (the shared fixtures)")
        sh([sys.executable, os.path.join(HERE, "make_bench_model.py"), "--out", f16,
            "--context", "4096", "--vocab", FIXTURE_VOCAB])
    if not os.path.exists(q4):
        sh([args.kvcache, "quantize", f16, q4, "--type", "q4_k_m"])
    return f16, q4


def ours(args, model, prompt, draft):
    tokens = args.tokens if model else min(args.tokens, 256 - len(prompt.encode()) - 1)
    env = dict(os.environ)
    if args.isa:
        env["KVCACHE_ISA"] = args.isa
    cmd = [args.kvcache, "run"] + ([model] if model else []) + [
        "--prompt", prompt, "--max-new-tokens", str(tokens), "--ignore-eos", "--threads",
        str(args.threads), "--json"] + draft
    j = json.loads(sh(cmd, env).splitlines()[0])
    d = j.get("draft", {})
    return {"decode_tok_s": j["decode_tokens_per_s"], "acceptance": d.get("acceptance"),
            "drafted": d.get("drafted"), "tokens_per_step": d.get("tokens_per_step"),
            "figures": d.get("figures")}


def theirs(args, tool, model, prompt, extra):
    out = sh([os.path.join(args.llama_cpp, tool), "-m", model, "-p", prompt, "-n",
              str(args.tokens), "-t", str(args.threads), "--temp", "0", "-c", "4096",
              "--seed", "1"] + extra)
    speed = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+)", out)
    acc = re.search(r"accept\s+=\s+([\d.]+)%", out)
    return {"decode_tok_s": float(speed.group(3)) if speed else None,
            "acceptance": float(acc.group(1)) / 100 if acc else None}


def theirs_plain(args, model):
    out = sh([os.path.join(args.llama_cpp, "llama-bench"), "-m", model, "-p", "0", "-n",
              str(args.tokens), "-t", str(args.threads), "-r", "1", "-o", "json"])
    return {"decode_tok_s": json.loads(out[out.index("["):])[0]["avg_ts"]}


def emit(row, plain):
    if plain and row.get("decode_tok_s") and plain.get("decode_tok_s"):
        row["speedup"] = round(row["decode_tok_s"] / plain["decode_tok_s"], 3)
        f = row.get("figures")
        if f and f.get("ideal_speedup"):
            row["of_ideal"] = round(row["speedup"] / f["ideal_speedup"], 3)
    print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/kvcache-spec-bench")
    ap.add_argument("--kvcache", default=os.path.join(ROOT, "build", "tools", "kvcache"))
    ap.add_argument("--llama-cpp", help="bin folder of a llama.cpp build, for a side-by-side")
    ap.add_argument("--isa", help="KVCACHE_ISA for our runs (e.g. avx2)")
    args = ap.parse_args()
    f16, q4 = models(args)
    prompts = {}
    for name in sorted(os.listdir(EXAMPLES)):
        with open(os.path.join(EXAMPLES, name)) as f:
            prompts[name.rsplit(".", 1)[0]] = f.read()
    first = next(iter(prompts))
    cases = [("f16", f16, first, [["--draft", "self:q4_0"], ["--draft-model", q4]])]
    cases += [("f16", f16, p, [["--draft", "ngram"]]) for p in prompts]
    prompts["repetitive"] = SHORT
    cases.append(("embedded", None, "repetitive", [["--draft", "ngram"]]))
    for r in range(args.rounds):
        for label, model, prompt, drafts in cases:
            base = {"round": r, "engine": "kvcache", "model": label, "prompt": prompt}
            plain = ours(args, model, prompts[prompt], [])
            emit(dict(base, drafter="none", **plain), None)
            for d in drafts:
                name = d[1] if d[0] == "--draft" else "model:" + os.path.basename(d[1])
                emit(dict(base, drafter=name, **ours(args, model, prompts[prompt], d)), plain)
            if args.llama_cpp and model:
                base["engine"] = "llama.cpp"
                plain = theirs_plain(args, model)
                emit(dict(base, drafter="none", **plain), None)
                for d in drafts:
                    if d[0] == "--draft-model":
                        row = theirs(args, "llama-speculative", model, prompts[prompt],
                                     ["-md", q4, "--spec-draft-n-max", "8"])
                        emit(dict(base, drafter="model:" + os.path.basename(q4), **row), plain)
                    elif d[1] == "ngram":
                        row = theirs(args, "llama-lookup", model, prompts[prompt], [])
                        emit(dict(base, drafter="ngram", **row), plain)


if __name__ == "__main__":
    main()
