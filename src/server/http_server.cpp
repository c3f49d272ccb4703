#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>
#include <vector>

#include <sys/socket.h>

#include <httplib.h>

#include "core/str_cat.h"
#include "server/metrics.h"
#include "server/saved_prefixes.h"
#include "text/utf8.h"

namespace kvcache::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr milliseconds kPoll{100};             // how often a waiting handler looks again
constexpr milliseconds kKeepAliveEvery{250};  // a write while nothing else is sent
constexpr auto kAcceptTimeout = std::chrono::seconds(30);
constexpr int kListenBacklog = 1024;

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

void reply_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) { reply_json(res, e.status, error_body(e)); }

ApiError status_error(int status, std::string message, std::string type, std::string code) {
  return ApiError{status, std::move(message), std::move(type), "", std::move(code)};
}

std::string sse(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string endpoint_label(const std::string& path) {
  static const char* kKnown[] = {"/", "/health", "/metrics", "/v1/models", "/v1/completions",
                                 "/v1/chat/completions", "/v1/cache/save", "/v1/cache/restore",
                                 "/v1/cache/clear"};
  for (const char* k : kKnown)
    if (path == k) return k;
  return "other";
}

// One streaming response's state, shared by the content provider and its releaser.
struct StreamState {
  std::shared_ptr<RequestChannel> channel;
  std::optional<RequestChannel::News> carry;  // news that came with the acceptance
  ResponseMeta meta;
  bool include_usage = false;
  std::vector<text::Utf8Stream> utf8;      // per completion
  std::vector<bool> finished;         // a finish_reason chunk was sent
  std::vector<ToolCallStream> tools;  // per completion, when answers are parsed for calls
  bool started = false, done = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

// The SSE chunks for a completion's next text (and its end when `fin`): plain deltas, or with
// tools, the content that cannot be a call yet and, at the end, the calls.
std::string stream_text(StreamState& st, int32_t c, const std::string& text,
                        std::optional<serve::Finish> fin) {
  if (st.tools.empty()) {
    if (text.empty() && !fin) return "";
    return sse(chunk_json(st.meta, c, text, false, fin));
  }
  ToolCallStream& ts = st.tools[static_cast<size_t>(c)];
  std::string out;
  if (const std::string shown = ts.push(text); !shown.empty())
    out += sse(chunk_json(st.meta, c, shown, false, std::nullopt));
  if (!fin) return out;
  const ChoiceOutput o = ts.finish();
  if (o.calls.empty() && !o.content.empty())
    out += sse(chunk_json(st.meta, c, o.content, false, std::nullopt));
  for (size_t k = 0; k < o.calls.size(); ++k)
    for (const json& j : tool_call_chunks(st.meta, c, static_cast<int32_t>(k), o.calls[k]))
      out += sse(j);
  return out + sse(chunk_json(st.meta, c, "", false, fin, !o.calls.empty()));
}

}  // namespace

struct HttpServer::Impl {
  EngineLoop& loop;
  ServerOptions opt;
  ServerModel model;
  httplib::Server svr;
  RequestCounters counters;
  std::atomic<int64_t> next_id{0};
  int64_t started = unix_now();
  int listen_fd = -1;  // the listening socket, seen through the socket-options hook

  Impl(EngineLoop& l, ServerOptions o, ServerModel m)
      : loop(l), opt(std::move(o)), model(std::move(m)) {}

  void routes();
  void clear_prefix_cache(httplib::Response& res);
  bool authorized(const httplib::Request& req) const;
  std::optional<ApiError> encode(ApiRequest& r, std::vector<int32_t>& prompt,
                                 bool generation_prompt = true) const;
  void saved_prefix(const httplib::Request& req, httplib::Response& res, bool save);
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void finish_whole(httplib::Response& res, const std::shared_ptr<RequestChannel>& ch,
                    const ResponseMeta& meta, std::optional<serve::RequestResult> result);
  void start_stream(httplib::Response& res, std::shared_ptr<RequestChannel> ch, ResponseMeta meta,
                    int32_t n, bool include_usage, RequestChannel::News first);
};

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  // The page at / is static (a browser cannot send a Bearer header when it opens it); the
  // key typed into it guards the API calls it makes.
  if (opt.api_key.empty() || req.path == "/health" || (req.path == "/" && req.method == "GET"))
    return true;
  // Compared in time independent of where the strings differ.
  const std::string got = req.get_header_value("Authorization"), want = "Bearer " + opt.api_key;
  unsigned diff = got.size() == want.size() ? 0u : 1u;
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>(want[i]) ^ static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  return diff == 0;
}

