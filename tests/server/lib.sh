# Shared by the shell tests that run `kvcache serve` (tests/server/*_http_test.sh,
# tests/serve/store_cli_test.sh). Source it after `set -euo pipefail` and setting bin (the
# kvcache binary): . "$(dirname "$0")/lib.sh". It makes $tmp (removed on exit, when every
# process in $pids is killed), sets py, and defines fail, start_server and stop_server, and
# require_embedded_model (tests/embedded_model.sh). It sends no request: each test keeps its
# own request helpers.
. "$(dirname "${BASH_SOURCE[0]}")/../embedded_model.sh"
tmp=$(mktemp -d)
pids=()
py=/usr/bin/python3
kvcache_test_cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap kvcache_test_cleanup EXIT

# fail MESSAGE: prints it and the last lines of every $tmp/err.* (server stderr), exits 1.
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/err.*; do [ -e "$f" ] && { echo "--- $f" >&2; tail -5 "$f" >&2; }; done
  exit 1
}

# start_server NAME FLAGS...: `kvcache serve` on a free loopback port, stderr in $tmp/err.NAME;
# waits (30 s at most) for its "listening on" line. Sets pid, url and url_NAME.
start_server() {
  local name=$1
  shift
  "$bin" serve --host 127.0.0.1 --port 0 "$@" 2> "$tmp/err.$name" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 300); do
    grep -q '^listening on http://' "$tmp/err.$name" && break
    kill -0 "$pid" 2>/dev/null || fail "$name: the server exited"
    sleep 0.1
  done
  url=$(grep -o '^listening on http://127.0.0.1:[0-9]*' "$tmp/err.$name" | sed 's/^listening on //')
  [ -n "$url" ] || fail "$name: no 'listening on' line"
  printf -v "url_$name" '%s' "$url"
}

# stop_server: SIGTERM to the last started server ($pid), then exit 0 within 5 s.
stop_server() {
  kill -TERM "$pid"
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "still running 5 s after SIGTERM"
  local rc=0
  wait "$pid" || rc=$?
  [ "$rc" -eq 0 ] || fail "exit code $rc after SIGTERM"
}
