#!/usr/bin/env bash
# `kvcache serve` end to end on the embedded model over loopback: every endpoint with curl
# (status codes, JSON fields, SSE framing and [DONE], OpenAI-style errors naming the field,
# 401/404/413/429), greedy output equal to `kvcache run`, prefix-cache hits in usage and
# clearing them (POST /v1/cache/clear, key-protected), 32
# concurrent streaming clients with no cell leak, a client that disconnects mid-stream, and
# SIGTERM -> exit 0 within a few seconds. Usage: serve_http_test.sh KVCACHE_BIN
set -euo pipefail
bin=$1
. "$(dirname "$0")/lib.sh"
require_embedded_model
# The Python clients below import http_threads.py from this folder.
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"

# req METHOD PATH [BODY] [curl args...]: prints the status, body in $tmp/body.
req() {
  local method=$1 path=$2 body=${3:-}
  shift 3 || shift $#
  if [ -n "$body" ]; then
    curl -sS --max-time 30 -o "$tmp/body" -w '%{http_code}' -X "$method" "$url$path" \
      -H 'Content-Type: application/json' --data-binary "$body" "$@"
  else
    curl -sS --max-time 30 -o "$tmp/body" -w '%{http_code}' -X "$method" "$url$path" "$@"
  fi
}
expect() {  # expect STATUS METHOD PATH [BODY] [curl args...]
  local want=$1
  shift
  local got
  got=$(req "$@")
  [ "$got" = "$want" ] || fail "$1 $2 ${3:-}: status $got, expected $want: $(head -c 300 "$tmp/body")"
}
# jcheck PYTHON-EXPR: evaluated with j = the JSON body.
jcheck() {
  $py -c 'import json,sys; j=json.load(open(sys.argv[1])); assert eval(sys.argv[2]), (sys.argv[2], j)' \
    "$tmp/body" "$1" || fail "check $1"
}
error_param() { expect 400 "$@"; jcheck "j['error']['type']=='invalid_request_error'"; }

# ---- kvcache run --chat: the same formatter; turn 2 feeds only what turn 1 did not hold ------
printf 'Hello there\nAnd then?\n' | "$bin" run --chat --max-new-tokens 12 --system "Be brief" \
  > "$tmp/chat.out" 2> "$tmp/chat.err" || fail "run --chat: $(tail -2 "$tmp/chat.err")"
grep -q '^chat template plain' "$tmp/chat.err" || fail "run --chat: no template line"
# Turn 1: "system: Be brief\nuser: Hello there\nassistant: " is 46 bytes. Turn 2: the last token
# turn 1 sampled, then "\nuser: And then?\nassistant: " (28 bytes).
[ "$(grep -o 'prefill: [0-9]* tokens' "$tmp/chat.err" | cut -d' ' -f2 | tr '\n' ' ')" = "46 29 " ] \
  || fail "run --chat prefills: $(grep prefill "$tmp/chat.err")"
rc=0
echo hi | "$bin" run --chat --chat-template nope > /dev/null 2> "$tmp/chat.err" || rc=$?
[ "$rc" = 1 ] || fail "run --chat-template nope: exit $rc, expected 1 (refused)"
grep -q "kvcache run: --chat-template: no chat template: chat_template = 'nope' is not one of" "$tmp/chat.err" || fail "template error"

# ---- server 1: defaults, prefix cache on --------------------------------------------------
start_server one --max-sessions 4
grep -q 'chat template plain' "$tmp/err.one" || fail "no template line"
expect 200 GET /health
jcheck "j == {'status': 'ok'}"
expect 200 GET /v1/models
jcheck "j['object']=='list' and [m['id'] for m in j['data']]==['tiny'] and j['data'][0]['object']=='model'"

