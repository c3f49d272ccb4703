// The HTTP front: routes, auth, OpenAI-style errors, request handling that tokenizes and hands
// work to the engine thread, and server-sent-event streaming. Layer: server. Connections,
// deadlines and body limits are the listener's (http_listener.h); worker threads only parse,
// enqueue and stream; the EngineLoop owns the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "text/tokenizer.h"
#include "server/api.h"
#include "text/chat_template.h"
#include "server/engine_loop.h"

namespace kvcache::server {

inline constexpr size_t kDefaultMaxBodyBytes = size_t{1} << 20;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0 = any free port
  std::string api_key;                   // empty = no auth
  size_t max_body_bytes = kDefaultMaxBodyBytes;
  int http_threads = 64;                 // requests answered at once (generation workers)
  int max_connections = 512;             // open connections; more get 503
  int max_connections_per_peer = 0;      // open connections per remote address; 0 = no cap
  int64_t request_timeout_ms = 10000;    // a request's first byte to its last (headers + body)
  int64_t keep_alive_timeout_ms = 5000;  // an idle connection's wait for its next request
  std::string model_name;                // /v1/models id
  std::optional<text::ChatTemplate> chat_template;  // nullopt = unknown: chat requests get a 400
  std::string chat_template_problem;     // the 400's message then (names the option or flag)
  std::string snapshot_dir;              // saved prefixes (POST /v1/cache/*) here; empty = off
};

// What requests are encoded with (borrowed; must outlive the server).
struct ServerModel {
  const text::Tokenizer* tokenizer = nullptr;
  ApiLimits limits;
};

// Thread-safety: stop() from any thread (e.g. a signal watcher); the rest from one.
class HttpServer {
 public:
  HttpServer(EngineLoop& loop, ServerOptions options, ServerModel model);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; returns the port (the chosen one for port 0). FailedPrecondition when
  // the address cannot be bound.
  Result<int> bind();
  // Serves until stop(); false when the listener failed. After stop(): connections still
  // reading a request or idle are closed at once, handlers get 1 s to end (the engine's
  // stop ends their generations) before their sockets are shut.
  bool serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The chat page served at GET / (one self-contained HTML document).
extern const char* const kChatPageHtml;

}  // namespace kvcache::server