std::optional<ApiError> HttpServer::Impl::encode(ApiRequest& r, std::vector<int32_t>& prompt,
                                                 bool generation_prompt) const {
  if (!r.chat) {
    if (!r.prompt) {
      prompt = std::move(r.prompt_ids);
      return std::nullopt;
    }
    Result<std::vector<int32_t>> ids = model.tokenizer->encode(*r.prompt);
    if (!ids.ok()) return bad_field("prompt", "'prompt' cannot be tokenized: " + ids.status().message());
    prompt = std::move(*ids);
    return std::nullopt;
  }
  if (!opt.chat_template) return bad_field("messages", opt.chat_template_problem);
  const std::span<const std::string> tools =
      r.tools.active() ? std::span<const std::string>(r.tools.json) : std::span<const std::string>();
  Result<text::RenderedChat> rendered = text::render_chat_spans(*opt.chat_template, r.messages, generation_prompt,
                                                default_chat_tokens(*opt.chat_template), tools);
  if (!rendered.ok()) return bad_field("messages", rendered.status().message());
  if (generation_prompt) {
    if (auto e = plan_tools(r, *opt.chat_template, *model.tokenizer)) return e;
    rendered->text += r.forced_prefix;  // the model goes on from inside the call
  }
  Result<std::vector<int32_t>> ids = model.tokenizer->encode(rendered->text, text::chat_prompt_options(rendered->content));
  if (!ids.ok()) return bad_field("messages", "'messages' cannot be tokenized: " + ids.status().message());
  prompt = std::move(*ids);
  return std::nullopt;
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  ApiRequest r;
  if (auto e = parse_request(req.body, chat, model.limits, r)) return reply_error(res, *e);
  std::vector<int32_t> prompt;
  if (auto e = encode(r, prompt)) return reply_error(res, *e);
  if (auto e = resolve_max_tokens(r, static_cast<int64_t>(prompt.size()), model.limits))
    return reply_error(res, *e);
  const int32_t n = r.params.n;
  Result<std::shared_ptr<RequestChannel>> ch = loop.submit(std::move(prompt), r.params, r.stream);
  if (!ch.ok()) {
    if (ch.status().code() == StatusCode::kResourceExhausted) {
      res.set_header("Retry-After", "1");
      return reply_error(res, status_error(429, "server busy: " + ch.status().message(),
                                           "rate_limit_error", "queue_full"));
    }
    return reply_error(res, status_error(503, ch.status().message(), "server_error", "unavailable"));
  }
  // Wait until the executor took or refused it, so the status line is known.
  const auto deadline = std::chrono::steady_clock::now() + kAcceptTimeout;
  RequestChannel::News first;
  while (!first.accepted && !first.refused) {
    if (std::chrono::steady_clock::now() > deadline) {
      loop.cancel(*ch);
      return reply_error(res, status_error(503, "the engine did not take the request in time",
                                           "server_error", "unavailable"));
    }
    first = (*ch)->wait(kPoll);
  }
  if (first.refused)
    return reply_error(res, status_error(400, first.refused->message(), "invalid_request_error",
                                         "invalid_value"));
  const int64_t id = next_id.fetch_add(1);
  ResponseMeta meta{str_cat((chat ? "chatcmpl-" : "cmpl-"), started, "-", id),
                    unix_now(), opt.model_name, chat};
  if (chat && r.tools.active()) {
    meta.tools = true;
    meta.syntax = text::tool_syntax(*opt.chat_template);
    meta.forced_prefix = r.forced_prefix;
  }
  // `first` may already hold pieces and even the result: they are passed on, not dropped.
  if (!r.stream) return finish_whole(res, *ch, meta, std::move(first.result));
  start_stream(res, std::move(*ch), std::move(meta), n, r.include_usage, std::move(first));
}

