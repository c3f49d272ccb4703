"""Hostile HTTP clients against a running `kvcache serve`, one scenario per subcommand (driven by
http_limits_test.sh, which starts each server with the flags the scenario names). Raw sockets,
so the test controls framing and timing byte by byte. Each scenario asserts and exits non-zero
on failure.

    http_limits.py chunked URL PID     # over-limit bodies (chunked and Content-Length): 413 fast, RSS flat
    http_limits.py nobody URL          # POST with neither Content-Length nor Transfer-Encoding
    http_limits.py trickle URL         # 70 clients at 1 header byte/s; /health meanwhile; 408s
    http_limits.py saturated URL       # /health and /metrics while the one worker is busy
    http_limits.py queue URL           # the 429 message and the waiting gauge under --max-queue 2
    http_limits.py peer_cap URL        # --max-connections 5 --max-connections-per-peer 3
    http_limits.py save_budget URL     # /v1/cache/save over the session budget names its field
    http_limits.py linger URL FILE     # holds a trickling, an idle and a streaming connection
                                       # (writes FILE once they are open) until the server closes them
"""
import json
import select
import socket
import sys
import threading
import time
import urllib.parse

from http_threads import Threads

URL = urllib.parse.urlparse(sys.argv[2])
HOST, PORT = URL.hostname, URL.port


