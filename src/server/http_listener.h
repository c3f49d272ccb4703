// The connection layer of `kvcache serve`: one event thread accepts connections and reads every
// request (headers and body) without blocking, under a total deadline per request, caps on open
// connections (overall and per peer) and the body limit in any framing; a complete request goes
// to a worker pool (light requests, e.g. /health, to a small pool of their own, so they are
// answered while every generation worker is busy). Layer: server. It knows no routes and no JSON.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http_message.h"

namespace kvcache::server::http {

struct ListenerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                          // 0 = any free port
  Limits limits;
  int workers = 64;                      // requests handled at once
  int light_workers = 2;                 // requests for which Hooks::is_light holds
  int max_connections = 512;             // open at once; one more gets 503 and is closed
  int max_connections_per_peer = 0;      // per remote address; 0 = no cap of its own
  std::chrono::milliseconds request_timeout{10000};  // a request's first byte to its last: 408
  std::chrono::milliseconds idle_timeout{5000};      // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{10000};    // a write that makes no progress that long fails
  std::chrono::milliseconds stop_grace{1000};        // stop(): then connections still answered are cut
};

struct ListenerHooks {
  std::function<void(const Request&, Response&)> handle;  // runs on a worker thread
  std::function<bool(const Request&)> is_light;           // cheap requests (their own pool)
  // Fills a refusal the listener makes itself: 400, 408, 413, 431, 501, 503, 505; `code` is a
  // short snake_case name, the message says which limit.
  std::function<void(int status, const std::string& message, const std::string& code, Response&)> error;
  std::function<void(const Request&, int status)> on_response;  // every response sent (counters)
};

// Thread-safety: stop() from any thread (a signal watcher); the rest from one.
class Listener {
 public:
  Listener(ListenerOptions options, ListenerHooks hooks);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Binds and listens; the port (the chosen one for port 0). FailedPrecondition when the
  // address cannot be bound.
  Result<int> bind();
  // Runs the event loop on the calling thread until stop(). Then: no new connections, idle and
  // unfinished requests are closed, handlers get stop_grace to end before their sockets are
  // shut, the workers are joined. False when the listening socket failed.
  bool serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvcache::server::http
