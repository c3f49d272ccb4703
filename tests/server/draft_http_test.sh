#!/usr/bin/env bash
# Speculative decoding through `kvcache serve --draft ngram` on the embedded model: greedy
# completions equal a plain server's; usage carries draft_tokens, accepted_draft_tokens and
# draft_steps (absent on the plain server) and /metrics' kvcache_draft_*_total counters are
# exactly their sums. Usage: draft_http_test.sh KVCACHE_BIN
set -euo pipefail
bin=$1
. "$(dirname "$0")/lib.sh"
require_embedded_model

# ask URL OUT [EXTRA_JSON]: three completions one after another (the body's fields plus
# EXTRA_JSON's); one JSON line (text, usage) per answer.
ask() {
  "$py" - "$1" "$2" "${3:-null}" <<'PY'
import json, sys, urllib.request
url, out, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) or {}
prompts = ["the cat sat on the mat. the dog sat on the log. the cat sat on the",
           "one two three one two three one two three one two",
           "abcabcabcabcabcabcabcabc"]
with open(out, "w") as f:
    for p in prompts:
        body = json.dumps({"prompt": p, "max_tokens": 40, "temperature": 0, **extra}).encode()
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            j = json.load(r)
        f.write(json.dumps({"text": j["choices"][0]["text"], "usage": j["usage"]}) + "\n")
PY
}

start_server draft --draft ngram --draft-max 6
grep -q "speculative decoding: ngram:3, up to 6 drafts" "$tmp/err.draft" || fail "no drafting line"
ask "$url" "$tmp/draft.jsonl"
curl -sS --max-time 10 "$url/metrics" > "$tmp/metrics.txt"
# The request's extension field "draft": false decodes plainly on the drafting server (and
# leaves the counters alone); a non-boolean is a 400 naming it.
ask "$url" "$tmp/undrafted.jsonl" '{"draft": false}'
curl -sS --max-time 10 "$url/metrics" > "$tmp/metrics2.txt"
code=$(curl -sS -o "$tmp/bad.json" -w '%{http_code}' --max-time 10 "$url/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "a", "max_tokens": 2, "draft": "no"}')
[ "$code" = 400 ] || fail "draft: \"no\" gave HTTP $code"
grep -q "'draft'" "$tmp/bad.json" || fail "the 400 does not name 'draft': $(cat "$tmp/bad.json")"
stop_server
start_server plain
ask "$url" "$tmp/plain.jsonl"
stop_server

"$py" - "$tmp/draft.jsonl" "$tmp/plain.jsonl" "$tmp/metrics.txt" "$tmp/undrafted.jsonl" \
  "$tmp/metrics2.txt" <<'PY' || fail "see above"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
c = [json.loads(l) for l in open(sys.argv[4])]
def counters(path):
    out = {}
    for line in open(path):
        if line.startswith("kvcache_draft_"):
            k, v = line.split()
            out[k] = int(float(v))
    return out
metrics = counters(sys.argv[3])
assert [x["text"] for x in a] == [x["text"] for x in b], (a, b)
assert [x["text"] for x in c] == [x["text"] for x in b], (c, b)
for x in b + c:
    assert "draft_tokens" not in x["usage"], x["usage"]
assert counters(sys.argv[5]) == metrics, (counters(sys.argv[5]), metrics)
for x in a:
    u = x["usage"]
    assert 0 <= u["accepted_draft_tokens"] <= u["draft_tokens"], u
    # Each decode step keeps 1 + accepted drafts; all but the first token (or all 40 when the
    # prompt's last token went as a decode step) come from decode steps.
    assert u["draft_steps"] + u["accepted_draft_tokens"] in (39, 40), u
assert sum(x["usage"]["accepted_draft_tokens"] for x in a) > 0, a
assert metrics["kvcache_draft_tokens_total"] == sum(x["usage"]["draft_tokens"] for x in a), metrics
assert metrics["kvcache_draft_accepted_total"] == sum(x["usage"]["accepted_draft_tokens"] for x in a), metrics
assert metrics["kvcache_draft_steps_total"] == sum(x["usage"]["draft_steps"] for x in a), metrics
PY
echo "PASS"
