// The HTTP front: routes, auth, body limits and OpenAI-style errors, request handling that
// tokenizes and hands work to the engine thread, and server-sent-event streaming. Layer:
// server. Connection threads only parse, enqueue and stream; the EngineLoop owns the model.
// The HTTP library stays inside http_server.cpp.
#pragma once

#include <cstddef>
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
  int http_threads = 64;                 // connections served at once
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
  // Serves until stop(); false when the listener failed.
  bool serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The chat page served at GET / (one self-contained HTML document).
extern const char* const kChatPageHtml;

}  // namespace kvcache::server
