#!/usr/bin/env bash
# Tool calls through `kvcache serve` on a random llama with a 4096-token context
# (scripts/make_arch_model.py; raw-byte ids; its text is noise, so only structure is checked),
# for the ChatML (Qwen2.5), Llama 3.1, Mistral, harmony (gpt-oss) and generic (plain) families: tool_choice required and a
# named function give message.tool_calls whose arguments validate against the tool's schema
# (python3-jsonschema), content null and finish_reason "tool_calls", for every completion of
# a sampled n = 3; streamed, the delta.tool_calls chunks (index, then id/type/name first, then
# argument fragments) add up to a valid call; auto gives content or valid calls; a history
# with tool calls and results renders; the refusals name the field.
# Usage: tool_calls_http_test.sh KVCACHE_BIN SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
. "$(dirname "$0")/lib.sh"
$py -c 'import jsonschema, numpy' 2>/dev/null || { echo "SKIP: python3-jsonschema and python3-numpy are needed (scripts/setup.sh --tests)"; [ "${CI:-}" = true ] && exit 1; exit 77; }
model="$tmp/tools.gguf"
"$py" "$src/scripts/make_arch_model.py" --arch llama-rope-freqs --context 4096 --out "$model" > /dev/null

tools='[{"type":"function","function":{"name":"get_weather","description":"Weather in a city",
  "parameters":{"type":"object","properties":{"city":{"enum":["Oslo","Rome","Lima"]},
  "days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false}}},
 {"type":"function","function":{"name":"note","parameters":{"type":"object",
  "properties":{"text":{"type":"string","maxLength":10},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},
  "required":["text"],"additionalProperties":false}}}]'
echo "$tools" > "$tmp/tools.json"

post() {  # post BODY: prints the status, body in $tmp/body
  curl -sS --max-time 60 -o "$tmp/body" -w '%{http_code}' -X POST "$url/v1/chat/completions" \
    -H 'Content-Type: application/json' --data-binary "$1"
}
expect() {  # expect STATUS BODY
  local got
  got=$(post "$2")
  [ "$got" = "$1" ] || fail "status $got, expected $1: $(head -c 400 "$tmp/body")"
}
# check_calls FILE CHOICE...: every choice's calls name a tool and validate; ids unique.
check() {
  $py - "$tmp/tools.json" "$@" <<'PY' || fail "check $*"
import json, sys, jsonschema
tools = {t["function"]["name"]: t["function"]["parameters"] for t in json.load(open(sys.argv[1]))}
path, mode = sys.argv[2], sys.argv[3]
j = json.load(open(path))
ids = set()
for c in j["choices"]:
    m = c["message"]
    calls = m.get("tool_calls") or []
    if mode in ("calls", "named") or calls:
        assert c["finish_reason"] == "tool_calls", c
        assert m["content"] is None, m
        assert calls, m
        for call in calls:
            assert call["type"] == "function" and call["id"].startswith("call_") or len(call["id"]) == 9, call
            assert call["id"] not in ids
            ids.add(call["id"])
            name = call["function"]["name"]
            assert name in tools and (mode != "named" or name == "note"), call
            jsonschema.validate(json.loads(call["function"]["arguments"]), tools[name])
    else:
        assert isinstance(m["content"], str) and "tool_calls" not in m, m
PY
}
msg='"messages":[{"role":"system","content":"Use the tools."},{"role":"user","content":"Weather in Rome?"}]'

for family in chatml llama3 mistral harmony plain; do
  start_server "$family" --max-sessions 3 --chat-template "$family" "$model"
  expect 200 "{$msg,\"tools\":$tools,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,
    \"n\":3,\"temperature\":1.0,\"seed\":5,\"max_tokens\":120}"
  check "$tmp/body" calls
  expect 200 "{$msg,\"tools\":$tools,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"note\"}},\"max_tokens\":120}"
  check "$tmp/body" named
  expect 200 "{$msg,\"tools\":$tools,\"max_tokens\":24}"
  check "$tmp/body" auto
  if [ "$family" = harmony ]; then  # its system message states the effort asked for
    expect 200 "{$msg,\"reasoning_effort\":\"low\",\"max_tokens\":4}"
  fi
  # Streamed: the chunks add up to one valid call.
  curl -sS -N --max-time 60 -X POST "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    --data-binary "{$msg,\"tools\":$tools,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"stream\":true,\"max_tokens\":120}" \
    > "$tmp/stream"
  $py - "$tmp/stream" "$tmp/tools.json" <<'PY' || fail "$family stream"
import json, sys, jsonschema
tools = {t["function"]["name"]: t["function"]["parameters"] for t in json.load(open(sys.argv[2]))}
events = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-3:]
chunks = [json.loads(e) for e in events[:-1]]
calls, finishes = {}, []
for ch in chunks:
    c = ch["choices"][0]
    if c["finish_reason"]:
        finishes.append(c["finish_reason"])
    for tc in c["delta"].get("tool_calls", []):
        if tc["index"] not in calls:
            assert tc["id"] and tc["type"] == "function" and tc["function"]["name"], tc
            assert tc["function"]["arguments"] == "", tc
            calls[tc["index"]] = {"name": tc["function"]["name"], "arguments": ""}
        else:
            assert "id" not in tc and "name" not in tc["function"], tc
            calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
assert finishes == ["tool_calls"], finishes
assert list(calls) == [0], calls
jsonschema.validate(json.loads(calls[0]["arguments"]), tools[calls[0]["name"]])
PY
  stop_server
done

# A conversation with a call and its result, then the refusals (ChatML server).
start_server history --chat-template chatml "$model"
expect 200 "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},
  {\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",
    \"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\",\\\"days\\\":1}\"}}]},
  {\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"cold\"}],\"tools\":$tools,\"tool_choice\":\"none\",\"max_tokens\":4}"
$py -c 'import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; assert isinstance(c["message"]["content"], str) and "tool_calls" not in c["message"], c' "$tmp/body" || fail "tool_choice none"
refuse() {  # refuse EXTRA PARAM
  expect 400 "{$msg,$1}"
  $py -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["param"]==sys.argv[2], e' "$tmp/body" "$2" \
    || fail "param of $1: $(cat "$tmp/body")"
}
refuse '"tools":[],"tool_choice":5' tool_choice
refuse "\"tools\":$tools,\"tool_choice\":\"sometimes\"" tool_choice
refuse "\"tools\":$tools,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}" tool_choice.function.name
refuse '"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}]' "tools[1].function.name"
refuse '"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object","not":{}}}}]' "tools[0].function.parameters"
refuse "\"tools\":$tools,\"response_format\":{\"type\":\"json_object\"}" response_format
refuse '"reasoning_effort":"high"' reasoning_effort  # ChatML has none
stop_server
echo "PASS tool calls"
