#!/usr/bin/env bash
# `kvcache run --draft ...` end to end on the embedded model: greedy output with n-gram drafts
# and with the model as its own draft model equals plain greedy output (both layouts; with
# --draft-k acceptance every step verifies 9 rows, whose attention must take the same key
# blocks as a decode step's, or a block value type's codes differ), the
# draft fields of --json and the timing line, and flag errors (exit 2 naming the flag; a draft
# model with another vocabulary is refused naming the first differing token).
# Usage: speculative_cli_test.sh KVCACHE_BIN REPO_DIR
set -euo pipefail
bin=$1 repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

. "$(dirname "$0")/../embedded_model.sh"
require_embedded_model

prompt="the cat sat on the mat. the dog sat on the log. the cat sat on the mat. the dog sat on the"
tokens() { "$bin" run --json --prompt "$prompt" --max-new-tokens 80 "$@" 2>"$tmp/err" |
             /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
check_draft_line() {
  grep -Eq "draft (ngram:[0-9]+|model:tiny|self:q[48]_0|self:q[456]_k): acceptance [0-9.]+% \([0-9]+/[0-9]+\), [0-9.]+ tokens/step" "$tmp/err" ||
    { cat "$tmp/err" >&2; fail "$*: no draft figures on the timing line"; }
}
for cache in sequence cell; do
  for kv in f32 q8_0; do
    want=$(tokens --cache "$cache" --kv-dtype "$kv")
    for draft in "--draft ngram" "--draft ngram:1 --draft-max 3" "--draft ngram:5 --draft-max 15" \
                 "--draft-model $repo/models/tiny.gguf" "--draft self:q8_0" "--draft self:q4_0" "--draft self:q4_k" \
                 "--draft-model $repo/models/tiny.gguf --draft-k acceptance"; do
      got=$(tokens --cache "$cache" --kv-dtype "$kv" $draft)
      [ "$got" = "$want" ] || fail "$cache $kv $draft: greedy tokens differ: $got vs $want"
      check_draft_line "$cache $kv $draft"
    done
  done
done

"$bin" run --json --prompt "$prompt" --max-new-tokens 40 --draft-model "$repo/models/tiny.gguf" \
  2>/dev/null > "$tmp/self.json"
/usr/bin/python3 - "$tmp/self.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["draft"]
assert d["mode"] == "model:tiny" and d["draft_max"] == 8, d
# The model as its own draft keeps every draft. How many steps draft depends on measured
# costs (adaptive K picks the width with the most tokens per second; on this small model a
# wide verification costs about its row count, so it soon decodes plainly), but the first
# step always drafts (two: AdaptiveK::kFirstMeasured).
assert d["drafted"] >= 2 and d["accepted"] == d["drafted"] and d["acceptance"] == 1.0, d
assert abs(d["tokens_per_step"] - (d["steps"] + d["accepted"]) / d["steps"]) < 1e-12, d
PY

expect_error() {  # expect_error CODE PATTERN args...
  local code=$1 pattern=$2 rc=0; shift 2
  "$bin" run --max-new-tokens 2 "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = "$code" ] || { cat "$tmp/err" >&2; fail "run $* exited $rc, expected $code"; }
  grep -Eq -e "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "run $*: no '$pattern'"; }
}
expect_error 2 "--draft: 'foo' is not a drafter" --draft foo
expect_error 2 "--draft: 'ngram:0' is not a drafter" --draft ngram:0
expect_error 2 "--draft: 'self:f16' is not a drafter, expected .* self:q8_0, self:q4_0, self:q4_k, self:q5_k or self:q6_k" --draft self:f16
expect_error 2 "--draft-max: Value 0 not in range" --draft ngram --draft-max 0
expect_error 2 "--draft-max 16: a verification step is 17 tokens .* step width .* is 16; expected --draft-max <= 15" \
  --draft ngram --draft-max 16
expect_error 2 "--draft-max 8: .* is 4; expected --draft-max <= 3" --draft ngram --draft-max 8 --max-step-tokens 4
expect_error 2 "--draft-max: needs --draft or --draft-model" --draft-max 4
expect_error 2 "--draft excludes --draft-model" --draft ngram --draft-model x.gguf
expect_error 1 "--draft-model: .*cannot open" --draft-model "$tmp/missing.gguf"
# Swap the spellings of tokens 0 and 1 in a copy of the model: same size, another vocabulary.
/usr/bin/python3 - "$repo/models/tiny.gguf" "$tmp/swapped.gguf" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
key = b"tokenizer.ggml.tokens"
i = d.find(key) + len(key) + 4 + 4 + 8  # value type, element type, count
n0 = struct.unpack_from("<Q", d, i)[0]; a = i + 8
n1 = struct.unpack_from("<Q", d, a + n0)[0]; b = a + n0 + 8
assert n0 == n1, (n0, n1)
d[a:a + n0], d[b:b + n1] = d[b:b + n1], d[a:a + n0]
open(sys.argv[2], "wb").write(d)
PY
expect_error 1 "--draft-model: draft vocabulary: token 0 is \".*\" in the draft's vocabulary and \".*\" in the target's" \
  --draft-model "$tmp/swapped.gguf"
echo PASS