def connect(source="127.0.0.1"):
    s = socket.create_connection((HOST, PORT), timeout=10, source_address=(source, 0))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s, timeout, head_only=False):
    """(status, headers dict, body) of one response (just the head for a HEAD request)."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        assert got, f"connection closed before a response: {data!r}"
        data += got
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    if head_only:
        return status, headers, body

    def more():
        got = s.recv(65536)
        assert got, "connection closed inside the body"
        return got

    if headers.get("transfer-encoding") == "chunked":  # an unfinished generation's answer
        raw, body = body, b""
        while True:
            while b"\r\n" not in raw:
                raw += more()
            size, raw = raw.split(b"\r\n", 1)
            n = int(size, 16)
            while len(raw) < n + 2:
                raw += more()
            body, raw = body + raw[:n], raw[n + 2:]
            if n == 0:
                return status, headers, body
    n = int(headers.get("content-length", "-1"))
    while n >= 0 and len(body) < n:
        body += more()
    return status, headers, body


def request(method, path, body=None, timeout=10):
    """One request on a fresh connection: (status, body bytes, seconds taken)."""
    t0 = time.monotonic()
    s = connect()
    payload = b"" if body is None else body.encode()
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(payload)}\r\n"
              "Connection: close\r\n\r\n".encode() + payload)
    status, _, data = read_response(s, timeout)
    s.close()
    return status, data, time.monotonic() - t0


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def chunked(pid):
    # Server: --max-body-bytes 65536. Four clients each offer 50 MiB chunked (64 KiB chunks);
    # the answer must come once the limit is passed, long before 50 MiB went out.
    limit, total, piece = 65536, 50 << 20, 64 << 10
    rss0, peak = rss_kib(pid), [rss_kib(pid)]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    results = []

    def offer(_):
        s = connect()
        t0 = time.monotonic()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
                  b"Content-Type: application/json\r\n\r\n")
        chunk = b"%x\r\n" % piece + b"a" * piece + b"\r\n"
        sent, pending = 0, memoryview(chunk)
        s.setblocking(False)
        while sent < total:
            r, w, _ = select.select([s], [s], [], 5)
            if r:
                break  # the answer is there
            if w:
                try:
                    n = s.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent, pending = sent + n, pending[n:] if n < len(pending) else memoryview(chunk)
        answered = time.monotonic() - t0
        s.setblocking(True)
        status, _, body = read_response(s, 5)
        results.append((status, json.loads(body)["error"]["code"], sent, answered))
        s.close()

    Threads(offer, [(i,) for i in range(4)]).join(60)
    stop.set()
    sampler.join()
    for status, code, sent, answered in results:
        assert status == 413 and code == "body_too_large", (status, code)
        # Loopback socket buffers hold a few MiB; the old server read all 50 MiB and answered 200.
        assert sent < 16 << 20, f"413 only after {sent} bytes of a {limit}-byte limit"
        assert answered < 3, f"413 after {answered:.2f} s"
    growth = (peak[0] - rss0) / 1024
    # Four bodies of at most 64 KiB each: the bound leaves room for allocator slack only.
    assert growth < 32, f"RSS grew {growth:.1f} MiB ({rss0} KiB -> {peak[0]} KiB)"
    print(f"chunked: 4 x 413 after <= {max(r[2] for r in results) >> 20} MiB sent, "
          f"<= {max(r[3] for r in results):.2f} s; RSS peak +{growth:.1f} MiB")

    # A Content-Length over the limit is refused on its headers, before any body byte.
    s = connect()
    t0 = time.monotonic()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 52428800\r\n\r\n")
    status, _, body = read_response(s, 2)
    err = json.loads(body)["error"]
    assert status == 413 and err["code"] == "body_too_large" and "65536" in err["message"], (status, err)
    assert time.monotonic() - t0 < 2
    status, _, _ = request("GET", "/health")
    assert status == 200


def nobody():
    # Neither Content-Length nor Transfer-Encoding: the body is empty (RFC 9112 6.3), so the
    # answer comes at once and the connection stays open.
    for path, want in (("/v1/completions", 400), ("/v1/cache/clear", 200)):
        s = connect()
        t0 = time.monotonic()
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        status, headers, body = read_response(s, 2)
        took = time.monotonic() - t0
        assert status == want and took < 2, (path, status, took, body)
        if want == 400:
            assert json.loads(body)["error"]["code"] == "invalid_json", body
        assert headers["connection"] == "keep-alive", headers
        s.close()
    print(f"nobody: answered in {took:.3f} s")
    # HEAD gets a GET's headers and no body: the next request on the connection reads cleanly.
    s = connect()
    s.sendall(b"HEAD /health HTTP/1.1\r\nHost: t\r\n\r\nGET /health HTTP/1.1\r\nHost: t\r\n\r\n")
    status, headers, rest = read_response(s, 2, head_only=True)
    assert status == 200 and headers["content-length"] == "15", (status, headers)
    data = rest  # what came after the head: the GET's answer, not a body
    while not data.endswith(b'{"status":"ok"}'):
        data += s.recv(65536)
    assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data
    s.close()


def trickle():
    # Server: --http-threads 4 --request-timeout-ms 1500 --keep-alive-timeout-ms 1000.
    line = b"GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"z" * 200
    socks = [connect() for _ in range(70)]
    idle = [connect() for _ in range(5)]
    answers = {}
    t0 = time.monotonic()
    done = threading.Event()

    def drip():  # one byte per second to every trickler not answered yet
        for i in range(len(line)):
            for k, s in enumerate(socks):
                if k not in answers:
                    try:
                        s.send(line[i:i + 1])
                    except OSError:
                        answers.setdefault(k, ("reset", time.monotonic() - t0))
            end = time.monotonic() + 1.0
            while time.monotonic() < end and len(answers) < len(socks):
                live = [s for k, s in enumerate(socks) if k not in answers]
                r, _, _ = select.select(live, [], [], max(0.0, end - time.monotonic()))
                for s in r:
                    data = s.recv(4096)
                    answers[socks.index(s)] = (data.split(b" ")[1].decode() if data else "eof",
                                               time.monotonic() - t0)
            if len(answers) == len(socks) or done.is_set():
                return

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    time.sleep(1.2)  # every trickler has sent a byte or two
    for path in ("/health", "/metrics", "/health"):
        status, _, took = request("GET", path)
        assert status == 200 and took < 2, f"GET {path}: {status} after {took:.2f} s"
    print(f"trickle: GET /health and /metrics beside 70 trickling connections in < 2 s (last {took:.3f} s)")
    dripper.join(8)
    done.set()
    late = [(k, a) for k, a in answers.items() if a[0] != "408" or a[1] > 1.5 + 1.5]
    assert len(answers) == 70 and not late, f"{len(answers)} of 70 answered; not 408 in 3 s: {late[:5]}"
    for s in socks:  # each was closed after its 408
        s.settimeout(2)
        rest = s.recv(65536)
        while rest:
            rest = s.recv(65536)
    for s in idle:
        s.settimeout(3)
        assert s.recv(1) == b"", "an idle connection was not closed after the keep-alive timeout"
    print(f"trickle: 70 x 408 within {max(a[1] for a in answers.values()):.2f} s; 5 idle connections closed")


def saturated():
    # Server: --http-threads 1 --max-sessions 1. Eight generations of 250 tokens queue behind the
    # one worker (about 0.3 s each); /health and /metrics answer meanwhile from their own pool.
    finished = []

    def generate(_):
        status, _, _ = request("POST", "/v1/completions",
                               json.dumps({"prompt": "q", "max_tokens": 250, "ignore_eos": True}), 60)
        finished.append(status)

    gens = Threads(generate, [(i,) for i in range(8)])
    time.sleep(0.3)
    worst = 0.0
    for path in ("/health", "/metrics") * 3:
        status, _, took = request("GET", path)
        assert status == 200, (path, status)
        worst = max(worst, took)
    pending = 8 - len(finished)
    assert worst < 0.5, f"light routes took {worst:.2f} s behind generations"
    assert pending >= 2, f"only {pending} generations were pending: the worker was not saturated"
    gens.join(60)
    assert finished.count(200) == 8, finished
    print(f"saturated: /health and /metrics in <= {worst:.3f} s with {pending} generations pending")


def queue():
    # Server: --max-sessions 1 --max-queue 2. The 429 message names the limit; the waiting gauge
    # never passes it.
    results, peak, stop = [], [0], threading.Event()

    def watch():
        while not stop.is_set():
            _, body, _ = request("GET", "/metrics")
            for line in body.decode().splitlines():
                if line.startswith("kvcache_sessions_waiting "):
                    peak[0] = max(peak[0], int(float(line.split()[1])))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()

    def generate(_):
        status, body, _ = request("POST", "/v1/completions",
                                  json.dumps({"prompt": "q", "max_tokens": 250, "ignore_eos": True}), 60)
        results.append((status, json.loads(body)))

    Threads(generate, [(i,) for i in range(12)]).join(60)
    stop.set()
    watcher.join()
    busy = [j["error"]["message"] for s, j in results if s == 429]
    assert busy and 200 in [s for s, _ in results], [s for s, _ in results]
    want = "server busy: the queue of requests waiting for a session is full (2, max_queue)"
    assert all(m == want for m in busy), busy
    assert peak[0] <= 2, f"{peak[0]} sessions waiting with --max-queue 2"
    print(f"queue: {len(busy)} x 429 naming the limit; waiting gauge peak {peak[0]}")


def peer_cap():
    # Server: --max-connections 5 --max-connections-per-peer 3 (loopback has 127.0.0.0/8, so
    # three addresses are three peers).
    def refused(source, limit):
        s = connect(source)
        status, headers, body = read_response(s, 2)
        err = json.loads(body)["error"]
        assert status == 503 and err["code"] == "too_many_connections", (status, err)
        assert limit in err["message"] and headers["retry-after"] == "1", err
        s.close()
        time.sleep(0.3)  # a refused connection counts until the server closed it

    held = [connect() for _ in range(3)]
    time.sleep(0.2)
    refused("127.0.0.1", "max_connections_per_peer = 3")
    held += [connect("127.0.0.2") for _ in range(2)]
    time.sleep(0.2)
    refused("127.0.0.3", "max_connections = 5")
    for h in held:
        h.close()
    time.sleep(0.3)
    status, _, _ = request("GET", "/health")
    assert status == 200
    print("peer_cap: the 4th connection from one address and the 6th overall got 503")


def save_budget():
    # Server: --snapshot-dir DIR (256 tokens per session with the embedded model).
    status, body, _ = request("POST", "/v1/cache/save",
                              json.dumps({"name": "big", "prompt": "word " * 400}))
    err = json.loads(body)["error"]
    assert status == 400 and err["param"] == "prompt", (status, err)
    status, body, _ = request("POST", "/v1/cache/save",
                              json.dumps({"name": "big", "messages": [{"role": "user", "content": "word " * 400}]}))
    err = json.loads(body)["error"]
    assert status == 400 and err["param"] == "messages", (status, err)
    print("save_budget: 400 names prompt / messages")


def linger(ready_file):
    trickler, idle, stream = connect(), connect(), connect()
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
    assert read_response(idle, 5)[0] == 200  # kept alive, now idle
    body = json.dumps({"prompt": "q", "max_tokens": 250, "ignore_eos": True, "stream": True}).encode()
    stream.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    stream.recv(1)  # the stream started
    open(ready_file, "w").write("ready\n")
    line = b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"X-Slow: " + b"z" * 100
    for b in line:  # 1 byte/s until the server closes it
        try:
            trickler.send(bytes([b]))
        except OSError:
            break
        r, _, _ = select.select([trickler], [], [], 1.0)
        if r and not trickler.recv(4096):
            break
    for s in (idle, stream):
        s.settimeout(5)
        while s.recv(65536):
            pass


if __name__ == "__main__":
    scenario = sys.argv[1]
    if scenario == "chunked":
        chunked(int(sys.argv[3]))
    elif scenario == "linger":
        linger(sys.argv[3])
    else:
        globals()[scenario]()
