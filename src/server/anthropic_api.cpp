#include "server/anthropic_api.h"

#include <set>
#include <utility>

#include "core/str_cat.h"
#include "server/api_fields.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

constexpr size_t kMaxMessages = 4096;

ApiError unsupported_field(const std::string& at, const std::string& what) {
  return ApiError{400, "'" + at + "' " + what + " (docs/server.md lists the /v1/messages fields)",
                  "invalid_request_error", at, "unsupported_parameter"};
}

// A text block {"type": "text", "text": string} (cache_control accepted: every prompt is
// cached by prefix here); any other block type is refused, naming it.
std::optional<ApiError> text_block(const json& b, const std::string& at, std::string& out) {
  if (!b.is_object()) return bad_field(at, "'" + at + "' is " + type_name(b) + ", expected a block");
  const std::string type = b.value("type", "");
  if (type != "text")
    return unsupported_field(at + ".type", "= " + json(type).dump() +
                                               " is not supported by this server (text blocks only)");
  for (const auto& [key, v] : b.items())
    if (key != "type" && key != "text" && key != "cache_control")
      return unsupported_field(at + "." + key, "is not supported by this server");
  auto text = b.find("text");
  if (text == b.end() || !text->is_string())
    return bad_field(at + ".text", "'" + at + ".text' is required and must be a string");
  out += text->get<std::string>();
  return std::nullopt;
}

// content: a string or a non-empty list of text blocks (joined).
std::optional<ApiError> content_text(const json& c, const std::string& at, std::string& out) {
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array() || c.empty())
    return bad_field(at, "'" + at + "' must be a string or a non-empty list of blocks");
  for (size_t j = 0; j < c.size(); ++j)
    if (auto e = text_block(c[j], str_cat(at, "[", j, "]"), out)) return e;
  return std::nullopt;
}

std::optional<ApiError> read_messages(const json& obj, ApiRequest& r) {
  if (auto sys = obj.find("system"); sys != obj.end() && !sys->is_null()) {
    text::ChatMessage m;
    m.role = "system";
    if (auto e = content_text(*sys, "system", m.content)) return e;
    r.messages.push_back(std::move(m));
  }
  auto it = obj.find("messages");
  if (it == obj.end() || !it->is_array() || it->empty())
    return bad_field("messages", "'messages' is required: a non-empty list");
  if (it->size() > kMaxMessages)
    return bad_field("messages", str_cat("'messages' has more than ", kMaxMessages, " entries"));
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = str_cat("messages[", i, "]");
    if (!m.is_object()) return bad_field(at, "'" + at + "' is " + type_name(m) + ", expected an object");
    for (const auto& [key, v] : m.items())
      if (key != "role" && key != "content")
        return unsupported_field(at + "." + key, "is not supported by this server");
    const std::string role = m.value("role", "");
    if (role != "user" && role != "assistant")
      return bad_field(at + ".role", "'" + at + ".role' must be \"user\" or \"assistant\"");
    auto content = m.find("content");
    if (content == m.end()) return bad_field(at + ".content", "'" + at + ".content' is required");
    text::ChatMessage msg;
    msg.role = role;
    if (auto e = content_text(*content, at + ".content", msg.content)) return e;
    r.messages.push_back(std::move(msg));
  }
  if (r.messages.back().role != "user")
    return unsupported_field(str_cat("messages[", it->size() - 1, "].role"),
                             "= \"assistant\" as the last turn (a prefilled answer) is not "
                             "supported by this server");
  return std::nullopt;
}

// Tools are not implemented here yet: an empty list and a tool_choice that asks for no tool
// pass; anything else is refused.
std::optional<ApiError> read_tools(const json& obj) {
  if (auto t = obj.find("tools"); t != obj.end() && !t->is_null() && *t != json::array())
    return unsupported_field("tools", "is not supported on /v1/messages by this server");
  if (auto c = obj.find("tool_choice"); c != obj.end() && !c->is_null()) {
    const std::string type = c->is_object() ? c->value("type", "") : "";
    if (type != "auto" && type != "none")
      return unsupported_field("tool_choice", "= " + c->dump() + " is not supported (no tools)");
  }
  return std::nullopt;
}

std::optional<ApiError> check_fields(const json& obj, bool count_only) {
  static const std::set<std::string> kCount = {"model", "messages", "system", "tools",
                                               "tool_choice"};
  static const std::set<std::string> kMessages = {"max_tokens", "stop_sequences", "temperature",
                                                  "top_p", "top_k", "stream", "metadata"};
  static const std::set<std::string> kNotHere = {"thinking", "service_tier", "container",
                                                 "mcp_servers", "context_management"};
  for (const auto& [key, v] : obj.items()) {
    if (kCount.count(key) != 0 || (!count_only && kMessages.count(key) != 0)) continue;
    if (kNotHere.count(key) != 0 || kMessages.count(key) != 0)
      return unsupported_field(key, "is not supported by this server");
    return ApiError{400, "unrecognized request field '" + key + "'", "invalid_request_error", key,
                    "unknown_parameter"};
  }
  return std::nullopt;
}