// POST /v1/cache/save {"name", "prompt" | "messages"} and /v1/cache/restore {"name"}
// (saved_prefixes.h). Saved messages are rendered without the assistant prompt, so a later
// conversation that goes on from them starts with the same tokens.
void HttpServer::Impl::saved_prefix(const httplib::Request& req, httplib::Response& res,
                                    bool save) {
  if (opt.snapshot_dir.empty())
    return reply_error(res, status_error(404,
                                         "saved prefixes are off (this server has no "
                                         "snapshot_dir)",
                                         "invalid_request_error", "not_found"));
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    return reply_error(res, bad_field("", "the body is not a JSON object"));
  const auto name = body.find("name");
  if (name == body.end() || !name->is_string() || !valid_prefix_name(name->get<std::string>()))
    return reply_error(res, bad_field("name", "'name' must be 1..64 characters of A-Z a-z 0-9 "
                                              ". _ - not starting with '.'"));
  PrefixReply r;
  if (save) {
    ApiRequest ar;
    if (auto e = parse_request(req.body, body.contains("messages"), model.limits, ar, {"name"}))
      return reply_error(res, *e);
    std::vector<int32_t> prompt;
    if (auto e = encode(ar, prompt, /*generation_prompt=*/false)) return reply_error(res, *e);
    r = save_prefix(loop, opt.snapshot_dir, name->get<std::string>(), std::move(prompt));
  } else {
    r = restore_prefix(loop, opt.snapshot_dir, name->get<std::string>());
  }
  if (r.error) return reply_error(res, *r.error);
  reply_json(res, 200, r.body.dump());
}

static std::string whole_body(const ResponseMeta& meta, const serve::RequestResult& r) {
  std::vector<std::string> texts;
  std::vector<std::vector<ApiToolCall>> calls;
  for (const serve::Completion& c : r.completions) {
    texts.push_back(text::utf8_sanitize(c.text));
    if (!meta.tools) continue;
    ChoiceOutput o = tool_output(meta.syntax, meta.forced_prefix, texts.back());
    texts.back() = std::move(o.content);
    calls.push_back(std::move(o.calls));
  }
  return response_json(meta, r, texts, calls).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Unstreamed: the JSON once the result is in. While waiting, a space (JSON allows leading
// whitespace) goes out every kKeepAliveEvery, so a client that left is noticed and its request
// closed, as for a stream.
void HttpServer::Impl::finish_whole(httplib::Response& res, const std::shared_ptr<RequestChannel>& ch,
                                    const ResponseMeta& meta,
                                    std::optional<serve::RequestResult> result) {
  if (result) return reply_json(res, 200, whole_body(meta, *result));
  struct State {
    std::shared_ptr<RequestChannel> channel;
    ResponseMeta meta;
    bool done = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  auto st = std::make_shared<State>(State{ch, meta});
  res.status = 200;
  EngineLoop* loop_ptr = &loop;
  res.set_chunked_content_provider(
      "application/json",
      [st](size_t, httplib::DataSink& sink) {
        std::optional<serve::RequestResult> r = st->channel->wait(kPoll).result;
        if (r) {
          const std::string body = whole_body(st->meta, *r);
          if (!sink.write(body.data(), body.size())) return false;
          st->done = true;
          sink.done();
          return true;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now - st->last_write >= kKeepAliveEvery) {
          if (!sink.write(" ", 1)) return false;  // the client is gone
          st->last_write = now;
        }
        return true;
      },
      [st, loop_ptr](bool) {
        if (!st->done) loop_ptr->cancel(st->channel);
      });
}

void HttpServer::Impl::start_stream(httplib::Response& res, std::shared_ptr<RequestChannel> ch,
                                    ResponseMeta meta, int32_t n, bool include_usage,
                                    RequestChannel::News first) {
  auto st = std::make_shared<StreamState>();
  st->carry = std::move(first);
  st->channel = std::move(ch);
  st->meta = std::move(meta);
  st->include_usage = include_usage;
  st->utf8.resize(static_cast<size_t>(n));
  st->finished.assign(static_cast<size_t>(n), false);
  if (st->meta.tools)
    st->tools.assign(static_cast<size_t>(n), ToolCallStream(st->meta.syntax, st->meta.forced_prefix));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  EngineLoop* loop_ptr = &loop;
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!st->started) {
          st->started = true;
          if (st->meta.chat)  // the role chunk first, as the API sends it
            for (int32_t i = 0; i < static_cast<int32_t>(st->utf8.size()); ++i)
              out += sse(chunk_json(st->meta, i, "", true, std::nullopt));
        }
        RequestChannel::News news;
        if (st->carry) {  // what arrived with the acceptance
          news = std::move(*st->carry);
          st->carry.reset();
        } else {
          news = st->channel->wait(kPoll);
        }
        for (StreamPiece& p : news.pieces) {
          const size_t c = static_cast<size_t>(p.completion);
          if (c >= st->utf8.size() || st->finished[c]) continue;
          std::string text = st->utf8[c].push(p.text);
          std::optional<serve::Finish> fin;
          if (p.finish != serve::Finish::kNone) {
            text += st->utf8[c].finish();
            fin = p.finish;
            st->finished[c] = true;
          }
          out += stream_text(*st, p.completion, text, fin);
        }
        if (news.result) {
          for (size_t c = 0; c < st->finished.size(); ++c) {
            if (st->finished[c]) continue;
            const serve::Finish f = c < news.result->completions.size()
                                        ? news.result->completions[c].finish
                                        : serve::Finish::kCancelled;
            out += stream_text(*st, static_cast<int32_t>(c), st->utf8[c].finish(), f);
            st->finished[c] = true;
          }
          if (st->include_usage) out += sse(usage_chunk_json(st->meta, *news.result));
          out += "data: [DONE]\n\n";
          st->done = true;
        }
        const auto now = std::chrono::steady_clock::now();
        if (out.empty() && now - st->last_write >= kKeepAliveEvery) out = ": keep-alive\n\n";
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) return false;  // the client is gone
          st->last_write = now;
        }
        if (st->done) sink.done();
        return true;
      },
      [st, loop_ptr](bool) {
        if (!st->done) loop_ptr->cancel(st->channel);
      });
}

