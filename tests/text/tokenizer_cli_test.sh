#!/usr/bin/env bash
# `kvcache tokenize` on the shared vocabulary fixtures: with --no-bos --no-parse-special every
# case's ids equal its .out line (which carries one leading space); BOS by default, --json,
# special-token parsing, refusals. Then `kvcache run` encodes prompts with a SentencePiece
# vocabulary (BOS, <s> parsed or not) and stops at an end-of-generation id unless --ignore-eos.
# Usage: tokenizer_cli_test.sh KVCACHE_BIN FIXTURES_DIR SOURCE_DIR
set -euo pipefail
bin=$1
vocab=$2/vocab
src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3

for name in ggml-vocab-llama-spm.gguf ggml-vocab-gpt-2.gguf; do
  [ -f "$vocab/$name.inp" ] || fail "missing fixture $vocab/$name.inp"
  # One file per case, with its expected line (leading space dropped).
  n=$("$py" - "$vocab/$name" "$tmp/$name" <<'PY'
import sys
base, out = sys.argv[1], sys.argv[2]
texts = open(base + ".inp", "rb").read().split(b"\n__ggml_vocab_test__\n")[:-1]
want = open(base + ".out", "rb").read().split(b"\n")
for i, t in enumerate(texts):
    open(f"{out}.{i}.txt", "wb").write(t)
    open(f"{out}.{i}.want", "wb").write(want[i].lstrip(b" ") + b"\n")
print(len(texts))
PY
)
  [ "$n" -gt 10 ] || fail "$name: only $n cases"
  for ((i = 0; i < n; i++)); do
    "$bin" tokenize "$vocab/$name" --text-file "$tmp/$name.$i.txt" --no-bos --no-parse-special \
      > "$tmp/got" || fail "$name case $i: tokenize failed"
    cmp -s "$tmp/got" "$tmp/$name.$i.want" ||
      fail "$name case $i: got '$(cat "$tmp/got")', want '$(cat "$tmp/$name.$i.want")'"
  done
done

spm=$vocab/ggml-vocab-llama-spm.gguf
gpt2=$vocab/ggml-vocab-gpt-2.gguf
[ "$("$bin" tokenize "$spm" --text "Hello world")" = "1 15043 3186" ] || fail "SentencePiece BOS"
[ "$("$bin" tokenize "$spm" --text "Hello world" --no-bos)" = "15043 3186" ] || fail "--no-bos"
got=$("$bin" tokenize "$gpt2" --text "Hello<|endoftext|> world" --json)
[ "$got" = '{"ids":[15496,50256,995],"pieces":["Hello","<|endoftext|>","Ġworld"]}' ] ||
  fail "--json with a control token: $got"
got=$("$bin" tokenize "$gpt2" --text "<|endoftext|>" --no-parse-special)
[ "$got" = "27 91 437 1659 5239 91 29" ] || fail "--no-parse-special: $got"

expect_error() {  # expect_error CODE PATTERN args...: exit CODE (1 refused, 2 usage), PATTERN
  local code=$1 pattern=$2 rc=0; shift 2
  "$bin" tokenize "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = "$code" ] || { cat "$tmp/err" >&2; fail "tokenize $* exited $rc, expected $code"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "tokenize $*: no '$pattern'"; }
}
expect_error 2 "one of --text or --text-file" "$gpt2"
expect_error 2 "excludes" "$gpt2" --text a --text-file b
expect_error 1 "cannot read" "$gpt2" --text-file "$tmp/none.txt"
# An unknown pre-tokenizer and an unknown tokenizer model are refused by name.
PYTHONPATH="$src/scripts" "$py" - "$gpt2" "$tmp" <<'PY'
import sys, gguf_py
src, tmp = sys.argv[1], sys.argv[2]
r = gguf_py.read(src)
for key, value, name in (("tokenizer.ggml.pre", "gpt-5", "pre"), ("tokenizer.ggml.model", "t5", "model")):
    w = gguf_py.GGUFWriter()
    for k, v in r.kv.items():
        vt, elem = r.kv_types[k]
        w._add(k, vt, value if k == key else v, elem)
    w.write(f"{tmp}/{name}.gguf")
PY
expect_error 1 'tokenizer.ggml.pre = "gpt-5"' "$tmp/pre.gguf" --text hi
expect_error 1 'tokenizer.ggml.model = "t5"' "$tmp/model.gguf" --text hi

