#!/usr/bin/env bash
# Hostile and mistaken input through the kvcache CLI: every failure is a message and exit 1,
# never an abort. Pins: `run --json` with non-UTF-8 generated text; NaN sampling flags; an
# empty --prompt-ids; a prompt over the capacity; an allocation failure naming its bytes;
# FIFOs, directories and devices refused by name; a big-endian GGUF; export refusing an
# unsupported tokenizer.json (unless --no-tokenizer), its own input as --out, and a file the
# loader would refuse. Usage: cli_hardening_test.sh KVCACHE_BIN REPO_DIR
set -euo pipefail
bin=$1; repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3

# expect_fail PATTERN cmd...: exit code 1 (not a signal, not usage) and PATTERN on stderr.
expect_fail() {
  local pattern=$1; shift
  local rc=0
  timeout 60 "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/err" >&2; fail "$* exited $rc, expected 1"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "$*: no '$pattern'"; }
}

. "$repo/tests/embedded_model.sh"
have_model=1
has_embedded_model || have_model=0

if [ $have_model = 1 ]; then
  # Sampling at temperature 2 produces bytes that are not UTF-8 within a few seeds.
  replaced=0
  for seed in $(seq 1 30); do
    rc=0
    "$bin" run --json --temperature 2 --seed "$seed" --max-new-tokens 64 >"$tmp/j" 2>"$tmp/err" || rc=$?
    [ $rc = 0 ] || { cat "$tmp/err" >&2; fail "run --json seed $seed exited $rc"; }
    n=$($py -c 'import json,sys; j=json.load(open(sys.argv[1])); assert len(j["tokens"]) == 64; print(j["text"].count("\ufffd"))' "$tmp/j")
    [ "$n" -gt 0 ] && replaced=1
    "$bin" run --temperature 2 --seed "$seed" --max-new-tokens 64 >/dev/null 2>&1 ||
      fail "streamed run seed $seed failed"
  done
  [ $replaced = 1 ] || fail "no seed produced invalid UTF-8: the test no longer exercises U+FFFD"

  expect_fail "--temperature: sampler: temperature = nan" "$bin" run --temperature nan
  expect_fail "--top-p: sampler: top_p = nan" "$bin" run --top-p nan --temperature 1
  expect_fail "--prompt-ids: \"\" is not an integer" "$bin" run --prompt-ids ""
  long=$(head -c 100 /dev/zero | tr '\0' a)
  expect_fail "the prompt is 100 tokens, but the cache holds 20 positions; raise --capacity" \
    "$bin" run --capacity 20 --prompt "$long"
  expect_fail "the prompt is 100 tokens" "$bin" run --capacity 20 --prompt "$long" --dump-logits "$tmp/l.npy"
  [ ! -e "$tmp/l.npy" ] || fail "--dump-logits wrote a file for a refused prompt"
  ASAN_OPTIONS=allocator_may_return_null=1 expect_fail \
    "pool.reserve: allocating [0-9]* bytes (2000000000 rows of K and V) failed" \
    "$bin" run --capacity 2000000000 --initial-capacity 2000000000
fi

# Files that are not regular files, refused by name without blocking.
mkfifo "$tmp/fifo.gguf"
mkdir "$tmp/dir.gguf"
expect_fail "is a FIFO" "$bin" inspect "$tmp/fifo.gguf"
expect_fail "is a FIFO" "$bin" run "$tmp/fifo.gguf"
expect_fail "is a directory" "$bin" inspect "$tmp/dir.gguf"
expect_fail "is a character device" "$bin" inspect /dev/zero
printf 'GGUF\0\0\0\3' > "$tmp/be.gguf"; head -c 56 /dev/zero >> "$tmp/be.gguf"
expect_fail "big-endian GGUF" "$bin" inspect "$tmp/be.gguf"
bad=$'\xff'  # a file name that is not UTF-8 still prints as JSON
cp "$repo/fuzz/corpus/gguf/valid_kvcache.gguf" "$tmp/m$bad.gguf"
"$bin" inspect "$tmp/m$bad.gguf" --json > "$tmp/i.json" || fail "inspect --json on a non-UTF-8 path"
$py -c 'import json,sys; assert "\ufffd" in json.load(open(sys.argv[1]))["file"]' "$tmp/i.json" ||
  fail "inspect --json file name"