// Drops every retained prefix on the engine thread (between steps; running requests keep
// their cells) and reports what that freed.
void HttpServer::Impl::clear_prefix_cache(httplib::Response& res) {
  int64_t sequences = 0, free_before = 0, free_after = 0;
  Status st = loop.call([&](serve::Executor& ex) {
    sequences = ex.stats().retained;
    free_before = ex.cache().free_cells();
    ex.clear_prefix_cache();
    free_after = ex.cache().free_cells();
    return ok_status();
  });
  if (!st.ok())
    return reply_error(res, status_error(503, st.message(), "server_error", "unavailable"));
  reply_json(res, 200,
             json{{"object", "cache.clear"}, {"cleared_sequences", sequences},
                  {"freed_cells", free_after - free_before}, {"free_cells", free_after}}
                 .dump());
}

void HttpServer::Impl::routes() {
  svr.set_socket_options([this](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    listen_fd = fd;
  });
  svr.set_payload_max_length(opt.max_body_bytes);
  svr.set_keep_alive_timeout(2);
  svr.set_read_timeout(30);
  const int threads = opt.http_threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    reply_error(res, status_error(401, "missing or wrong API key (Authorization: Bearer KEY)",
                                  "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    reply_json(res, 200, R"({"status":"ok"})");
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json m{{"id", opt.model_name}, {"object", "model"}, {"created", started}, {"owned_by", "kvcache"}};
    reply_json(res, 200, json{{"object", "list"}, {"data", json::array({m})}}.dump());
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(loop.snapshot(), counters.counts()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPageHtml, "text/html; charset=utf-8");
  });
  svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, /*chat=*/false);
  });
  svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, /*chat=*/true);
  });
  svr.Post("/v1/cache/save", [this](const httplib::Request& req, httplib::Response& res) {
    saved_prefix(req, res, /*save=*/true);
  });
  svr.Post("/v1/cache/restore", [this](const httplib::Request& req, httplib::Response& res) {
    saved_prefix(req, res, /*save=*/false);
  });
  svr.Post("/v1/cache/clear", [this](const httplib::Request&, httplib::Response& res) {
    clear_prefix_cache(res);
  });
  // Statuses the library sets itself (404, 413, 400 on a bad request line...) get a JSON body.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    if (res.status == 404)
      return reply_error(res, status_error(404, "no route " + req.method + " " + req.path,
                                           "invalid_request_error", "not_found"));
    if (res.status == 413)
      return reply_error(res, status_error(413, "the request body is larger than the server's limit",
                                           "invalid_request_error", "body_too_large"));
    reply_error(res, status_error(res.status, str_cat("HTTP ", res.status),
                                  "invalid_request_error", ""));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    reply_error(res, status_error(500, "internal error", "server_error", "internal_error"));
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    counters.add(endpoint_label(req.path), res.status);
  });
}

HttpServer::HttpServer(EngineLoop& loop, ServerOptions options, ServerModel model)
    : impl_(std::make_unique<Impl>(loop, std::move(options), std::move(model))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind() {
  const int port = impl_->opt.port == 0 ? impl_->svr.bind_to_any_port(impl_->opt.host)
                                        : (impl_->svr.bind_to_port(impl_->opt.host, impl_->opt.port)
                                               ? impl_->opt.port
                                               : -1);
  if (port <= 0)
    return failed_precondition(str_cat("serve: cannot listen on ", impl_->opt.host, ":",
                                       impl_->opt.port));
  // The library listens with a backlog of 5, so a burst of clients would find connections
  // reset; listening again on the bound socket raises it.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, kListenBacklog);
  return port;
}

bool HttpServer::serve() { return impl_->svr.listen_after_bind(); }

void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace kvcache::server
