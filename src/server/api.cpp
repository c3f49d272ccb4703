#include "server/api.h"

#include <cmath>
#include <limits>
#include <utility>

#include "core/str_cat.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxMessages = 4096;

std::string type_name(const json& v) { return v.type_name(); }

// A number field in [lo, hi]; integral when T is. Absent leaves `out` as it was.
template <class T>
std::optional<ApiError> number_field(const json& obj, const char* key, double lo, double hi,
                                     T& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const bool integral = std::is_integral_v<T>;
  if (!it->is_number() || (integral && it->is_number_float() &&
                           it->get<double>() != std::floor(it->get<double>())))
    return bad_field(key, std::string("'") + key + "' is " + type_name(*it) + ", expected " +
                              (integral ? "an integer" : "a number"));
  const double d = it->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    auto num = [](double v) {
      return v == std::floor(v) && std::fabs(v) < 1e15 ? str_cat(static_cast<int64_t>(v))
                                                       : json(v).dump();
    };
    const std::string range = "[" + num(lo) + ", " + num(hi) + "]";
    return bad_field(key, std::string("'") + key + "' = " + it->dump() + ", expected a value in " +
                              range);
  }
  out = static_cast<T>(d);
  return std::nullopt;
}

std::optional<ApiError> bool_field(const json& obj, const char* key, bool& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    return bad_field(key, std::string("'") + key + "' is " + type_name(*it) + ", expected a boolean");
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& obj, std::vector<std::string>& out) {
  auto it = obj.find("stop");
  if (it == obj.end() || it->is_null()) return std::nullopt;
  std::vector<json> items;
  if (it->is_string()) {
    items.push_back(*it);
  } else if (it->is_array() && it->size() <= kMaxStops) {
    items.assign(it->begin(), it->end());
  } else {
    return bad_field("stop", str_cat("'stop' must be a string or a list of at most ",
                                     kMaxStops, " strings"));
  }
  for (const json& s : items) {
    if (!s.is_string() || s.get<std::string>().empty())
      return bad_field("stop", "'stop' holds " + s.dump() + ", expected non-empty strings");
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const json& obj, const ApiLimits& lim, ApiRequest& r) {
  auto it = obj.find("prompt");
  if (it == obj.end()) return bad_field("prompt", "'prompt' is required");
  const json* p = &*it;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];  // ["text"]
  if (p->is_string()) {
    if (p->get_ref<const std::string&>().empty()) return bad_field("prompt", "'prompt' is empty");
    r.prompt = p->get<std::string>();
    return std::nullopt;
  }
  if (!p->is_array())
    return bad_field("prompt", "'prompt' is " + type_name(*p) +
                                   ", expected a string or a list of token ids");
  if (p->empty()) return bad_field("prompt", "'prompt' is empty");
  if (static_cast<int64_t>(p->size()) > lim.max_session_tokens)
    return ApiError{413,
                    str_cat("'prompt' has ", p->size(),
                            " tokens; the session budget is ", lim.max_session_tokens),
                    "invalid_request_error", "prompt", "context_length_exceeded"};
  for (const json& v : *p) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= lim.vocab)
      return bad_field("prompt", str_cat("'prompt' holds ", v.dump(),
                                         ", expected token ids in [0, ", lim.vocab, ")"));
    r.prompt_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return std::nullopt;
}