prompt="In the beginning God created the heaven and the earth."
"$bin" run --prompt "$prompt" --max-new-tokens 40 --json 2>/dev/null > "$tmp/run.json"
expect 200 POST /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 40}"
cp "$tmp/body" "$tmp/first.json"
$py - "$tmp/first.json" "$tmp/run.json" <<'PY' || fail "completion vs kvcache run"
import json, sys
j = json.load(open(sys.argv[1])); run = json.load(open(sys.argv[2]))
assert j["object"] == "text_completion" and j["model"] == "tiny" and j["id"].startswith("cmpl-"), j
c = j["choices"][0]
assert c["index"] == 0 and c["finish_reason"] in ("stop", "length"), c
want = bytes(run["tokens"]).decode("utf-8", "replace")
assert c["text"] == want, (c["text"], want)
u = j["usage"]
assert u["prompt_tokens"] == 54 and u["completion_tokens"] == len(run["tokens"]), u
assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
assert u["prompt_tokens_details"]["cached_tokens"] == 0, u
PY
# The same prompt again: its prefix comes from the pool (54 tokens; at least the last is fed).
expect 200 POST /v1/completions "{\"prompt\": \"$prompt\", \"max_tokens\": 40}"
jcheck "j['usage']['prompt_tokens_details']['cached_tokens'] >= 48"
jcheck "j['choices'][0]['text'] == json.load(open('$tmp/first.json'))['choices'][0]['text']"

# Token-id prompt, n = 2 with a seed, a stop string.
expect 200 POST /v1/completions '{"prompt": [65, 110, 100], "max_tokens": 8, "n": 2, "temperature": 0.8, "seed": 5, "stop": ["zzz"]}'
jcheck "len(j['choices'])==2 and [c['index'] for c in j['choices']]==[0,1] and j['usage']['prompt_tokens']==3"

# Chat, not streamed.
expect 200 POST /v1/chat/completions '{"model": "x", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_tokens": 12}'
jcheck "j['object']=='chat.completion' and j['choices'][0]['message']['role']=='assistant' and isinstance(j['choices'][0]['message']['content'], str) and j['usage']['completion_tokens']<=12"

# Chat, streamed: SSE framing, role first, finish_reason last, usage chunk, [DONE].
curl -sS -N --max-time 30 "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "stream": true, "stream_options": {"include_usage": true}}' \
  -D "$tmp/headers" > "$tmp/sse"
grep -qi '^content-type: text/event-stream' "$tmp/headers" || fail "SSE content type"
$py - "$tmp/sse" <<'PY' || fail "chat SSE framing"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), raw[-80:]
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
assert len({c["id"] for c in chunks}) == 1
finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] in ("stop", "length"), finals
usage = chunks[-1]
assert usage["choices"] == [] and usage["usage"]["completion_tokens"] <= 10, usage
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
assert usage["usage"]["completion_tokens"] >= 1 and len(text) >= 1
PY

# Completions streamed with a token-id prompt: text chunks, then [DONE].
curl -sS -N --max-time 30 "$url/v1/completions" -d '{"prompt": [84, 104, 101], "max_tokens": 6, "stream": true}' > "$tmp/sse2"
$py - "$tmp/sse2" <<'PY' || fail "completion SSE"
import json, sys
raw = open(sys.argv[1]).read()
events = [e for e in raw.split("\n\n") if e]
assert events[-1] == "data: [DONE]"
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert all(c["object"] == "text_completion" and "text" in c["choices"][0] for c in chunks)
assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
PY

# Sampling at a high temperature makes the byte model emit broken UTF-8: every chunk is still
# valid JSON in a valid UTF-8 body, and the streamed text equals the unstreamed one.
$py - "$url" <<'PY' || fail "invalid UTF-8 in generated text"
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
def post(body):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("POST", "/v1/completions", json.dumps(body))
    r = c.getresponse()
    assert r.status == 200
    return r.read().decode("utf-8")  # strict: raises on invalid UTF-8
body = {"prompt": "x", "max_tokens": 120, "temperature": 8, "seed": 3, "ignore_eos": True}
whole = json.loads(post(body))["choices"][0]["text"]
events = [e for e in post(dict(body, stream=True)).split("\n\n") if e]
assert events[-1] == "data: [DONE]"
streamed = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
assert streamed == whole, (streamed, whole)
assert "\ufffd" in whole, whole  # the sampled bytes did include broken sequences
PY

