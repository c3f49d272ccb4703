#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "core/str_cat.h"
#include "server/http_listener.h"
#include "server/anthropic_api.h"
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

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

void reply_json(http::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void reply_error(http::Response& res, const ApiError& e) { reply_json(res, e.status, error_body(e)); }

// Compared in time independent of where the strings differ.
bool same_secret(const std::string& got, const std::string& want) {
  unsigned diff = got.size() == want.size() ? 0u : 1u;
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>(want[i]) ^ static_cast<unsigned char>(i < got.size() ? got[i] : 0);
  return diff == 0;
}

ApiError status_error(int status, std::string message, std::string type, std::string code) {
  return ApiError{status, std::move(message), std::move(type), "", std::move(code)};
}

std::string sse(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string endpoint_label(const std::string& path) {
  static const char* kKnown[] = {"/", "/health", "/metrics", "/v1/models", "/v1/completions",
                                 "/v1/chat/completions", "/v1/cache/save", "/v1/cache/restore",
                                 "/v1/cache/clear", "/v1/messages", "/v1/messages/count_tokens"};
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
  std::vector<int64_t> bytes_out;     // per completion: token bytes so far (text_offset)
  int64_t prompt_tokens = 0;          // for the Anthropic message_start
  bool called = false;                // the Anthropic answer held tool calls
  BlockStream blocks;                 // the Anthropic message's thinking and text blocks
  std::vector<ToolCallStream> tools;  // per completion, when answers are parsed for calls
  bool started = false, done = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

// The events for a completion's next text (and its end when `fin`): Anthropic events;
// plain OpenAI deltas (with the tokens' logprobs); or with tools, the content that cannot be a
// call yet and, at the end, the calls.
std::string stream_text(StreamState& st, int32_t c, const std::string& text,
                        std::optional<serve::Finish> fin,
                        std::span<const engine::TokenLogprob> lps = {}) {
  if (st.meta.anthropic) {
    ToolCallStream* ts = st.tools.empty() ? nullptr : &st.tools[static_cast<size_t>(c)];
    return answer_events(st.blocks, ts, st.meta.thinking, text, fin.has_value(), st.called);
  }
  if (st.tools.empty()) {
    if (text.empty() && !fin && lps.empty()) return "";
    const size_t i = static_cast<size_t>(c);
    std::string out = sse(chunk_json(st.meta, c, text, false, fin, false, lps, st.bytes_out[i]));
    if (!lps.empty())  // completions' text_offset runs on over the whole completion
      st.bytes_out[i] += static_cast<int64_t>(st.meta.token_bytes(lps[0].token).size());
    return out;
  }
  ToolCallStream& ts = st.tools[static_cast<size_t>(c)];
  std::string out;
  const std::string shown = ts.push(text);
  if (const std::string r = ts.take_reasoning(); !r.empty())
    out += sse(reasoning_chunk_json(st.meta, c, r));
  // A token's logprobs go out with what it shows, if anything (tools refuse logprobs; a
  // harmony reply's framing shows nothing).
  if (!shown.empty() || !lps.empty())
    out += sse(chunk_json(st.meta, c, shown, false, std::nullopt, false, lps));
  if (!fin) return out;
  const ChoiceOutput o = ts.finish();
  if (!o.reasoning.empty()) out += sse(reasoning_chunk_json(st.meta, c, o.reasoning));
  if (!o.content.empty()) out += sse(chunk_json(st.meta, c, o.content, false, std::nullopt));
  for (size_t k = 0; k < o.calls.size(); ++k)
    for (const json& j : tool_call_chunks(st.meta, c, static_cast<int32_t>(k), o.calls[k]))
      out += sse(j);
  return out + sse(chunk_json(st.meta, c, "", false, fin, !o.calls.empty()));
}

}  // namespace

struct HttpServer::Impl {
  using Handler = std::function<void(const http::Request&, http::Response&)>;
  EngineLoop& loop;
  ServerOptions opt;
  ServerModel model;
  RequestCounters counters;
  std::atomic<int64_t> next_id{0};
  int64_t started = unix_now();
  std::map<std::pair<std::string, std::string>, Handler> route_table;  // (method, path)
  http::Listener listener;

  Impl(EngineLoop& l, ServerOptions o, ServerModel m)
      : loop(l), opt(std::move(o)), model(std::move(m)), listener(listener_options(opt), hooks()) {}

  static http::ListenerOptions listener_options(const ServerOptions& o);
  http::ListenerHooks hooks();
  void routes();
  void handle(const http::Request& req, http::Response& res) const;
  void clear_prefix_cache(http::Response& res);
  bool authorized(const http::Request& req) const;
  std::optional<ApiError> encode(ApiRequest& r, std::vector<int32_t>& prompt,
                                 bool generation_prompt = true) const;
  void saved_prefix(const http::Request& req, http::Response& res, bool save);
  using ErrorWriter = std::function<void(http::Response&, const ApiError&)>;
  struct Accepted {
    std::shared_ptr<RequestChannel> channel;
    RequestChannel::News first;  // what came with the acceptance (pieces, even the result)
    int64_t id = 0;              // the response's number
  };
  std::optional<Accepted> submit(const ApiRequest& r, std::vector<int32_t> prompt,
                                 http::Response& res, const ErrorWriter& fail);
  void answer_tools(const ApiRequest& r, ResponseMeta& meta) const;
  void generate(const http::Request& req, http::Response& res, bool chat);
  void messages(const http::Request& req, http::Response& res, bool count_only);
  void finish_whole(http::Response& res, const std::shared_ptr<RequestChannel>& ch,
                    const ResponseMeta& meta, std::optional<serve::RequestResult> result);
  void start_stream(http::Response& res, std::shared_ptr<RequestChannel> ch, ResponseMeta meta,
                    int32_t n, bool include_usage, RequestChannel::News first,
                    int64_t prompt_tokens);
};

bool HttpServer::Impl::authorized(const http::Request& req) const {
  // The page at / is static (a browser cannot send a Bearer header when it opens it); the
  // key typed into it guards the API calls it makes.
  if (opt.api_key.empty() || req.path == "/health" || (req.path == "/" && req.method == "GET"))
    return true;
  // Authorization: Bearer KEY (OpenAI clients) or x-api-key: KEY (Anthropic clients).
  return same_secret(req.get_header_value("Authorization"), "Bearer " + opt.api_key) ||
         same_secret(req.get_header_value("x-api-key"), opt.api_key);
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
  const bool harmony = *opt.chat_template == text::ChatTemplate::kHarmony;
  if (!r.reasoning_effort.empty() && !harmony && !r.effort_ignorable)
    return ApiError{400, "'reasoning_effort' is not supported with this model's chat template (" +
                             std::string(text::to_string(*opt.chat_template)) + "; harmony has it)",
                    "invalid_request_error", "reasoning_effort", "unsupported_parameter"};
  text::ChatContext context;  // the date: today (UTC)
  if (!r.reasoning_effort.empty() && harmony) context.reasoning_effort = r.reasoning_effort;
  Result<text::RenderedChat> rendered = text::render_chat_spans(*opt.chat_template, r.messages, generation_prompt,
                                                default_chat_tokens(*opt.chat_template), tools,
                                                context);
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

std::optional<HttpServer::Impl::Accepted> HttpServer::Impl::submit(
    const ApiRequest& r, std::vector<int32_t> prompt, http::Response& res,
    const ErrorWriter& fail) {
  Result<std::shared_ptr<RequestChannel>> ch = loop.submit(std::move(prompt), r.params, r.stream);
  if (!ch.ok()) {
    if (ch.status().code() == StatusCode::kResourceExhausted) {
      res.set_header("Retry-After", "1");
      fail(res, status_error(429, "server busy: " + ch.status().message(), "rate_limit_error",
                             "queue_full"));
      return std::nullopt;
    }
    fail(res, status_error(503, ch.status().message(), "server_error", "unavailable"));
    return std::nullopt;
  }
  // Wait until the executor took or refused it, so the status line is known.
  const auto deadline = std::chrono::steady_clock::now() + kAcceptTimeout;
  RequestChannel::News first;
  while (!first.accepted && !first.refused) {
    if (std::chrono::steady_clock::now() > deadline) {
      loop.cancel(*ch);
      fail(res, status_error(503, "the engine did not take the request in time", "server_error",
                             "unavailable"));
      return std::nullopt;
    }
    first = (*ch)->wait(kPoll);
  }
  if (first.refused) {
    fail(res, status_error(400, first.refused->message(), "invalid_request_error",
                           "invalid_value"));
    return std::nullopt;
  }
  return Accepted{std::move(*ch), std::move(first), next_id.fetch_add(1)};
}

// With an active tool choice the answers are parsed for the family's calls; harmony's are
// always split into their channels.
void HttpServer::Impl::answer_tools(const ApiRequest& r, ResponseMeta& meta) const {
  meta.syntax = text::tool_syntax(*opt.chat_template);
  meta.channels = meta.syntax == text::ToolSyntax::kHarmony;
  if (!r.tools.active()) return;
  meta.tools = true;
  meta.forced_prefix = r.forced_prefix;
}

void HttpServer::Impl::generate(const http::Request& req, http::Response& res, bool chat) {
  ApiRequest r;
  if (auto e = parse_request(req.body, chat, model.limits, r)) return reply_error(res, *e);
  std::vector<int32_t> prompt;
  if (auto e = encode(r, prompt)) return reply_error(res, *e);
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  if (auto e = resolve_max_tokens(r, prompt_tokens, model.limits)) return reply_error(res, *e);
  std::optional<Accepted> a = submit(r, std::move(prompt), res, reply_error);
  if (!a) return;
  ResponseMeta meta;
  meta.id = str_cat((chat ? "chatcmpl-" : "cmpl-"), started, "-", a->id);
  meta.created = unix_now();
  meta.model = opt.model_name;
  meta.chat = chat;
  if (r.params.logprobs >= 0) {
    meta.logprobs = true;
    meta.token_bytes = [tok = model.tokenizer](int32_t t) { return tok->decode_one(t); };
  }
  if (chat) answer_tools(r, meta);
  // `first` may already hold pieces and even the result: they are passed on, not dropped.
  if (!r.stream) return finish_whole(res, a->channel, meta, std::move(a->first.result));
  start_stream(res, std::move(a->channel), std::move(meta), r.params.n, r.include_usage,
               std::move(a->first), prompt_tokens);
}

// POST /v1/messages and /v1/messages/count_tokens (anthropic_api.h): the same generation, in
// the Anthropic shapes, errors included.
void HttpServer::Impl::messages(const http::Request& req, http::Response& res, bool count_only) {
  auto fail = [](http::Response& out, const ApiError& e) {
    reply_json(out, e.status, anthropic_error_body(e));
  };
  ApiRequest r;
  if (auto e = parse_messages_body(req.body, count_only, model.limits, r)) return fail(res, *e);
  std::vector<int32_t> prompt;
  if (auto e = encode(r, prompt)) return fail(res, *e);
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  if (count_only) return reply_json(res, 200, json{{"input_tokens", prompt_tokens}}.dump());
  if (auto e = resolve_max_tokens(r, prompt_tokens, model.limits)) return fail(res, *e);
  std::optional<Accepted> a = submit(r, std::move(prompt), res, fail);
  if (!a) return;
  ResponseMeta meta;
  meta.id = str_cat("msg_", started, "_", a->id);
  meta.created = unix_now();
  meta.model = r.model;  // the API echoes the model asked for
  meta.chat = true;
  meta.anthropic = true;
  answer_tools(r, meta);
  meta.thinking = r.thinking && meta.channels;  // other templates have no reasoning to send
  if (!r.stream) return finish_whole(res, a->channel, meta, std::move(a->first.result));
  start_stream(res, std::move(a->channel), std::move(meta), 1, false, std::move(a->first),
               prompt_tokens);
}

// POST /v1/cache/save {"name", "prompt" | "messages"} and /v1/cache/restore {"name"}
// (saved_prefixes.h). Saved messages are rendered without the assistant prompt, so a later
// conversation that goes on from them starts with the same tokens.
void HttpServer::Impl::saved_prefix(const http::Request& req, http::Response& res,
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
    const bool chat = body.contains("messages");
    if (auto e = parse_request(req.body, chat, model.limits, ar, {"name"}))
      return reply_error(res, *e);
    std::vector<int32_t> prompt;
    if (auto e = encode(ar, prompt, /*generation_prompt=*/false)) return reply_error(res, *e);
    r = save_prefix(loop, opt.snapshot_dir, name->get<std::string>(), std::move(prompt));
    // The executor refuses only the prompt itself (e.g. over the session budget): name it.
    if (r.error && r.error->status == 400 && r.error->param.empty())
      r.error->param = chat ? "messages" : "prompt";
  } else {
    r = restore_prefix(loop, opt.snapshot_dir, name->get<std::string>());
  }
  if (r.error) return reply_error(res, *r.error);
  reply_json(res, 200, r.body.dump());
}

static std::string whole_body(const ResponseMeta& meta, const serve::RequestResult& r) {
  std::vector<std::string> texts, reasoning;
  std::vector<std::vector<ApiToolCall>> calls;
  for (const serve::Completion& c : r.completions) {
    texts.push_back(text::utf8_sanitize(c.text));
    if (!meta.tools && !meta.channels) continue;
    ChoiceOutput o = tool_output(meta.syntax, meta.forced_prefix, texts.back(), meta.tools);
    texts.back() = std::move(o.content);
    calls.push_back(std::move(o.calls));
    reasoning.push_back(std::move(o.reasoning));
  }
  if (meta.anthropic)  // the reasoning as a thinking block when asked for
    return message_json(meta, r, texts.at(0), calls.empty() ? std::vector<ApiToolCall>() : calls[0],
                        meta.thinking && !reasoning.empty() ? reasoning[0] : "")
        .dump(-1, ' ', false, json::error_handler_t::replace);
  return response_json(meta, r, texts, calls, reasoning)
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

// Unstreamed: the JSON once the result is in. While waiting, a space (JSON allows leading
// whitespace) goes out every kKeepAliveEvery, so a client that left is noticed and its request
// closed, as for a stream.
void HttpServer::Impl::finish_whole(http::Response& res, const std::shared_ptr<RequestChannel>& ch,
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
      [st](size_t, http::DataSink& sink) {
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

namespace {

// The events of a stream in the request's wire format (OpenAI chunks or Anthropic events):
// what opens it, what one completion's new text (and finish) sends, and what closes it.
std::string stream_open(StreamState& st) {
  std::string out;
  if (st.meta.anthropic) {
    out += event(message_start_json(st.meta, st.prompt_tokens));
    if (!st.meta.thinking) out += st.blocks.text("");  // else a thinking block may come first
  } else if (st.meta.chat) {  // the role chunk first, as the API sends it
    for (int32_t i = 0; i < static_cast<int32_t>(st.utf8.size()); ++i)
      out += sse(chunk_json(st.meta, i, "", true, std::nullopt));
  }
  return out;
}

std::string stream_close(const StreamState& st, const serve::RequestResult& r) {
  if (st.meta.anthropic)
    return event(message_delta_json(r, st.called)) + event(json{{"type", "message_stop"}});
  std::string out;
  if (st.include_usage) out += sse(usage_chunk_json(st.meta, r));
  return out + "data: [DONE]\n\n";
}

}  // namespace

void HttpServer::Impl::start_stream(http::Response& res, std::shared_ptr<RequestChannel> ch,
                                    ResponseMeta meta, int32_t n, bool include_usage,
                                    RequestChannel::News first, int64_t prompt_tokens) {
  auto st = std::make_shared<StreamState>();
  st->carry = std::move(first);
  st->channel = std::move(ch);
  st->meta = std::move(meta);
  st->include_usage = include_usage;
  st->prompt_tokens = prompt_tokens;
  st->utf8.resize(static_cast<size_t>(n));
  st->finished.assign(static_cast<size_t>(n), false);
  st->bytes_out.assign(static_cast<size_t>(n), 0);
  if (st->meta.tools || st->meta.channels)
    st->tools.assign(static_cast<size_t>(n), ToolCallStream(st->meta.syntax, st->meta.forced_prefix,
                                                            st->meta.tools));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  EngineLoop* loop_ptr = &loop;
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, http::DataSink& sink) {
        std::string out;
        if (!st->started) {
          st->started = true;
          out += stream_open(*st);
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
          std::span<const engine::TokenLogprob> lps;
          if (p.logprob) lps = std::span<const engine::TokenLogprob>(&*p.logprob, 1);
          out += stream_text(*st, p.completion, text, fin, lps);
        }
        if (news.result) {
          for (size_t c = 0; c < st->finished.size(); ++c) {
            if (st->finished[c]) continue;
            const serve::Finish f = c < news.result->completions.size()
                                        ? news.result->completions[c].finish
                                        : serve::Finish::kCancelled;
            out += stream_text(*st, static_cast<int32_t>(c), st->utf8[c].finish(), f, {});
            st->finished[c] = true;
          }
          out += stream_close(*st, *news.result);
          st->done = true;
        }
        const auto now = std::chrono::steady_clock::now();
        if (out.empty() && now - st->last_write >= kKeepAliveEvery)
          out = st->meta.anthropic ? event(json{{"type", "ping"}}) : ": keep-alive\n\n";
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
void HttpServer::Impl::clear_prefix_cache(http::Response& res) {
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

http::ListenerOptions HttpServer::Impl::listener_options(const ServerOptions& o) {
  http::ListenerOptions l;
  l.host = o.host;
  l.port = o.port;
  l.limits.max_body_bytes = o.max_body_bytes;
  l.workers = o.http_threads;
  l.max_connections = o.max_connections;
  l.max_connections_per_peer = o.max_connections_per_peer;
  l.request_timeout = milliseconds(o.request_timeout_ms);
  l.idle_timeout = milliseconds(o.keep_alive_timeout_ms);
  return l;
}

http::ListenerHooks HttpServer::Impl::hooks() {
  http::ListenerHooks h;
  h.handle = [this](const http::Request& req, http::Response& res) { handle(req, res); };
  // Answered from a pool of their own: never behind generation requests.
  h.is_light = [](const http::Request& req) {
    return (req.method == "GET" || req.method == "HEAD") &&
           (req.path == "/health" || req.path == "/metrics" || req.path == "/v1/models" || req.path == "/");
  };
  h.error = [](int status, const std::string& message, const std::string& code, http::Response& res) {
    reply_error(res, status_error(status, message,
                                  status >= 500 ? "server_error" : "invalid_request_error", code));
  };
  h.on_response = [this](const http::Request& req, int status) {
    counters.add(endpoint_label(req.path), status);
  };
  return h;
}

void HttpServer::Impl::handle(const http::Request& req, http::Response& res) const {
  // The Anthropic routes answer their errors in their own shape.
  const bool anthropic = req.path.rfind("/v1/messages", 0) == 0;
  auto fail = [&](const ApiError& e) {
    reply_json(res, e.status, anthropic ? anthropic_error_body(e) : error_body(e));
  };
  if (!authorized(req))
    return fail(status_error(401, "missing or wrong API key (Authorization: Bearer KEY, or "
                                  "x-api-key: KEY)",
                             "invalid_request_error", "invalid_api_key"));
  // HEAD is answered as GET (the listener sends the headers only).
  const auto it = route_table.find({req.method == "HEAD" ? "GET" : req.method, req.path});
  if (it == route_table.end())
    return fail(status_error(404, "no route " + req.method + " " + req.path,
                             "invalid_request_error", "not_found"));
  it->second(req, res);
}

void HttpServer::Impl::routes() {
  route_table[{"GET", "/health"}] = [](const http::Request&, http::Response& res) {
    reply_json(res, 200, R"({"status":"ok"})");
  };
  route_table[{"GET", "/v1/models"}] = [this](const http::Request&, http::Response& res) {
    json m{{"id", opt.model_name}, {"object", "model"}, {"created", started}, {"owned_by", "kvcache"}};
    reply_json(res, 200, json{{"object", "list"}, {"data", json::array({m})}}.dump());
  };
  route_table[{"GET", "/metrics"}] = [this](const http::Request&, http::Response& res) {
    res.set_content(metrics_text(loop.snapshot(), counters.counts()),
                    "text/plain; version=0.0.4; charset=utf-8");
  };
  route_table[{"GET", "/"}] = [](const http::Request&, http::Response& res) {
    res.set_content(kChatPageHtml, "text/html; charset=utf-8");
  };
  route_table[{"POST", "/v1/completions"}] = [this](const http::Request& req, http::Response& res) {
    generate(req, res, /*chat=*/false);
  };
  route_table[{"POST", "/v1/chat/completions"}] = [this](const http::Request& req, http::Response& res) {
    generate(req, res, /*chat=*/true);
  };
  route_table[{"POST", "/v1/messages"}] = [this](const http::Request& req, http::Response& res) {
    messages(req, res, /*count_only=*/false);
  };
  route_table[{"POST", "/v1/messages/count_tokens"}] = [this](const http::Request& req,
                                                              http::Response& res) {
    messages(req, res, /*count_only=*/true);
  };
  route_table[{"POST", "/v1/cache/save"}] = [this](const http::Request& req, http::Response& res) {
    saved_prefix(req, res, /*save=*/true);
  };
  route_table[{"POST", "/v1/cache/restore"}] = [this](const http::Request& req, http::Response& res) {
    saved_prefix(req, res, /*save=*/false);
  };
  route_table[{"POST", "/v1/cache/clear"}] = [this](const http::Request&, http::Response& res) {
    clear_prefix_cache(res);
  };
}

HttpServer::HttpServer(EngineLoop& loop, ServerOptions options, ServerModel model)
    : impl_(std::make_unique<Impl>(loop, std::move(options), std::move(model))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

Result<int> HttpServer::bind() { return impl_->listener.bind(); }

bool HttpServer::serve() { return impl_->listener.serve(); }

void HttpServer::stop() { impl_->listener.stop(); }

}  // namespace kvcache::server
