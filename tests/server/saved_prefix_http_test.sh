#!/usr/bin/env bash
# Saved prefixes over HTTP on the embedded model: POST /v1/cache/save writes
# <snapshot-dir>/<name>.kvs, a fresh server's POST /v1/cache/restore loads it, and the next
# completion extending the prompt is a prefix hit (usage cached_tokens) with the greedy text
# of `kvcache run`; names that could escape the folder, unknown names, another kv dtype, a
# corrupt file and a server without --snapshot-dir are refused. Usage: KVCACHE_BIN
set -euo pipefail
bin=$1
. "$(dirname "$0")/lib.sh"
require_embedded_model
post() {  # post PATH BODY: prints the status, body in $tmp/body
  curl -sS --max-time 60 -o "$tmp/body" -w '%{http_code}' -X POST "$url$1" \
    -H 'Content-Type: application/json' --data-binary "$2"
}
expect() {  # expect STATUS PATH BODY
  local got
  got=$(post "$2" "$3")
  [ "$got" = "$1" ] || { cat "$tmp/body" >&2; fail "POST $2 $3: status $got, expected $1"; }
}
field() { $py -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {"j": j}))' "$tmp/body" "$1"; }

mkdir "$tmp/snaps"
prompt="In the beginning God created the heaven"
start_server a --snapshot-dir "$tmp/snaps"
expect 200 /v1/cache/save "{\"name\":\"genesis\",\"prompt\":\"$prompt\"}"
[ "$(field 'j["tokens"]')" = "${#prompt}" ] || fail "saved tokens: $(cat "$tmp/body")"
[ "$(field 'j["object"]')" = "cache.prefix" ] || fail "object: $(cat "$tmp/body")"
[ -s "$tmp/snaps/genesis.kvs" ] || fail "no genesis.kvs"
[ "$(stat -c %s "$tmp/snaps/genesis.kvs")" = "$(field 'j["bytes"]')" ] || fail "bytes"
system='{"role":"system","content":"You are a helpful assistant who answers briefly."}'
expect 200 /v1/cache/save "{\"name\":\"sys\",\"messages\":[$system]}"
sys_tokens=$(field 'j["tokens"]')
for bad in '../evil' '.hidden' 'a/b' '' "$(printf 'x%.0s' $(seq 65))"; do
  expect 400 /v1/cache/save "{\"name\":\"$bad\",\"prompt\":\"x\"}"
  [ "$(field 'j["error"]["param"]')" = "name" ] || fail "name '$bad' not named"
done
[ ! -e "$tmp/evil.kvs" ] || fail "a name escaped the folder"
expect 400 /v1/cache/save '{"name":"x"}'   # no prompt
expect 404 /v1/cache/restore '{"name":"nothing"}'
stop_server

# A fresh server: restore, then a request extending the prompt hits all of it.
start_server b --snapshot-dir "$tmp/snaps"
expect 200 /v1/cache/restore '{"name":"genesis"}'
[ "$(field 'j["tokens"]')" = "${#prompt}" ] || fail "restored tokens: $(cat "$tmp/body")"
longer="$prompt and the earth."
expect 200 /v1/completions "{\"prompt\":\"$longer\",\"max_tokens\":8,\"temperature\":0}"
[ "$(field 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')" = "${#prompt}" ] ||
  fail "no prefix hit after restore: $(cat "$tmp/body")"
got=$(field 'j["choices"][0]["text"]')
want=$("$bin" run --prompt "$longer" --max-new-tokens 8 --json 2>/dev/null |
       $py -c 'import json,sys; print(json.load(sys.stdin)["text"])')
[ "$got" = "$want" ] || fail "text after restore: '$got' vs run '$want'"
# Saved messages are rendered without the assistant prompt: a chat going on from them hits.
expect 200 /v1/cache/restore '{"name":"sys"}'
expect 200 /v1/chat/completions "{\"messages\":[$system,{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":4}"
[ "$(field 'j["usage"]["prompt_tokens_details"]["cached_tokens"]')" = "$sys_tokens" ] ||
  fail "no prefix hit for the saved system message: $(cat "$tmp/body")"
stop_server

start_server c --snapshot-dir "$tmp/snaps" --kv-dtype f16
expect 400 /v1/cache/restore '{"name":"genesis"}'
grep -q "kv dtype f32, this cache stores f16" "$tmp/body" || fail "dtype: $(cat "$tmp/body")"
$py - "$tmp/snaps/genesis.kvs" "$tmp/snaps/flipped.kvs" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-30] ^= 0x04
open(sys.argv[2], "wb").write(b)
PY
expect 400 /v1/cache/restore '{"name":"flipped"}'
grep -q "checksum mismatch" "$tmp/body" || fail "corrupt: $(cat "$tmp/body")"
stop_server

start_server d
expect 404 /v1/cache/restore '{"name":"genesis"}'
grep -q "saved prefixes are off (this server has no snapshot_dir)" "$tmp/body" || fail "off: $(cat "$tmp/body")"
stop_server
echo PASS