mkdir "$tmp/case"
ln -s /etc/hostname "$tmp/case/case.json"
expect_fail "outside the directory" "$bin" op-test "$tmp/case" --out "$tmp/case_out"

# export: a tiny checkpoint (vocab 300, so raw bytes load without a tokenizer).
$py "$repo/scripts/make_tiny_hf.py" --out "$tmp/hf" --arch llama >/dev/null
echo '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' > "$tmp/hf/tokenizer.json"
expect_fail "tokenizer.json: model type 'Unigram' is not supported.*--no-tokenizer" \
  "$bin" export --from-hf "$tmp/hf" --out "$tmp/m.gguf"
[ ! -e "$tmp/m.gguf" ] && [ ! -e "$tmp/m.gguf.partial" ] || fail "a refused export left a file"
"$bin" export --from-hf "$tmp/hf" --out "$tmp/m.gguf" --no-tokenizer 2>"$tmp/err" ||
  { cat "$tmp/err" >&2; fail "export --no-tokenizer"; }
grep -q "tokenizer: none (raw bytes)" "$tmp/err" || fail "export --no-tokenizer report"
sum=$(md5sum < "$tmp/hf/model.safetensors")
expect_fail "is the checkpoint's own file" "$bin" export --from-hf "$tmp/hf" \
  --out "$tmp/hf/model.safetensors" --no-tokenizer
[ "$(md5sum < "$tmp/hf/model.safetensors")" = "$sum" ] || fail "export overwrote its input"

# A qwen2 checkpoint with head_dim 5: export would write it, the loader refuses an odd RoPE
# dimension, so export refuses and leaves nothing behind.
$py - "$tmp/odd" <<'PY'
import json, os, struct, sys
import numpy as np
d = sys.argv[1]; os.makedirs(d)
cfg = {"model_type": "qwen2", "hidden_size": 10, "num_hidden_layers": 1, "num_attention_heads": 2,
       "num_key_value_heads": 1, "head_dim": 5, "intermediate_size": 4, "vocab_size": 300,
       "tie_word_embeddings": True}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
shapes = {"model.embed_tokens.weight": [300, 10], "model.norm.weight": [10],
          "model.layers.0.input_layernorm.weight": [10],
          "model.layers.0.post_attention_layernorm.weight": [10],
          "model.layers.0.self_attn.q_proj.weight": [10, 10],
          "model.layers.0.self_attn.k_proj.weight": [5, 10],
          "model.layers.0.self_attn.v_proj.weight": [5, 10],
          "model.layers.0.self_attn.o_proj.weight": [10, 10],
          "model.layers.0.mlp.gate_proj.weight": [4, 10], "model.layers.0.mlp.up_proj.weight": [4, 10],
          "model.layers.0.mlp.down_proj.weight": [10, 4]}
header, data = {}, b""
for name, shape in shapes.items():
    raw = np.full(shape, 0.01, dtype="<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
    data += raw
h = json.dumps(header).encode()
open(os.path.join(d, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
expect_fail "the result would not load: load model: qwen2.rope.dimension_count = 5" \
  "$bin" export --from-hf "$tmp/odd" --out "$tmp/odd.gguf"
[ ! -e "$tmp/odd.gguf" ] && [ ! -e "$tmp/odd.gguf.partial" ] || fail "refused export left a file"
if [ $have_model = 0 ]; then
  echo "SKIP: the checks on the embedded model (this kvcache embeds none); the others passed"
  exit 77
fi
echo "CLI hardening: all checks passed"
