#!/usr/bin/env bash
# `kvcache batch` end to end on the embedded model: the --json shape, greedy results equal to
# `kvcache run` alone, prefix hits on and off, n > 1, preemption with a small pool, 8 sessions
# each under its own JSON Schema (validated), --kv-memory buying sessions per K/V type, and
# input errors that name the file, line and field, speculative decoding (--draft) equal to plain
# batching with its counters. Usage: batch_cli_test.sh KVCACHE_BIN SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$src/tests/embedded_model.sh"
require_embedded_model

prompts=$src/examples/batch/prompts.jsonl
"$bin" batch --prompts-file "$prompts" --json 2>/dev/null > "$tmp/on.json"
"$bin" batch --prompts-file "$prompts" --json --no-prefix-cache --max-sessions 3 2>/dev/null > "$tmp/off.json"
"$bin" batch --prompts-file "$prompts" --json --max-sessions 8 --max-session-tokens 160 \
  --pool-tokens 200 2>/dev/null > "$tmp/small.json"
"$bin" run --prompt "In the beginning God created" --max-new-tokens 64 --json 2>/dev/null > "$tmp/run0.json"
"$bin" run --prompt "The LORD is my shepherd" --max-new-tokens 64 --json 2>/dev/null > "$tmp/run3.json"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
on, off, small = (json.load(open(f"{d}/{n}.json")) for n in ("on", "off", "small"))
run0 = json.load(open(f"{d}/run0.json"))["tokens"]
run3 = json.load(open(f"{d}/run3.json"))
for j in (on, off, small):
    for k in ("results", "decode_tokens_per_s", "prefill_tokens_per_s", "prefix_hit_tokens",
              "preemptions", "steps", "cache"):
        assert k in j, k
    r = j["results"]
    assert [x["index"] for x in r] == list(range(6)), r
    assert r[0]["completions"][0]["tokens"] == run0, (r[0], run0)
    assert r[0]["completions"][0]["finish_reason"] == "length"
    assert len(r[1]["completions"][0]["tokens"]) == 32           # per-line max_new_tokens
    assert len(r[2]["completions"]) == 3                           # "n": 3
    assert r[5]["prompt_tokens"] == 9                              # prompt_ids
    c3 = r[3]["completions"][0]                                    # "stop": ["."]
    full = bytes(run3["tokens"]).decode("latin-1")
    if "." in full:
        assert c3["finish_reason"] == "stop" and c3["text"] == full[:full.index(".")], (c3, full)
    assert j["cache"]["kv_dtype"] == "f32"
assert on["prefix_hit_tokens"] > 0 and off["prefix_hit_tokens"] == 0
assert sum(x["cached_prompt_tokens"] for x in on["results"]) == on["prefix_hit_tokens"]
assert small["preemptions"] > 0, small["preemptions"]
assert [x["completions"] for x in on["results"]] == [x["completions"] for x in small["results"]]
PY

