#!/usr/bin/env bash
# Structured output through `kvcache serve` on the embedded model (256-token context: the
# schema's longest document fits in 215 bytes): json_schema requests on
# /v1/chat/completions (n = 3, sampled, and streamed) and /v1/completions return content that
# parses and validates against the schema (python3-jsonschema, formats checked) with
# finish_reason "stop"; json_object returns an object; an unsupported keyword, a bogus type and
# an unimplemented field are 400s naming them. Usage: structured_output_http_test.sh KVCACHE_BIN
set -euo pipefail
bin=$1
. "$(dirname "$0")/lib.sh"
require_embedded_model
$py -c 'import jsonschema' 2>/dev/null || { echo "SKIP: python3-jsonschema is not installed (scripts/setup.sh --tests installs it)"; [ "${CI:-}" = true ] && exit 1; exit 77; }

post() {  # post PATH BODY: prints the status, body in $tmp/body
  curl -sS --max-time 60 -o "$tmp/body" -w '%{http_code}' -X POST "$url$1" \
    -H 'Content-Type: application/json' --data-binary "$2"
}
expect() {  # expect STATUS PATH BODY
  local got
  got=$(post "$2" "$3")
  [ "$got" = "$1" ] || fail "$2: status $got, expected $1: $(head -c 400 "$tmp/body")"
}
jcheck() {
  $py -c 'import json,sys; j=json.load(open(sys.argv[1])); assert eval(sys.argv[2]), (sys.argv[2], j)' \
    "$tmp/body" "$1" || fail "check $1"
}

schema='{"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":6},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":2},
  "when":{"type":"string","format":"date"},
  "id":{"type":"string","format":"uuid"},
  "score":{"type":"number","minimum":0,"maximum":1},
  "kind":{"anyOf":[{"const":"x"},{"type":"null"}]},
  "pet":{"$ref":"#/$defs/pet"}},
 "required":["name","age","tags","when","pet"],"additionalProperties":false,
 "$defs":{"pet":{"type":"object","properties":{"species":{"enum":["cat","dog"]},
   "legs":{"type":"integer","minimum":0,"maximum":4}},"required":["species","legs"],
   "additionalProperties":false}}}'
echo "$schema" > "$tmp/schema.json"
rf="{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,\"schema\":$schema}}"

# validate FILE...: each file holds one document; it must validate against the schema.
validate() {
  $py - "$tmp/schema.json" "$@" <<'PY' || fail "validation"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
for path in sys.argv[2:]:
    doc = json.load(open(path))
    jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
    assert list(doc)[:2] == ["name", "age"], doc  # properties in schema order
PY
}

start_server one --max-sessions 4

# Chat, sampled, three completions.
expect 200 /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"A person as JSON\"}],
  \"response_format\":$rf,\"n\":3,\"temperature\":1.0,\"seed\":7,\"max_tokens\":215}"
$py - "$tmp/body" "$tmp" <<'PY' || fail "chat choices"
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["choices"]) == 3, j
for c in j["choices"]:
    assert c["finish_reason"] == "stop", c
    open(f"{sys.argv[2]}/chat{c['index']}.json", "w").write(c["message"]["content"])
PY
validate "$tmp"/chat0.json "$tmp"/chat1.json "$tmp"/chat2.json

# Completions, greedy.
expect 200 /v1/completions "{\"prompt\":\"Person:\",\"response_format\":$rf,\"max_tokens\":215}"
jcheck "j['choices'][0]['finish_reason']=='stop'"
$py -c 'import json,sys; open(sys.argv[2],"w").write(json.load(open(sys.argv[1]))["choices"][0]["text"])' \
  "$tmp/body" "$tmp/completion.json"
validate "$tmp/completion.json"

# Streamed: the concatenated deltas are one valid document.
curl -sS -N --max-time 60 -X POST "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  --data-binary "{\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}],\"stream\":true,
  \"response_format\":$rf,\"temperature\":0.8,\"seed\":3,\"max_tokens\":215}" > "$tmp/sse"
$py - "$tmp/sse" "$tmp/stream.json" <<'PY' || fail "stream"
import json, sys
text, reasons = "", []
for line in open(sys.argv[1]):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        c = json.loads(line[6:])["choices"][0]
        text += c["delta"].get("content", "")
        reasons.append(c["finish_reason"])
assert reasons[-1] == "stop", reasons
open(sys.argv[2], "w").write(text)
PY
validate "$tmp/stream.json"

# json_object: any object.
expect 200 /v1/chat/completions '{"messages":[{"role":"user","content":"{"}],"response_format":{"type":"json_object"},"max_tokens":200,"temperature":0}'
$py - "$tmp/body" <<'PY' || fail "json_object"
import json, sys
c = json.load(open(sys.argv[1]))["choices"][0]
text = c["message"]["content"]
assert text.startswith("{"), text
if c["finish_reason"] == "stop":
    assert isinstance(json.loads(text), dict), text
PY

# Refusals: 400 naming the keyword and its pointer, the bogus type, the unimplemented field.
expect 400 /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}}}}}'
jcheck "j['error']['message']==\"unsupported JSON Schema keyword 'uniqueItems' at /properties/tags\" and j['error']['param']=='response_format.json_schema.schema' and j['error']['type']=='invalid_request_error'"
expect 400 /v1/completions '{"prompt":"x","response_format":{"type":"bogus"}}'
jcheck "j['error']['param']=='response_format.type'"
expect 400 /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tool_choice":5}'
jcheck "j['error']['param']=='tool_choice' and j['error']['code']=='invalid_value'"
expect 400 /v1/completions '{"prompt":"x","best_of":2}'
jcheck "j['error']['param']=='best_of'"
expect 200 /v1/completions '{"prompt":"x","max_tokens":2,"user":"u","metadata":{"a":"b"}}'

stop_server
echo "PASS structured output"