std::optional<ApiError> read_sampling(const json& obj, const ApiLimits& lim, ApiRequest& r) {
  if (!obj.contains("max_tokens")) return bad_field("max_tokens", "'max_tokens' is required");
  int32_t max_tokens = 0;
  if (auto e = number_field(obj, "max_tokens", 1, static_cast<double>(lim.max_session_tokens),
                            max_tokens))
    return e;
  r.max_tokens = max_tokens;
  serve::GenerateParams& p = r.params;
  p.sampling.temperature = 1.0f;  // the API's default
  if (auto e = number_field(obj, "temperature", 0, 1, p.sampling.temperature)) return e;
  if (auto e = number_field(obj, "top_p", 1e-9, 1, p.sampling.top_p)) return e;
  if (auto e = number_field(obj, "top_k", 0, 1 << 24, p.sampling.top_k)) return e;
  if (auto e = bool_field(obj, "stream", r.stream)) return e;
  if (auto e = stop_strings(obj, "stop_sequences", /*single=*/false, p.stop)) return e;
  if (auto m = obj.find("metadata"); m != obj.end() && !m->is_null() && !m->is_object())
    return bad_field("metadata", "'metadata' is " + type_name(*m) + ", expected an object");
  return std::nullopt;
}

json usage(const serve::RequestResult& r) {
  int64_t out = 0;
  for (const serve::Completion& c : r.completions) out += static_cast<int64_t>(c.tokens.size());
  return json{{"input_tokens", r.prompt_tokens - r.cached_prompt_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", r.cached_prompt_tokens},
              {"output_tokens", out}};
}

json stop_sequence(const serve::Completion& c) {
  return c.stop_string.empty() ? json(nullptr) : json(c.stop_string);
}

}  // namespace

std::optional<ApiError> parse_messages_body(std::string_view body, bool count_only,
                                            const ApiLimits& lim, ApiRequest& r) {
  r = ApiRequest{};
  r.chat = true;
  r.params.max_new_tokens = 0;
  const json obj = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object())
    return ApiError{400, "the body is not a JSON object (or holds invalid UTF-8)",
                    "invalid_request_error", "", "invalid_json"};
  if (auto e = check_fields(obj, count_only)) return e;
  auto model = obj.find("model");
  if (model == obj.end() || !model->is_string())
    return bad_field("model", "'model' is required and must be a string");
  r.model = model->get<std::string>();
  if (auto e = read_tools(obj)) return e;
  if (auto e = read_messages(obj, r)) return e;
  if (count_only) return std::nullopt;
  return read_sampling(obj, lim, r);
}

std::string anthropic_error_body(const ApiError& e) {
  const char* type = "invalid_request_error";
  switch (e.status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: type = e.status >= 500 ? "api_error" : "invalid_request_error";
  }
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string_view stop_reason(const serve::Completion& c) {
  if (c.finish == serve::Finish::kLength || c.finish == serve::Finish::kCacheFull)
    return "max_tokens";
  return c.stop_string.empty() ? "end_turn" : "stop_sequence";
}

json message_json(const ResponseMeta& m, const serve::RequestResult& r, const std::string& text) {
  const serve::Completion& c = r.completions.at(0);
  return json{{"id", m.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", m.model},
              {"content", json::array({{{"type", "text"}, {"text", text}}})},
              {"stop_reason", stop_reason(c)},
              {"stop_sequence", stop_sequence(c)},
              {"usage", usage(r)}};
}

json message_start_json(const ResponseMeta& m, int64_t prompt_tokens) {
  return json{{"type", "message_start"},
              {"message",
               {{"id", m.id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", m.model},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}}}};
}

json text_delta_json(std::string_view text) {
  return json{{"type", "content_block_delta"},
              {"index", 0},
              {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}};
}

json message_delta_json(const serve::RequestResult& r) {
  const serve::Completion& c = r.completions.at(0);
  return json{{"type", "message_delta"},
              {"delta", {{"stop_reason", stop_reason(c)}, {"stop_sequence", stop_sequence(c)}}},
              {"usage", usage(r)}};
}

std::string event(const json& data) {
  return "event: " + data.at("type").get<std::string>() + "\ndata: " +
         data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace kvcache::server