# n = 2 streamed: each choice has its chunks and exactly one finish_reason.
curl -sS -N --max-time 30 "$url/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Two"}], "max_tokens": 5, "n": 2, "temperature": 1, "seed": 9, "stream": true}' > "$tmp/sse3"
$py - "$tmp/sse3" <<'PY' || fail "n = 2 stream"
import json, sys
events = [e for e in open(sys.argv[1]).read().split("\n\n") if e]
assert events[-1] == "data: [DONE]"
chunks = [json.loads(e[6:]) for e in events[:-1]]
for i in (0, 1):
    mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i]
    assert mine[0]["delta"]["role"] == "assistant", mine
    assert sum(1 for c in mine if c["finish_reason"]) == 1, mine
PY

# Errors: OpenAI-style objects naming the field.
error_param POST /v1/completions '{"prompt": "a", "max_tokens": 0'
jcheck "j['error']['code']=='invalid_json' and j['error']['param'] is None"
error_param POST /v1/completions '{"prompt": "a", "max_tokens": 0}'
jcheck "j['error']['param']=='max_tokens'"
error_param POST /v1/completions '{"prompt": "a", "max_tokens": "ten"}'
jcheck "j['error']['param']=='max_tokens'"
error_param POST /v1/completions '{"prompt": "a", "n": 99}'
jcheck "j['error']['param']=='n'"
error_param POST /v1/completions '{"prompt": [1, 99999]}'
jcheck "j['error']['param']=='prompt'"
error_param POST /v1/completions '{"prompt": "a", "temperature": "hot"}'
jcheck "j['error']['param']=='temperature'"
error_param POST /v1/completions '{"prompt": "a", "unknown_extra": {"x": 1}}'
jcheck "j['error']['param']=='unknown_extra' and j['error']['code']=='unknown_parameter'"
error_param POST /v1/chat/completions '{"messages": []}'
jcheck "j['error']['param']=='messages'"
error_param POST /v1/chat/completions '{"messages": [{"role": "wizard", "content": "x"}]}'
jcheck "j['error']['param']=='messages[0].role'"
printf '{"prompt": "caf\xc3"}' > "$tmp/bad_utf8.json"
expect 400 POST /v1/completions "@$tmp/bad_utf8.json"
jcheck "j['error']['code']=='invalid_json'"
expect 413 POST /v1/completions "{\"prompt\": \"$(head -c 300 /dev/zero | tr '\0' a)\"}"
jcheck "j['error']['param']=='prompt' and j['error']['code']=='context_length_exceeded'"
expect 413 POST /v1/completions '{"prompt": "hello there", "max_tokens": 250}'
jcheck "j['error']['param']=='max_tokens'"
head -c 1100000 /dev/zero | tr '\0' a > "$tmp/huge.json"
expect 413 POST /v1/completions "@$tmp/huge.json"
jcheck "'error' in j"
expect 404 GET /v1/nothing
jcheck "j['error']['code']=='not_found'"

# The chat page.
expect 200 GET /
grep -q '/v1/chat/completions' "$tmp/body" || fail "chat page"
grep -qi '<script src=\|https://' "$tmp/body" && fail "chat page loads something external"

# A client that reads one event and disconnects; the server answers the next request.
$py - "$url" <<'PY' || fail "disconnect"
import http.client, json, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
c.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 250, "stream": True, "ignore_eos": True}))
r = c.getresponse()
assert r.status == 200
assert r.readline().startswith(b"data: ")
c.sock.close()
c.close()
PY
expect 200 POST /v1/completions '{"prompt": "still here", "max_tokens": 4}'
jcheck "j['usage']['completion_tokens']==4"
# Its session was cancelled (250 tokens take far longer than noticing the closed socket).
cancelled=0
for _ in $(seq 50); do
  req GET /metrics > /dev/null
  grep -q '^kvcache_completions_total{reason="cancelled"} 1$' "$tmp/body" && { cancelled=1; break; }
  sleep 0.1
