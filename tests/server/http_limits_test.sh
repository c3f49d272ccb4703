#!/usr/bin/env bash
# The HTTP layer under hostile clients (issue 24 item 7), each scenario in http_limits.py over
# loopback with the embedded model: a chunked or declared body over --max-body-bytes gets 413 as
# soon as it passes the limit and RSS stays flat; a POST without Content-Length or
# Transfer-Encoding is answered at once; 70 connections trickling header bytes neither delay
# GET /health nor live past --request-timeout-ms (408); light routes answer while the
# generation workers are busy; the connection caps; the 429 message; /v1/cache/save
# names the refused field; SIGTERM with a trickling, an idle and a streaming client exits 0
# within 2 s. Usage: http_limits_test.sh KVCACHE_BIN
set -euo pipefail
bin=$1
. "$(dirname "$0")/lib.sh"
require_embedded_model
export PYTHONPATH="$(cd "$(dirname "$0")" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
limits="$(dirname "$0")/http_limits.py"
run() { $py "$limits" "$@" || fail "scenario $1"; }

start_server body --max-body-bytes 65536
run chunked "$url" "$pid"
run nobody "$url"
stop_server

start_server trickle --http-threads 4 --request-timeout-ms 1500 --keep-alive-timeout-ms 1000
run trickle "$url"
stop_server

start_server saturated --http-threads 1 --max-sessions 1
run saturated "$url"
stop_server

start_server queue --max-sessions 1 --max-queue 2
run queue "$url"
stop_server

start_server peer --max-connections 5 --max-connections-per-peer 3
run peer_cap "$url"
stop_server

mkdir "$tmp/snapshots"
start_server save --snapshot-dir "$tmp/snapshots"
run save_budget "$url"
stop_server

# SIGTERM while a client trickles header bytes, one idles on keep-alive and one streams: the
# listener closes the first two at once and the engine's stop ends the stream.
start_server term
$py "$limits" linger "$url" "$tmp/ready" &
client=$!
pids+=("$client")
for _ in $(seq 100); do [ -e "$tmp/ready" ] && break; sleep 0.05; done
[ -e "$tmp/ready" ] || fail "linger: the clients did not connect"
t0=$(date +%s%N)
kill -TERM "$pid"
for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
kill -0 "$pid" 2>/dev/null && fail "still running 2 s after SIGTERM with lingering clients"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || fail "exit code $rc after SIGTERM"
echo "term: exited in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
wait "$client" || fail "linger client"
echo "PASS"