// content: a string, or a list of {"type": "text", "text": ...} parts (joined).
std::optional<ApiError> parse_content(const json& c, const std::string& at, std::string& out) {
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (c.is_array()) {
    for (const json& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string())
        return bad_field(at, "'" + at + "' parts must be {\"type\": \"text\", \"text\": string}");
      out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return bad_field(at, "'" + at + "' is " + type_name(c) + ", expected a string");
}

std::optional<ApiError> parse_messages(const json& obj, ApiRequest& r) {
  auto it = obj.find("messages");
  if (it == obj.end()) return bad_field("messages", "'messages' is required");
  if (!it->is_array()) return bad_field("messages", "'messages' is " + type_name(*it) + ", expected a list");
  if (it->empty()) return bad_field("messages", "'messages' is empty");
  if (it->size() > kMaxMessages)
    return bad_field("messages", str_cat("'messages' has more than ", kMaxMessages, " entries"));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = str_cat("messages[", i, "]");
    if (!m.is_object()) return bad_field(at, "'" + at + "' is " + type_name(m) + ", expected an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad_field(at + ".role", "'" + at + ".role' is required and must be a string");
    text::ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role == "developer") msg.role = "system";  // the newer name of the system role
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      return bad_field(at + ".role", "'" + at + ".role' = \"" + msg.role +
                                         "\", expected system, user or assistant");
    auto content = m.find("content");
    if (content == m.end() || content->is_null())
      return bad_field(at + ".content", "'" + at + ".content' is required");
    if (auto e = parse_content(*content, at + ".content", msg.content)) return e;
    r.messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

// Fields the API defines that this server accepts but does not act on: only their types are
// checked, so a client's mistake is still a 400 naming the field.
std::optional<ApiError> check_ignored(const json& obj) {
  enum Kind { kNumber, kBool, kString, kObject, kArray, kBoolOrInt };
  static const std::pair<const char*, Kind> kFields[] = {
      {"presence_penalty", kNumber}, {"frequency_penalty", kNumber}, {"repetition_penalty", kNumber},
      {"best_of", kNumber},          {"top_logprobs", kNumber},      {"logprobs", kBoolOrInt},
      {"echo", kBool},               {"parallel_tool_calls", kBool}, {"store", kBool},
      {"user", kString},             {"suffix", kString},            {"service_tier", kString},
      {"logit_bias", kObject},       {"response_format", kObject},   {"metadata", kObject},
      {"tools", kArray},
  };
  static const char* kNames[] = {"a number", "a boolean", "a string", "an object", "a list",
                                 "a boolean or an integer"};
  for (const auto& [key, kind] : kFields) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) continue;
    const bool fits = kind == kNumber    ? it->is_number()
                      : kind == kBool    ? it->is_boolean()
                      : kind == kString  ? it->is_string()
                      : kind == kObject  ? it->is_object()
                      : kind == kArray   ? it->is_array()
                                         : it->is_boolean() || it->is_number_integer();
    if (!fits)
      return bad_field(key, std::string("'") + key + "' is " + type_name(*it) + ", expected " +
                                kNames[kind]);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& obj, const ApiLimits& lim, ApiRequest& r) {
  serve::GenerateParams& p = r.params;
  const double budget = static_cast<double>(lim.max_session_tokens);
  const char* max_key = r.chat && obj.contains("max_completion_tokens") ? "max_completion_tokens"
                                                                        : "max_tokens";
  int32_t max_tokens = -1;
  if (auto e = number_field(obj, max_key, 1, budget, max_tokens)) return e;
  if (max_tokens > 0) r.max_tokens = max_tokens;
  if (auto e = number_field(obj, "temperature", 0, 100, p.sampling.temperature)) return e;
  if (auto e = number_field(obj, "top_p", 1e-9, 1, p.sampling.top_p)) return e;
  if (auto e = number_field(obj, "top_k", 0, 1 << 24, p.sampling.top_k)) return e;
  if (auto e = number_field(obj, "seed", 0, 9007199254740991.0, p.sampling.seed)) return e;
  if (auto e = number_field(obj, "n", 1, lim.max_sessions, p.n)) return e;
  if (auto e = bool_field(obj, "stream", r.stream)) return e;
  if (auto e = bool_field(obj, "ignore_eos", p.ignore_eos)) return e;
  if (auto e = parse_stop(obj, p.stop)) return e;
  auto so = obj.find("stream_options");
  if (so != obj.end() && !so->is_null()) {
    if (!so->is_object()) return bad_field("stream_options", "'stream_options' must be an object");
    if (auto e = bool_field(*so, "include_usage", r.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string error_body(const ApiError& e) {
  json err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", std::move(err)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError bad_field(std::string param, std::string message) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  "invalid_value"};
}

std::optional<ApiError> parse_request(std::string_view body, bool chat, const ApiLimits& lim,
                                      ApiRequest& r) {
  r = ApiRequest{};
  r.chat = chat;
  r.params.max_new_tokens = 0;
  json obj = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded())
    return ApiError{400, "the body is not valid JSON (or holds invalid UTF-8)",
                    "invalid_request_error", "", "invalid_json"};
  if (!obj.is_object()) return ApiError{400, "the body must be a JSON object", "invalid_request_error", "", "invalid_json"};
  auto model = obj.find("model");
  if (model != obj.end() && !model->is_null()) {
    if (!model->is_string()) return bad_field("model", "'model' is " + type_name(*model) + ", expected a string");
    r.model = model->get<std::string>();
  }
  if (auto e = chat ? parse_messages(obj, r) : parse_prompt(obj, lim, r)) return e;
  if (auto e = check_ignored(obj)) return e;
  return parse_sampling(obj, lim, r);
}

std::optional<ApiError> resolve_max_tokens(ApiRequest& r, int64_t prompt_tokens,
                                           const ApiLimits& lim) {
  const char* where = r.chat ? "messages" : "prompt";
  if (prompt_tokens < 1) return bad_field(where, std::string("'") + where + "' yields no tokens");
  const int64_t room = lim.max_session_tokens - prompt_tokens;
  if (room < 1)
    return ApiError{413,
                    str_cat("'", where, "' is ", prompt_tokens,
                            " tokens; the session budget max_session_tokens is ",
                            lim.max_session_tokens),
                    "invalid_request_error", where, "context_length_exceeded"};
  int64_t want = r.max_tokens ? *r.max_tokens : (r.chat ? room : kDefaultCompletionTokens);
  if (!r.max_tokens) want = std::min(want, room);
  if (want > room)
    return ApiError{413,
                    str_cat(prompt_tokens, " prompt tokens + max_tokens ",
                            want, " exceed the session budget of ",
                            lim.max_session_tokens, " tokens"),
                    "invalid_request_error", "max_tokens", "context_length_exceeded"};
  r.params.max_new_tokens = static_cast<int32_t>(want);
  return std::nullopt;
}

std::string_view finish_reason(serve::Finish f) {
  return f == serve::Finish::kLength || f == serve::Finish::kCacheFull ? "length" : "stop";
}

json usage_json(const serve::RequestResult& r) {
  int64_t generated = 0;
  for (const serve::Completion& c : r.completions) generated += static_cast<int64_t>(c.tokens.size());
  return json{{"prompt_tokens", r.prompt_tokens},
              {"completion_tokens", generated},
              {"total_tokens", r.prompt_tokens + generated},
              {"prompt_tokens_details", {{"cached_tokens", r.cached_prompt_tokens}}}};
}

json response_json(const ResponseMeta& m, const serve::RequestResult& r,
                   const std::vector<std::string>& texts) {
  json choices = json::array();
  for (size_t i = 0; i < r.completions.size(); ++i) {
    json c{{"index", i}, {"logprobs", nullptr},
           {"finish_reason", finish_reason(r.completions[i].finish)}};
    if (m.chat)
      c["message"] = {{"role", "assistant"}, {"content", texts.at(i)}};
    else
      c["text"] = texts.at(i);
    choices.push_back(std::move(c));
  }
  return json{{"id", m.id},
              {"object", m.chat ? "chat.completion" : "text_completion"},
              {"created", m.created},
              {"model", m.model},
              {"choices", std::move(choices)},
              {"usage", usage_json(r)}};
}

json chunk_json(const ResponseMeta& m, int32_t index, std::string_view text, bool first,
                std::optional<serve::Finish> finish) {
  json c{{"index", index}, {"logprobs", nullptr},
         {"finish_reason", finish ? json(finish_reason(*finish)) : json(nullptr)}};
  if (m.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = std::string(text);
    c["delta"] = std::move(delta);
  } else {
    c["text"] = std::string(text);
  }
  return json{{"id", m.id},
              {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", m.created},
              {"model", m.model},
              {"choices", json::array({std::move(c)})}};
}

json usage_chunk_json(const ResponseMeta& m, const serve::RequestResult& r) {
  return json{{"id", m.id},
              {"object", m.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", m.created},
              {"model", m.model},
              {"choices", json::array()},
              {"usage", usage_json(r)}};
}

}  // namespace kvcache::server