done
[ "$cancelled" = 1 ] || fail "the disconnected stream was not cancelled: $(grep completions_total "$tmp/body")"
# An unstreamed request whose client leaves while it waits behind 48 long ones: the spaces
# sent while it waits fail, and it is cancelled too.
$py - "$url" <<'PY' || fail "unstreamed disconnect"
import http.client, json, socket, sys, time, urllib.parse
from http_threads import Threads
u = urllib.parse.urlparse(sys.argv[1])
long_body = json.dumps({"prompt": "q", "max_tokens": 250, "ignore_eos": True})
def go():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/v1/completions", long_body)
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 250
clients = Threads(go, [()] * 48)
time.sleep(0.05)
s = socket.create_connection((u.hostname, u.port))
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(long_body)}\r\n\r\n{long_body}").encode())
time.sleep(0.05)
s.close()
clients.join(120)
PY
cancelled=0
for _ in $(seq 50); do
  req GET /metrics > /dev/null
  grep -q '^kvcache_completions_total{reason="cancelled"} 2$' "$tmp/body" && { cancelled=1; break; }
  sleep 0.1
done
[ "$cancelled" = 1 ] || fail "the unstreamed request was not cancelled: $(grep completions_total "$tmp/body")"

expect 200 GET /metrics
for m in kvcache_requests_total kvcache_prompt_tokens_total kvcache_generated_tokens_total \
         kvcache_prefix_cache_hit_tokens_total kvcache_sessions_running kvcache_sessions_waiting \
         kvcache_cache_cells_used kvcache_cache_cells_free kvcache_cache_allocated_bytes \
         kvcache_step_seconds_bucket kvcache_preemptions_total kvcache_completions_total; do
  grep -q "^$m" "$tmp/body" || fail "metric $m missing"
done
grep -q '^kvcache_requests_total{endpoint="/v1/completions",status="413"} 3$' "$tmp/body" || fail "413 count"
hits=$(grep '^kvcache_prefix_cache_hit_tokens_total ' "$tmp/body" | cut -d' ' -f2)
[ "$hits" -ge 48 ] || fail "prefix hits $hits"
# Clearing the prefix cache: the retained sequences go and, with nothing running, every cell
# is free; a second clear finds nothing.
grep -q '^kvcache_sequences_retained 0$' "$tmp/body" && fail "nothing retained before the clear"
expect 200 POST /v1/cache/clear "{}"
jcheck "j['object']=='cache.clear' and j['cleared_sequences']>=1 and j['freed_cells']>0"
expect 200 GET /metrics
grep -q '^kvcache_sequences_retained 0$' "$tmp/body" || fail "retained after clear: $(grep retained "$tmp/body")"
grep -q '^kvcache_cache_cells_used 0$' "$tmp/body" || fail "cells used after clear: $(grep cells_used "$tmp/body")"
expect 200 POST /v1/cache/clear "{}"
jcheck "j['cleared_sequences']==0 and j['freed_cells']==0"
counted=0  # the count is taken after the response went out: look again briefly
for _ in $(seq 50); do
  req GET /metrics > /dev/null
  grep -q '^kvcache_requests_total{endpoint="/v1/cache/clear",status="200"} 2$' "$tmp/body" && { counted=1; break; }
  sleep 0.1
done
[ "$counted" = 1 ] || fail "clear count: $(grep cache/clear "$tmp/body")"
stop_server
grep -q 'kvcache serve: stopped' "$tmp/err.one" || fail "no stop line"