# `run` on a SentencePiece model: a random one-layer llama carrying the Llama 2 vocabulary.
PYTHONPATH="$src/scripts" "$py" - "$spm" "$tmp/spm_model.gguf" <<'PY'
import sys
import numpy as np
import gguf_py
voc = gguf_py.read(sys.argv[1])
w = gguf_py.GGUFWriter()
D, FF, H, V = 16, 32, 2, len(voc.kv["tokenizer.ggml.tokens"])
for k, v in (("block_count", 1), ("embedding_length", D), ("feed_forward_length", FF),
             ("context_length", 64), ("attention.head_count", H), ("attention.head_count_kv", H)):
    w.add_uint32("llama." + k, v)
w._add("general.architecture", gguf_py.STRING, "llama")
w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
for k, v in voc.kv.items():
    if k.startswith("tokenizer."):
        vt, elem = voc.kv_types[k]
        w._add(k, vt, v, elem)
rng = np.random.default_rng(1)
def t(*shape): return (rng.standard_normal(shape) * 0.1).astype(np.float32)
w.add_tensor("token_embd.weight", t(V, D))
for n, s in (("attn_norm", (D,)), ("ffn_norm", (D,))):
    w.add_tensor(f"blk.0.{n}.weight", np.ones(s, np.float32))
for n, s in (("attn_q", (D, D)), ("attn_k", (D, D)), ("attn_v", (D, D)), ("attn_output", (D, D)),
             ("ffn_gate", (FF, D)), ("ffn_up", (FF, D)), ("ffn_down", (D, FF))):
    w.add_tensor(f"blk.0.{n}.weight", t(*s))
w.add_tensor("output_norm.weight", np.ones(D, np.float32))
w.write(sys.argv[2])
PY
prompt_ids() { "$bin" run "$tmp/spm_model.gguf" --json --max-new-tokens 1 "$@" 2>/dev/null |
               "$py" -c 'import json,sys; print(json.load(sys.stdin)["prompt_ids"])'; }
got=$(prompt_ids --prompt "Hello world")
[ "$got" = "[1, 15043, 3186]" ] || fail "run with SentencePiece: BOS + ids expected, got $got"
got=$(prompt_ids --prompt "<s>Hi")
# After a special token the raw run gets the space prefix again: "▁Hi" (6324), not "Hi".
[ "$got" = "[1, 1, 6324]" ] || fail "run parses <s> in the prompt: got $got"
got=$(prompt_ids --prompt "<s>Hi" --no-parse-special)
[ "$got" = "[1, 529, 29879, 29958, 18567]" ] || fail "run --no-parse-special: got $got"

# `run` stops at an end-of-generation id: the embedded model with an eos_token_id added.
. "$src/tests/embedded_model.sh"
require_embedded_model
tokens() { "$bin" run "$@" --json --max-new-tokens 12 2>/dev/null |
           "$py" -c 'import json,sys; j=json.load(sys.stdin); print(j["tokens"], j["eog_token"])'; }
base=$(tokens)
read -r stop want < <("$py" -c '
import ast, sys
toks = ast.literal_eval(sys.argv[1].rsplit(" ", 1)[0])
stop = toks[3]
print(stop, str(toks[:toks.index(stop)]).replace(" ", ""))' "$base")
PYTHONPATH="$src/scripts" "$py" - "$src/models/tiny.gguf" "$tmp/eos.gguf" "$stop" <<'PY'
import sys, gguf_py
r = gguf_py.read(sys.argv[1])
w = gguf_py.GGUFWriter(r.alignment)
for k, v in r.kv.items():
    vt, elem = r.kv_types[k]
    w._add(k, vt, v, elem)
w.add_uint32("tokenizer.ggml.eos_token_id", int(sys.argv[3]))
for name, arr in r.tensors.items():
    w.add_tensor(name, arr)
w.write(sys.argv[2])
PY
got=$(tokens "$tmp/eos.gguf"); echo "free run: $base; eos $stop: $got"
[ "$got" = "$(echo "$want" | sed 's/,/, /g') $stop" ] || fail "run should stop before $stop: $got (free run $base)"
got=$(tokens "$tmp/eos.gguf" --ignore-eos)
[ "$got" = "$base" ] || fail "--ignore-eos should run on: $got vs $base"
echo "tokenize CLI: all checks passed"
