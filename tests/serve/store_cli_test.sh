#!/usr/bin/env bash
# The shared prefix store end to end: Debian's redis-server on a free loopback port (its own
# temporary directory, --save ''), two `kvcache serve` replicas sharing it, and `kvcache batch`.
# A long prompt served by replica A is a store hit on replica B (cached_tokens, /metrics) with
# the same greedy text; Redis killed: both keep answering 200; Redis back: hits resume.
# `kvcache batch --kv-store --json` reports the store counters. Usage: store_cli_test.sh KVCACHE_BIN
set -euo pipefail
bin=$1
. "$(dirname "$0")/../server/lib.sh"
[ -x /usr/bin/redis-server ] || fail "needs Debian's redis-server (scripts/setup.sh)"
require_embedded_model
# A free port below the ephemeral range (32768+), so that while Redis is down for the outage
# no other process's port-0 bind can take it before the restart.
port=$($py -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()')
store="redis://127.0.0.1:$port"

start_redis() {
  /usr/bin/redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --loglevel warning > "$tmp/err.redis" 2>&1 &
  redis_pid=$!
  pids+=("$redis_pid")
  disown "$redis_pid"  # killed on purpose below: no job-control notice
  for _ in $(seq 300); do
    kill -0 "$redis_pid" 2>/dev/null || fail "redis-server exited (port $port taken?)"
    $py -c 'import socket,sys; s=socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1); s.sendall(b"PING\r\n"); sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)' "$port" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "redis-server did not answer"
}


# complete URL PROMPT OUT: a greedy completion; fails unless 200.
complete() {
  local code
  code=$(curl -sS --max-time 60 -o "$3" -w '%{http_code}' "$1/v1/completions" \
    -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\": \"$2\", \"max_tokens\": 16, \"temperature\": 0}")
  [ "$code" = 200 ] || fail "completion on $1: status $code: $(head -c 300 "$3")"
}
metric() { curl -sS --max-time 10 "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
cached() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens_details"]["cached_tokens"])' "$1"; }
# wait_puts URL N: until the replica's store thread has written N blocks (30 s at most).
wait_puts() {
  for _ in $(seq 300); do
    [ "$(metric "$1" kvcache_store_puts_total)" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 wrote $(metric "$1" kvcache_store_puts_total) blocks, expected $2; $(curl -sS --max-time 10 "$1/metrics" | grep '^kvcache_store' | tr '\n' ' ')"
}
text() { $py -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["text"])' "$1"; }

start_redis
start_server a --kv-store "$store" --kv-store-wait-ms 20000
start_server b --kv-store "$store" --kv-store-wait-ms 20000
long="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit"
complete "$url_a" "$long" "$tmp/a.json"
wait_puts "$url_a" 9
complete "$url_b" "$long" "$tmp/b.json"
[ "$(text "$tmp/a.json")" = "$(text "$tmp/b.json")" ] || fail "replicas differ: $(text "$tmp/a.json") / $(text "$tmp/b.json")"
[ "$(cached "$tmp/a.json")" = 0 ] || fail "replica A had cached tokens"
# 155 bytes (and a BOS if the model has one), all but the last looked up: 9 blocks of 16.
[ "$(cached "$tmp/b.json")" = 144 ] || fail "replica B cached $(cached "$tmp/b.json"), expected 144"
[ "$(metric "$url_b" kvcache_store_hit_blocks_total)" = 9 ] || fail "B store hit blocks"
[ "$(metric "$url_b" kvcache_store_hit_tokens_total)" = 144 ] || fail "B store hit tokens"
[ "$(metric "$url_a" kvcache_store_puts_total)" = 9 ] || fail "A store puts"
[ "$(metric "$url_b" kvcache_store_checksum_failures_total)" = 0 ] || fail "B checksum failures"

# Redis dies: both replicas keep answering (recompute).
kill -KILL "$redis_pid"
for _ in $(seq 50); do kill -0 "$redis_pid" 2>/dev/null || break; sleep 0.1; done
complete "$url_a" "$long And God said" "$tmp/a2.json"
complete "$url_b" "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures" "$tmp/b2.json"
[ "$(metric "$url_b" kvcache_store_errors_total)" -ge 1 ] || fail "B counted no store error"

# Redis back (empty): after the retry interval a new prompt on B is a hit on A.
start_redis
sleep 0.7
other="He restoreth my soul: he leadeth me in the paths of righteousness for his name's sake. Yea, though I walk through the valley of the shadow of death, I will fear no evil"
puts_b=$(metric "$url_b" kvcache_store_puts_total)
complete "$url_b" "$other" "$tmp/b3.json"
wait_puts "$url_b" $((puts_b + 10))  # 168 bytes: 10 full blocks
complete "$url_a" "$other" "$tmp/a3.json"
[ "$(cached "$tmp/a3.json")" = 160 ] || fail "A after the outage cached $(cached "$tmp/a3.json"), expected 160"
[ "$(text "$tmp/a3.json")" = "$(text "$tmp/b3.json")" ] || fail "replicas differ after the outage"

# kvcache batch: the --json store object, a hit on a second run.
printf '{"prompt": "%s", "max_new_tokens": 8}\n' "$other" > "$tmp/p.jsonl"
"$bin" batch --prompts-file "$tmp/p.jsonl" --kv-store "$store" --kv-store-wait-ms 20000 --json \
  2> "$tmp/err.batch" > "$tmp/batch.json" || fail "batch: $(tail -2 "$tmp/err.batch")"
"$bin" batch --prompts-file "$tmp/p.jsonl" --kv-store "redis://127.0.0.1:$port/1" \
  --kv-store-wait-ms 20000 --json \
  2>> "$tmp/err.batch" > "$tmp/batch1.json" || fail "batch db 1"
$py - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
j, j1 = (json.load(open(f"{d}/{n}.json")) for n in ("batch", "batch1"))
s = j["store"]
for k in ("hit_tokens", "hit_blocks", "lookups", "misses", "timeouts", "bytes_in", "bytes_out",
          "puts", "checksum_failures", "rejected_blocks", "errors"):
    assert k in s, k
assert s["hit_tokens"] == 160 and s["hit_blocks"] == 10, s
assert j["results"][0]["cached_prompt_tokens"] == s["hit_tokens"], j["results"][0]
assert s["bytes_in"] > 0 and s["errors"] == 0 and s["checksum_failures"] == 0, s
# Database 1 is another keyspace: nothing there yet.
assert j1["store"]["hit_tokens"] == 0 and j1["store"]["puts"] >= 9, j1["store"]
PY
rc=0
"$bin" batch --prompts-file "$tmp/p.jsonl" --kv-store "http://x" 2> "$tmp/err.bad" || rc=$?
[ "$rc" = 1 ] || fail "bad url: exit $rc, expected 1 (refused)"
grep -q -- '--kv-store: kv_store = "http://x": expected redis://HOST:PORT\[/DB\]' "$tmp/err.bad" || fail "bad url message: $(cat "$tmp/err.bad")"
echo "store CLI: ok"