# Structured output: 8 sessions at once, each under a different schema; every completion is a
# whole document (finish "stop") that validates against its own schema.
/usr/bin/python3 - "$tmp/schemas.jsonl" <<'PY'
import json, sys
schemas = [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
     "required": ["a"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 4},
    {"enum": ["red", "green", "blue"]},
    {"type": "string", "maxLength": 8},
    {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
     "ok": {"type": "boolean"}}, "required": ["d", "ok"], "additionalProperties": False},
    {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": -50, "maximum": 50}]},
    {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
    {"$defs": {"n": {"type": "object", "properties": {"k": {"type": "array", "maxItems": 1,
     "items": {"$ref": "#/$defs/n"}}}, "required": ["k"], "additionalProperties": False}},
     "type": "object", "properties": {"root": {"$ref": "#/$defs/n"}}, "required": ["root"],
     "additionalProperties": False},
]
with open(sys.argv[1], "w") as f:
    for i, s in enumerate(schemas):
        rf = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": s}}
        # The recursive schema (last) has no bound on depth: greedy, with room to close.
        f.write(json.dumps({"prompt": f"Answer {i}:", "max_new_tokens": 120 if i < 7 else 240,
                            "temperature": 0.7 if i < 7 else 0.0, "seed": i,
                            "response_format": rf}) + "\n")
PY
"$bin" batch --prompts-file "$tmp/schemas.jsonl" --max-sessions 8 --json 2>/dev/null > "$tmp/schemas.json" \
  || fail "batch with schemas"
  /usr/bin/python3 - "$tmp/schemas.jsonl" "$tmp/schemas.json" <<'PY' || fail "batch schemas"
import json, sys, jsonschema
lines = [json.loads(l) for l in open(sys.argv[1])]
out = json.load(open(sys.argv[2]))["results"]
assert len(out) == 8
for i, (line, r) in enumerate(zip(lines, out)):
    c = r["completions"][0]
    if i == 7 and c["finish_reason"] == "length":
        continue  # the unbounded recursive schema may not close in 240 tokens on every ISA
    assert c["finish_reason"] == "stop", (line, c)
    jsonschema.validate(json.loads(c["text"]), line["response_format"]["json_schema"]["schema"],
                        format_checker=jsonschema.FormatChecker())
PY
printf '{"prompt": "a", "response_format": {"type": "json_schema", "json_schema": {"schema": {"not": {}}}}}\n' > "$tmp/not.jsonl"
expect_error() {  # expect_error CODE PATTERN args...: exit CODE (1 refused, 2 usage), PATTERN
  local code=$1 pattern=$2 rc=0; shift 2
  "$bin" batch "$@" >/dev/null 2>"$tmp/err" || rc=$?
  [ "$rc" = "$code" ] || { cat "$tmp/err" >&2; fail "batch $* exited $rc, expected $code"; }
  grep -q -- "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "batch $*: expected '$pattern'"; }
}
expect_error 1 "not.jsonl:1: unsupported JSON Schema keyword 'not' at the root" --prompts-file "$tmp/not.jsonl"
printf '{"prompt": "a"}\n{"prompt": "b", "colour": 1}\n' > "$tmp/unknown.jsonl"
expect_error 1 "unknown.jsonl:2: unknown field \"colour\"" --prompts-file "$tmp/unknown.jsonl"
printf '{"prompt": "a"}\n{"prompt": \n' > "$tmp/bad.jsonl"
expect_error 1 "bad.jsonl:2: not valid JSON" --prompts-file "$tmp/bad.jsonl"
printf '{"prompt_ids": [1, 999]}\n' > "$tmp/ids.jsonl"
expect_error 1 "prompt_ids entry 999, expected an id in \[0, 256)" --prompts-file "$tmp/ids.jsonl"
printf '{"prompt": "a", "max_new_tokens": 400}\n' > "$tmp/long.jsonl"
expect_error 1 "exceeds max_session_tokens 256" --prompts-file "$tmp/long.jsonl"
printf '{"prompt": "a", "temperature": -1}\n' > "$tmp/temp.jsonl"
expect_error 1 "\"temperature\" = -1" --prompts-file "$tmp/temp.jsonl"
printf '{"prompt": ""}\n' > "$tmp/empty.jsonl"
expect_error 1 "the prompt is empty" --prompts-file "$tmp/empty.jsonl"
: > "$tmp/none.jsonl"
expect_error 1 "no requests" --prompts-file "$tmp/none.jsonl"
expect_error 1 "no such file" --prompts-file "$tmp/missing.jsonl"
expect_error 1 "not a regular file" --prompts-file "$tmp"
expect_error 1 "above the model's max_context 256" --prompts-file "$prompts" --max-session-tokens 300
expect_error 2 "prompts-file is required" --max-sessions 2
# --kv-memory: the same budget buys more sessions of q8_0 K/V than of f16, and the executor
# admits that many at once ("max_sessions", "peak_running").
# 48 short requests: every one can run at once when the pool has the sessions.
for i in $(seq 1 48); do echo "{\"prompt\": \"And God said $i\", \"max_new_tokens\": 3}"; done \
  > "$tmp/p.jsonl"
for t in f16 q8_0; do
  "$bin" batch --prompts-file "$tmp/p.jsonl" --kv-dtype "$t" --kv-memory 1MiB \
    --max-session-tokens 64 --json 2>"$tmp/$t.err" > "$tmp/$t.json" \
    || { cat "$tmp/$t.err" >&2; fail "batch --kv-dtype $t --kv-memory 1MiB"; }
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
# The embedded model's cache per cell: 2 full layers of 2 heads x 32 and 2 Sliding(32) layers
# of 1 head x 32: f16 4 x 128 + 2 x 128 = 768 B, q8_0 4 x 68 + 2 x 68 = 408 B. A session of 64
# tokens: its full pool 64 cells; the sliding pool min(64 N, (2 N + 8) x 31 + 16) = 64 N for
# N <= 128. So N sessions take 64 N x 768 (f16) or 64 N x 408 (q8_0) bytes:
# 1 MiB buys floor(1048576 / 49152) = 21 and floor(1048576 / 26112) = 40 sessions.
want = {"f16": (21, 768), "q8_0": (40, 408)}
for t, (sessions, per_cell) in want.items():
    j = json.load(open(f"{d}/{t}.json"))
    c = j["cache"]
    assert c["bytes_per_cell"] == per_cell, (t, c["bytes_per_cell"])
    assert j["max_sessions"] == sessions, (t, j["max_sessions"])
    assert c["capacity"] == 64 * sessions, (t, c["capacity"])
    assert c["kv_memory"] == {"budget": 1048576, "bytes": 64 * sessions * per_cell,
                              "capacity": 64 * sessions, "sessions": sessions}, (t, c["kv_memory"])
    assert j["peak_running"] == sessions, (t, j["peak_running"])
    assert len(j["results"]) == 48 and j["preemptions"] == 0, (t, j["preemptions"])
print("1 MiB of K/V: 21 sessions at f16, 40 at q8_0, each admitted at once")
PY

expect_error 2 "^kvcache batch: --kv-memory: session pool: kv_memory = 49151 bytes holds no session: one session of 64 tokens (k_dtype f16, v_dtype f16) needs 49152 bytes of K/V$" \
  --prompts-file "$tmp/p.jsonl" --kv-dtype f16 --kv-memory 49151 --max-session-tokens 64
expect_error 2 "^--max-sessions excludes --kv-memory$" --prompts-file "$tmp/p.jsonl" --kv-memory 1MiB --max-sessions 4
expect_error 2 "^--kv-memory excludes --pool-tokens$" --prompts-file "$tmp/p.jsonl" --kv-memory 1MiB --pool-tokens 512
expect_error 2 "^--kv-memory: \"4XB\" has an unknown unit" --prompts-file "$tmp/p.jsonl" --kv-memory 4XB
# Speculative decoding: greedy results equal plain batching (n-gram, self:q8_0 and --draft-model
# drafts, a stop string inside drafts), the "draft" objects of --json (totals and per
# completion, absent for a line with "draft": false), and usage errors naming the flag or field.
cat > "$tmp/draft.jsonl" <<'JL'
{"prompt": "the cat sat on the mat. the dog sat on the log. the cat sat on the", "max_new_tokens": 60}
{"prompt": "one two three one two three one two three one two", "max_new_tokens": 60}
{"prompt": "And God said, Let there be light", "max_new_tokens": 40, "draft": false}
{"prompt": "abcabcabcabcabcabcabcabc", "max_new_tokens": 50, "stop": ["cab"]}
JL
"$bin" batch --prompts-file "$tmp/draft.jsonl" --json 2>/dev/null > "$tmp/dplain.json"
# --draft-k acceptance: widths that do not depend on timing, so the step counts below hold;
# the default rule (cost) is checked for equal output and consistent counters.
"$bin" batch --prompts-file "$tmp/draft.jsonl" --json --draft ngram --draft-k acceptance \
  2>"$tmp/ngram.err" > "$tmp/ngram.json"
"$bin" batch --prompts-file "$tmp/draft.jsonl" --json --draft self:q8_0 --draft-max 4 \
  --draft-k acceptance --max-sessions 2 2>/dev/null > "$tmp/self.json"
"$bin" batch --prompts-file "$tmp/draft.jsonl" --json --draft-model "$src/models/tiny.gguf" \
  --draft-k acceptance 2>/dev/null > "$tmp/dmodel.json"
"$bin" batch --prompts-file "$tmp/draft.jsonl" --json --draft self:q8_0 --max-sessions 2 \
  2>/dev/null > "$tmp/selfcost.json"
grep -q "speculative decoding: ngram:3, up to 8 drafts" "$tmp/ngram.err" || fail "no drafting line"
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
plain, ngram, selfq, dmodel, selfcost = (json.load(open(f"{d}/{n}.json"))
                                         for n in ("dplain", "ngram", "self", "dmodel", "selfcost"))
assert "draft" not in plain and all("draft" not in c for r in plain["results"] for c in r["completions"])
for j, mode, k in ((ngram, "ngram:3", 8), (selfq, "self:q8_0", 4), (dmodel, "model:tiny", 8)):
    for a, b in zip(plain["results"], j["results"]):
        ca, cb = a["completions"][0], b["completions"][0]
        assert (ca["tokens"], ca["text"], ca["finish_reason"]) == (cb["tokens"], cb["text"], cb["finish_reason"]), (mode, a["index"])
    t = j["draft"]
    assert t["mode"] == mode and t["draft_max"] == k, t
    per = [r["completions"][0].get("draft") for r in j["results"]]
    assert per[2] is None, per[2]                      # "draft": false decodes plainly
    for key in ("steps", "drafted", "accepted"):
        assert sum(p[key] for p in per if p) == t[key], (key, per, t)
    assert abs(t["acceptance"] - t["accepted"] / t["drafted"]) < 1e-12
    assert abs(t["tokens_per_step"] - (t["steps"] + t["accepted"]) / t["steps"]) < 1e-12
    assert 0 < t["accepted"] <= t["drafted"], t
    assert j["decode_tokens"] == plain["decode_tokens"], (j["decode_tokens"], plain["decode_tokens"])
    assert j["steps"] < plain["steps"], (mode, j["steps"], plain["steps"])
assert selfq["draft"]["acceptance"] > 0.9, selfq["draft"]   # the model's own q8_0 weights
# The cost rule: K follows the timings (it may rest at 0), the output never changes.
for a, b in zip(plain["results"], selfcost["results"]):
    ca, cb = a["completions"][0], b["completions"][0]
    assert (ca["tokens"], ca["finish_reason"]) == (cb["tokens"], cb["finish_reason"]), a["index"]
t = selfcost["draft"]
per = [r["completions"][0].get("draft") for r in selfcost["results"]]
for key in ("steps", "drafted", "accepted"):
    assert sum(p[key] for p in per if p) == t[key], (key, per, t)
assert 0 <= t["accepted"] <= t["drafted"] and selfcost["decode_tokens"] == plain["decode_tokens"], t
assert dmodel["draft"]["acceptance"] == 1.0, dmodel["draft"]  # models/tiny.gguf is the target
PY

expect_error 2 "--draft-max.*draft_max = 40, expected 1\.\.15" --prompts-file "$tmp/draft.jsonl" --draft ngram --draft-max 40
expect_error 2 "--draft-max: needs --draft or --draft-model" --prompts-file "$tmp/draft.jsonl" --draft-max 4
expect_error 2 "^--draft-k: fast not in .cost,acceptance.$" --prompts-file "$tmp/draft.jsonl" --draft ngram --draft-k fast
expect_error 2 "'ngram:0' is not a drafter" --prompts-file "$tmp/draft.jsonl" --draft ngram:0
echo '{"prompt": "x", "draft": 1}' > "$tmp/dbad.jsonl"
expect_error 1 "dbad.jsonl:1: \"draft\" is not a boolean" --prompts-file "$tmp/dbad.jsonl" --draft ngram
echo "batch CLI: all checks passed"