# ---- server 2: API key, no prefix cache; 32 concurrent streaming clients --------------------
start_server two --api-key sekret --no-prefix-cache --max-sessions 8 --max-queue 64
expect 200 GET /health
expect 401 GET /v1/models
jcheck "j['error']['code']=='invalid_api_key'"
expect 401 GET /metrics "" -H 'Authorization: Bearer wrong'
expect 401 POST /v1/completions '{"prompt": "a"}'
expect 200 GET /v1/models "" -H 'Authorization: Bearer sekret'
expect 200 GET /   # the static page needs no key; the calls it makes do
expect 401 POST /v1/cache/clear "{}"
expect 200 POST /v1/cache/clear "{}" -H 'Authorization: Bearer sekret'
jcheck "j['cleared_sequences']==0"
$py - "$url" "$bin" <<'PY' || fail "concurrent clients"
import http.client, json, subprocess, sys, urllib.parse
from http_threads import Threads
u = urllib.parse.urlparse(sys.argv[1])
H = {"Authorization": "Bearer sekret", "Content-Type": "application/json"}
def post(body):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps(body), H)
    r = c.getresponse()
    data = r.read().decode("utf-8")
    c.close()
    return r.status, data
prompts = [f"Request {i}: and the LORD said" for i in range(32)]
want = {}
for p in prompts:  # what `kvcache run` generates alone
    run = subprocess.run([sys.argv[2], "run", "--prompt", p, "--max-new-tokens", "24", "--json"],
                         capture_output=True, check=True, timeout=60)
    want[p] = bytes(json.loads(run.stdout)["tokens"]).decode("utf-8", "replace")
out = {}
def stream(p):
    s, d = post({"prompt": p, "max_tokens": 24, "stream": True})
    out[p] = (s, d)
Threads(stream, [(p,) for p in prompts]).join(90)
assert len(out) == 32, len(out)
for p, (s, d) in out.items():
    assert s == 200, (p, s, d)
    events = [e for e in d.split("\n\n") if e and not e.startswith(":")]
    assert events[-1] == "data: [DONE]", events[-3:]
    text = "".join(json.loads(e[6:])["choices"][0]["text"] for e in events[:-1])
    assert text == want[p], (p, text, want[p])
# A client that disconnects mid-stream.
c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
c.request("POST", "/v1/completions", json.dumps({"prompt": "bye", "max_tokens": 250, "stream": True, "ignore_eos": True}), H)
r = c.getresponse()
assert r.status == 200 and r.readline().startswith(b"data: ")
c.sock.close()
PY
# Every cell is free again (no prefix cache: nothing retained).
ok=0
for _ in $(seq 50); do
  req GET /metrics "" -H 'Authorization: Bearer sekret' > /dev/null
  if grep -q '^kvcache_cache_cells_used 0$' "$tmp/body" && grep -q '^kvcache_sessions_running 0$' "$tmp/body"; then ok=1; break; fi
  sleep 0.1
done
[ "$ok" = 1 ] || fail "cells still used after the load: $(grep -E '^kvcache_(cache_cells_used|sessions_running)' "$tmp/body")"
grep -q '^kvcache_requests_total{endpoint="/v1/completions",status="200"} 33$' "$tmp/body" || fail "200 count: $(grep requests_total "$tmp/body")"
stop_server

# ---- server 3: one session, a queue of one, an unknown template --------------------------------
start_server three --max-sessions 1 --max-queue 1 --chat-template nope
grep -q "warning: --chat-template: no chat template: chat_template = 'nope'" "$tmp/err.three" || fail "template warning"
error_param POST /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}]}'
jcheck "'--chat-template' in j['error']['message'] and j['error']['param']=='messages'"
$py - "$url" <<'PY' || fail "queue limit"
import http.client, json, sys, urllib.parse
from http_threads import Threads
u = urllib.parse.urlparse(sys.argv[1])
res = []
def go():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/v1/completions", json.dumps({"prompt": "q", "max_tokens": 250, "ignore_eos": True}))
    r = c.getresponse()
    res.append((r.status, r.getheader("Retry-After"), r.read()))
Threads(go, [()] * 8).join(60)
codes = sorted(s for s, _, _ in res)
assert len(res) == 8 and 200 in codes and 429 in codes, codes
for s, ra, body in res:
    if s == 429:
        assert ra == "1" and json.loads(body)["error"]["code"] == "queue_full", (ra, body)
PY
stop_server
echo "PASS"
