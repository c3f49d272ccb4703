#include "server/anthropic_api.h"

#include <cstdio>
#include <random>
#include <set>
#include <utility>

#include "core/str_cat.h"
#include "server/api_fields.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

ApiError unsupported_field(const std::string& at, const std::string& what) {
  return ApiError{400, "'" + at + "' " + what + " (docs/server.md lists the /v1/messages fields)",
                  "invalid_request_error", at, "unsupported_parameter"};
}

// A text block {"type": "text", "text": string} (cache_control accepted: every prompt is
// cached by prefix here); other block types are refused here, naming them.
std::optional<ApiError> text_block(const json& b, const std::string& at, std::string& out) {
  if (!b.is_object()) return bad_field(at, "'" + at + "' is " + type_name(b) + ", expected a block");
  const std::string type = b.value("type", "");
  if (type != "text")
    return unsupported_field(at + ".type", "= " + json(type).dump() +
                                               " is not supported here (text blocks only)");
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

// An assistant's {"type": "thinking", "thinking", "signature"} (its text becomes the turn's
// reasoning, several joined by "\n"; the signature is not checked) or {"type":
// "redacted_thinking", "data"} (dropped: nothing here can read it).
std::optional<ApiError> thinking_block(const json& b, const std::string& at, std::string& out) {
  const bool plain = b["type"] == "thinking";
  const char* field = plain ? "thinking" : "data";
  for (const auto& [key, v] : b.items()) {
    if (key == "type" || key == "cache_control") continue;
    if (key != field && !(plain && key == "signature"))
      return unsupported_field(at + "." + key, "is not supported by this server");
    if (!v.is_string())
      return bad_field(at + "." + key, "'" + at + "." + key + "' must be a string");
  }
  if (!b.contains(field))
    return bad_field(at + "." + field, "'" + at + "." + field + "' is required");
  if (!plain) return std::nullopt;
  if (!out.empty()) out += '\n';
  out += b[field].get<std::string>();
  return std::nullopt;
}

// One turn's content blocks: text, an assistant's tool_use {id, name, input} (a call) and a
// user's tool_result {tool_use_id, content, is_error} (a "tool" message before the turn's
// text, as the chat templates order a call's results) and an assistant's thinking blocks.
std::optional<ApiError> turn_blocks(const json& content, const std::string& at,
                                    const std::string& role,
                                    std::vector<text::ChatMessage>& out) {
  text::ChatMessage msg;
  msg.role = role;
  if (!content.is_array()) {
    if (auto e = content_text(content, at, msg.content)) return e;
    out.push_back(std::move(msg));
    return std::nullopt;
  }
  if (content.empty()) return bad_field(at, "'" + at + "' must be a string or a non-empty list of blocks");
  for (size_t j = 0; j < content.size(); ++j) {
    const json& b = content[j];
    const std::string bat = str_cat(at, "[", j, "]");
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") ||
          !b["name"].is_string() || !b.contains("input") || !b["input"].is_object())
        return bad_field(bat, "'" + bat + "' needs id and name (strings) and input (an object)");
      msg.tool_calls.push_back({b["id"].get<std::string>(), b["name"].get<std::string>(),
                                b["input"].dump()});
    } else if (type == "tool_result" && role == "user") {
      text::ChatMessage result;
      result.role = "tool";
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        return bad_field(bat + ".tool_use_id", "'" + bat + ".tool_use_id' is required");
      for (const auto& [key, v] : b.items())
        if (key != "type" && key != "tool_use_id" && key != "content" && key != "is_error" &&
            key != "cache_control")
          return unsupported_field(bat + "." + key, "is not supported by this server");
      result.tool_call_id = b["tool_use_id"].get<std::string>();
      if (auto c = b.find("content"); c != b.end() && !c->is_null())
        if (auto e = content_text(*c, bat + ".content", result.content)) return e;
      out.push_back(std::move(result));
    } else if ((type == "thinking" || type == "redacted_thinking") && role == "assistant") {
      if (auto e = thinking_block(b, bat, msg.reasoning)) return e;
    } else if (auto e = text_block(b, bat, msg.content)) {
      return e;
    }
  }
  if (!msg.content.empty() || !msg.tool_calls.empty() || !msg.reasoning.empty())
    out.push_back(std::move(msg));
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
    if (auto e = turn_blocks(*content, at + ".content", role, r.messages)) return e;
  }
  if (r.messages.back().role == "assistant")
    return unsupported_field(str_cat("messages[", it->size() - 1, "].role"),
                             "= \"assistant\" as the last turn (a prefilled answer) is not "
                             "supported by this server");
  return std::nullopt;
}

