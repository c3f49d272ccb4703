#!/usr/bin/env bash
# Prompt checkpoints through `kvcache serve` on a Gemma-3-shaped random model (5 sliding(5) :
# 1 full layers, raw-byte ids): ten completions share a 93-byte prefix and differ after it.
# Every request after the first reports at least 80 cached tokens (the shared prefix rounded
# down to 16-token blocks), and each answer equals the one a --no-prefix-cache server gives.
# Usage: sliding_prefix_http_test.sh KVCACHE_BIN SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
. "$(dirname "$0")/lib.sh"
model="$tmp/g3.gguf"
"$py" "$src/scripts/make_arch_model.py" --arch gemma3 --out "$model" > /dev/null

# ask URL OUT: the ten requests one after another; one JSON line per answer in OUT.
ask() {
  "$py" - "$1" "$2" <<'PY'
import json, sys, urllib.request
url, out = sys.argv[1], sys.argv[2]
shared = "You are a careful reader of old books. Answer in one short line, in the style of the text:   "
assert len(shared) == 93
questions = ["who made the light", "what was upon the deep", "where was the garden",
             "what did God call it", "who was the first man", "what is my shepherd",
             "how long was the flood", "which day was the third", "why did Cain go out",
             "which river left Eden"]
with open(out, "w") as f:
    for q in questions:
        body = json.dumps({"prompt": shared + q, "max_tokens": 8, "temperature": 0}).encode()
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            j = json.load(r)
        f.write(json.dumps({"text": j["choices"][0]["text"],
                            "cached": j["usage"]["prompt_tokens_details"]["cached_tokens"]}) + "\n")
PY
}

start_server cached --max-sessions 3 "$model"
ask "$url" "$tmp/cached.jsonl"
metrics=$(curl -sS --max-time 10 "$url/metrics")
stop_server
start_server plain --max-sessions 3 --no-prefix-cache "$model"
ask "$url" "$tmp/plain.jsonl"
stop_server

"$py" - "$tmp/cached.jsonl" "$tmp/plain.jsonl" <<'PY' || fail "see above"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 10, (len(a), len(b))
assert a[0]["cached"] == 0, a[0]
for i, r in enumerate(a[1:], 1):
    assert r["cached"] >= 80, f"request {i}: {r['cached']} cached tokens, expected >= 80; all: {[x['cached'] for x in a]}"
assert all(r["cached"] == 0 for r in b), b
assert [r["text"] for r in a] == [r["text"] for r in b], "answers differ with the prefix cache"
PY
taken=$(echo "$metrics" | sed -n 's/^kvcache_prefix_checkpoints_taken_total \([0-9]*\)$/\1/p')
[ -n "$taken" ] && [ "$taken" -gt 0 ] || fail "kvcache_prefix_checkpoints_taken_total = '$taken', expected > 0"
held=$(echo "$metrics" | sed -n 's/^kvcache_prefix_checkpoints \([0-9]*\)$/\1/p')
[ -n "$held" ] && [ "$held" -le 8 ] || fail "kvcache_prefix_checkpoints = '$held', expected 0..8"
echo "sliding prefix through serve: 9 of 10 requests reused >= 80 tokens; $taken checkpoints taken, $held held"