// Renames the OpenAI spellings of parse_tools' 400s to this API's fields.
ApiError in_anthropic_terms(ApiError e) {
  for (auto [from, to] : {std::pair<std::string, std::string>{".function.parameters", ".input_schema"},
                          {"tool_choice.function.name", "tool_choice.name"},
                          {".function.name", ".name"}}) {
    for (std::string* s : {&e.param, &e.message})
      for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size()))
        s->replace(at, from.size(), to);
  }
  return e;
}

// tools [{"name", "description", "input_schema"}] and tool_choice {"type": auto | any | tool |
// none, "name", "disable_parallel_tool_use"}, read as the OpenAI fields they mean (api.h's
// parse_tools: the same checks, grammars and template rendering).
std::optional<ApiError> read_tools(const nlohmann::ordered_json& obj, ToolsRequest& out) {
  using ojson = nlohmann::ordered_json;
  ojson as_openai = ojson::object();
  if (auto t = obj.find("tools"); t != obj.end() && !t->is_null()) {
    if (!t->is_array()) return bad_field("tools", "'tools' must be a list of tools");
    ojson tools = ojson::array();
    for (size_t i = 0; i < t->size(); ++i) {
      const ojson& tool = (*t)[i];
      const std::string at = str_cat("tools[", i, "]");
      if (!tool.is_object()) return bad_field(at, "'" + at + "' must be an object");
      ojson fn = ojson::object();
      for (const auto& [key, v] : tool.items()) {
        if (key == "name" || key == "description") fn[key] = v;
        else if (key == "input_schema") fn["parameters"] = v;
        else if (key == "type" && v == "custom") continue;
        else if (key != "cache_control")
          return unsupported_field(at + "." + key, key == "type"
                                                       ? "= " + v.dump() + ": only client tools "
                                                                           "are supported"
                                                       : "is not supported by this server");
      }
      if (!fn.contains("parameters"))
        return bad_field(at + ".input_schema", "'" + at + ".input_schema' is required");
      tools.push_back(ojson{{"type", "function"}, {"function", std::move(fn)}});
    }
    as_openai["tools"] = std::move(tools);
  }
  if (auto c = obj.find("tool_choice"); c != obj.end() && !c->is_null()) {
    const std::string type = c->is_object() ? c->value("type", "") : "";
    if (c->is_object())
      for (const auto& [key, v] : c->items())
        if (key != "type" && key != "name" && key != "disable_parallel_tool_use")
          return unsupported_field("tool_choice." + key, "is not supported by this server");
    if (type == "auto") as_openai["tool_choice"] = "auto";
    else if (type == "any") as_openai["tool_choice"] = "required";
    else if (type == "none") as_openai["tool_choice"] = "none";
    else if (type == "tool" && c->contains("name"))
      as_openai["tool_choice"] = ojson{{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
    else
      return bad_field("tool_choice", "'tool_choice' = " + c->dump() +
                                          ", expected {\"type\": auto, any, none, or tool with a name}");
    if (auto d = c->find("disable_parallel_tool_use"); d != c->end()) {
      if (!d->is_boolean())
        return bad_field("tool_choice.disable_parallel_tool_use",
                         "'tool_choice.disable_parallel_tool_use' must be a boolean");
      as_openai["parallel_tool_calls"] = !d->get<bool>();
    }
  }
  if (as_openai.empty()) return std::nullopt;
  if (auto e = parse_tools(as_openai, out)) return in_anthropic_terms(*e);
  return std::nullopt;
}

std::optional<ApiError> check_fields(const json& obj, bool count_only) {
  static const std::set<std::string> kCount = {"model", "messages", "system", "tools",
                                               "tool_choice", "thinking"};
  static const std::set<std::string> kMessages = {"max_tokens", "stop_sequences", "temperature",
                                                  "top_p", "top_k", "stream", "metadata"};
  static const std::set<std::string> kNotHere = {"service_tier", "container", "mcp_servers",
                                                 "context_management"};
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

// thinking: {"type": "enabled", "budget_tokens": N} (an integer, at least 1024 and, in a body
// with max_tokens, less than it) or {"type": "disabled"}: a reasoning effort that a template
// without reasoning ignores; enabled sends the reasoning as thinking blocks.
std::optional<ApiError> read_thinking(const json& obj, std::optional<int32_t> max_tokens,
                                      ApiRequest& r) {
  auto t = obj.find("thinking");
  if (t == obj.end() || t->is_null()) return std::nullopt;
  constexpr const char* kShapes =
      "{\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}";
  if (!t->is_object())
    return bad_field("thinking", "'thinking' is " + type_name(*t) + ", expected " + kShapes);
  auto type = t->find("type");
  const bool enabled = type != t->end() && *type == "enabled";
  if (!enabled && !(type != t->end() && *type == "disabled"))
    return bad_field("thinking.type", "'thinking.type' = " +
                                          (type == t->end() ? "absent" : type->dump()) +
                                          ", expected \"enabled\" or \"disabled\"");
  for (const auto& [key, v] : t->items())
    if (key != "type" && !(enabled && key == "budget_tokens"))
      return unsupported_field("thinking." + key, "is not supported by this server");
  r.effort_ignorable = true;
  if (!enabled) {
    r.reasoning_effort = "low";
    return std::nullopt;
  }
  auto b = t->find("budget_tokens");
  if (b == t->end() || !b->is_number_integer() || b->get<double>() < kMinThinkingBudget)
    return bad_field("thinking.budget_tokens",
                     str_cat("'thinking.budget_tokens' = ",
                             b == t->end() ? std::string("absent") : b->dump(),
                             ", expected an integer of at least ", kMinThinkingBudget));
  const auto budget = b->get<double>();
  if (max_tokens && budget >= *max_tokens)
    return bad_field("thinking.budget_tokens",
                     str_cat("'thinking.budget_tokens' = ", b->dump(),
                             " must be less than 'max_tokens' (", *max_tokens, ")"));
  r.reasoning_effort = std::string(thinking_effort(static_cast<int64_t>(budget)));
  r.thinking = true;
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
  const auto ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (auto e = read_tools(ordered, r.tools)) return e;
  if (auto e = read_messages(obj, r)) return e;
  if (count_only) return read_thinking(obj, std::nullopt, r);
  if (auto e = read_sampling(obj, lim, r)) return e;
  return read_thinking(obj, r.max_tokens, r);
}

std::string_view thinking_effort(int64_t budget_tokens) {
  if (budget_tokens < 4096) return "low";
  return budget_tokens < 16384 ? "medium" : "high";
}

std::string thinking_signature(std::string_view thinking) {
  static const uint64_t key = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
  uint64_t h = 0xcbf29ce484222325ull ^ key;  // FNV-1a over the key's and the text's bytes
  auto mix = [&](unsigned char c) { h = (h ^ c) * 0x100000001b3ull; };
  for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(key >> (8 * i)));
  for (char c : thinking) mix(static_cast<unsigned char>(c));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return str_cat("kvcache-", thinking.size(), "-", hex);
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

std::string_view stop_reason(const serve::Completion& c, bool tool_use) {
  if (tool_use) return "tool_use";
  if (c.finish == serve::Finish::kLength || c.finish == serve::Finish::kCacheFull)
    return "max_tokens";
  return c.stop_string.empty() ? "end_turn" : "stop_sequence";
}

json tool_use_json(const ApiToolCall& call) {
  json input = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (input.is_discarded()) input = json::object();  // parsed calls hold whole JSON objects
  return json{{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", std::move(input)}};
}

json message_json(const ResponseMeta& m, const serve::RequestResult& r, const std::string& text,
                  const std::vector<ApiToolCall>& calls, const std::string& reasoning) {
  const serve::Completion& c = r.completions.at(0);
  json content = json::array();
  if (!reasoning.empty())
    content.push_back({{"type", "thinking"},
                       {"thinking", reasoning},
                       {"signature", thinking_signature(reasoning)}});
  if (!text.empty() || calls.empty()) content.push_back({{"type", "text"}, {"text", text}});
  for (const ApiToolCall& call : calls) content.push_back(tool_use_json(call));
  return json{{"id", m.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", m.model},
              {"content", std::move(content)},
              {"stop_reason", stop_reason(c, !calls.empty())},
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

json text_delta_json(std::string_view text, int32_t index) {
  return json{{"type", "content_block_delta"},
              {"index", index},
              {"delta", {{"type", "text_delta"}, {"text", std::string(text)}}}};
}

std::string tool_use_events(int32_t index, const ApiToolCall& call) {
  json start = tool_use_json(call);
  start["input"] = json::object();
  return event(json{{"type", "content_block_start"}, {"index", index}, {"content_block", start}}) +
         event(json{{"type", "content_block_delta"},
                    {"index", index},
                    {"delta", {{"type", "input_json_delta"}, {"partial_json", call.arguments}}}}) +
         event(json{{"type", "content_block_stop"}, {"index", index}});
}

json message_delta_json(const serve::RequestResult& r, bool tool_use) {
  const serve::Completion& c = r.completions.at(0);
  return json{{"type", "message_delta"},
              {"delta", {{"stop_reason", stop_reason(c, tool_use)}, {"stop_sequence", stop_sequence(c)}}},
              {"usage", usage(r)}};
}

std::string event(const json& data) {
  return "event: " + data.at("type").get<std::string>() + "\ndata: " +
         data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string answer_events(BlockStream& blocks, ToolCallStream* ts, bool thinking,
                          std::string_view text, bool fin, bool& called) {
  const std::string shown = ts ? ts->push(text) : std::string(text);
  std::string out;
  if (ts && thinking) out += blocks.thinking(ts->take_reasoning());
  if (!shown.empty()) out += blocks.text(shown);
  if (!fin) return out;
  std::vector<ApiToolCall> calls;
  if (ts) {
    ChoiceOutput o = ts->finish();
    if (thinking) out += blocks.thinking(o.reasoning);
    if (!o.content.empty()) out += blocks.text(o.content);
    calls = std::move(o.calls);
  }
  out += blocks.close(/*text_if_none=*/calls.empty());
  for (size_t k = 0; k < calls.size(); ++k)
    out += tool_use_events(blocks.next_index() + static_cast<int32_t>(k), calls[k]);
  called = !calls.empty();
  return out;
}

std::string BlockStream::start(Kind k) {
  if (open_ == k) return "";
  std::string out = stop();
  open_ = k;
  ++index_;
  texted_ |= k == Kind::kText;
  const json block = k == Kind::kText ? json{{"type", "text"}, {"text", ""}}
                                      : json{{"type", "thinking"}, {"thinking", ""}};
  return out + event(json{{"type", "content_block_start"}, {"index", index_},
                          {"content_block", block}});
}

std::string BlockStream::stop() {
  if (open_ == Kind::kNone) return "";
  std::string out;
  if (open_ == Kind::kThinking)
    out = event(json{{"type", "content_block_delta"},
                     {"index", index_},
                     {"delta", {{"type", "signature_delta"},
                                {"signature", thinking_signature(thought_)}}}});
  open_ = Kind::kNone;
  thought_.clear();
  return out + event(json{{"type", "content_block_stop"}, {"index", index_}});
}

std::string BlockStream::thinking(std::string_view piece) {
  if (piece.empty()) return "";
  std::string out = start(Kind::kThinking);
  thought_ += piece;
  return out + event(json{{"type", "content_block_delta"},
                          {"index", index_},
                          {"delta", {{"type", "thinking_delta"}, {"thinking", piece}}}});
}

std::string BlockStream::text(std::string_view piece) {
  std::string out = start(Kind::kText);
  return piece.empty() ? out : out + event(text_delta_json(piece, index_));
}

std::string BlockStream::close(bool text_if_none) {
  std::string out = text_if_none && !texted_ ? start(Kind::kText) : "";
  return out + stop();
}

}  // namespace kvcache::server
