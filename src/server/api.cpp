#include "server/api.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "core/str_cat.h"
#include "server/api_fields.h"
#include "text/json_schema.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

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

// An assistant's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}];
// arguments is a JSON string (an object is taken too). [] is no calls.
std::optional<ApiError> parse_tool_calls(const json& v, const std::string& at,
                                         std::vector<text::ToolCall>& out) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_array()) return bad_field(at, "'" + at + "' must be a list of tool calls");
  for (size_t k = 0; k < v.size(); ++k) {
    const json& c = v[k];
    const std::string cat = str_cat(at, "[", k, "]");
    const json* f = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !c.contains("id") || !c["id"].is_string() ||
        c.value("type", "function") != "function" || !f->contains("name") ||
        !(*f)["name"].is_string())
      return bad_field(cat, "'" + cat + "' must be {\"id\", \"type\": \"function\", "
                                        "\"function\": {\"name\", \"arguments\"}}");
    text::ToolCall call{c["id"].get<std::string>(), (*f)["name"].get<std::string>(), "{}"};
    auto args = f->find("arguments");
    if (args != f->end() && args->is_string()) call.arguments = args->get<std::string>();
    else if (args != f->end() && args->is_object()) call.arguments = args->dump();
    else if (args != f->end() && !args->is_null())
      return bad_field(cat + ".function.arguments",
                       "'" + cat + ".function.arguments' must be a JSON string");
    out.push_back(std::move(call));
  }
  return std::nullopt;
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
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return bad_field(at + ".role", "'" + at + ".role' = \"" + msg.role +
                                         "\", expected system, user, assistant or tool");
    for (const auto& [key, v] : m.items())
      if (key != "role" && key != "content" && key != "name" &&  // name: accepted, ignored
          !((key == "tool_calls" || key == "reasoning_content") && msg.role == "assistant") &&
          !(key == "tool_call_id" && msg.role == "tool"))
        return ApiError{400, "'" + at + "." + key + "' is not supported by this server",
                        "invalid_request_error", at + "." + key, "unsupported_parameter"};
    if (auto tc = m.find("tool_calls"); tc != m.end())
      if (auto e = parse_tool_calls(*tc, at + ".tool_calls", msg.tool_calls)) return e;
    if (auto rc = m.find("reasoning_content"); rc != m.end() && !rc->is_null()) {
      if (!rc->is_string())
        return bad_field(at + ".reasoning_content",
                         "'" + at + ".reasoning_content' must be a string");
      msg.reasoning = rc->get<std::string>();
    }
    if (msg.role == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string())
        return bad_field(at + ".tool_call_id", "'" + at + ".tool_call_id' is required: the id "
                                                          "of the call this result answers");
      msg.tool_call_id = id->get<std::string>();
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (msg.tool_calls.empty())
        return bad_field(at + ".content", "'" + at + ".content' is required");
    } else if (auto e = parse_content(*content, at + ".content", msg.content)) {
      return e;
    }
    r.messages.push_back(std::move(msg));
  }
  return std::nullopt;
}

ApiError unsupported(const std::string& key, const std::string& why) {
  return ApiError{400, "'" + key + "' " + why + " (docs/server.md lists the request fields)",
                  "invalid_request_error", key, "unsupported_parameter"};
}

// Every field of the body is one this server acts on, one it accepts and ignores (user,
// metadata: their types are checked), or an API field at a value that asks for nothing (e.g.
// "logprobs": false). Anything else is a 400 naming it: nothing is silently ignored.
std::optional<ApiError> check_fields(const json& obj, bool chat,
                                     const std::vector<std::string>& also) {
  static const std::set<std::string> kActed = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stream",
      "stream_options", "stop", "ignore_eos", "draft", "response_format", "logit_bias",
      "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs"};
  // API fields that ask for nothing at these values (null is always nothing).
  static const std::map<std::string, json> kInert = {
      {"echo", false},
      {"best_of", 1},       {"tools", json::array()},   {"tool_choice", "none"},
      {"store", false},     {"suffix", ""},             {"parallel_tool_calls", true}};
  for (const auto& [key, value] : obj.items()) {
    if (kActed.count(key) != 0 || (chat ? key == "messages" || key == "max_completion_tokens" ||
                                              key == "tools" || key == "tool_choice" ||
                                              key == "parallel_tool_calls" ||
                                              key == "reasoning_effort"
                                        : key == "prompt"))
      continue;
    if (std::find(also.begin(), also.end(), key) != also.end()) continue;
    if (key == "user" || key == "metadata") {
      const bool fits = key == "user" ? value.is_string() || value.is_null()
                                      : value.is_object() || value.is_null();
      if (!fits)
        return bad_field(key, "'" + key + "' is " + type_name(value) + ", expected " +
                                  (key == "user" ? "a string" : "an object"));
      continue;
    }
    if (auto it = kInert.find(key); it != kInert.end()) {
      if (value.is_null() || value == it->second ||
          (key == "parallel_tool_calls" && value.is_boolean()))
        continue;
      return unsupported(key, "= " + value.dump() + " is not supported by this server");
    }
    return ApiError{400, "unrecognized request field '" + key + "'", "invalid_request_error", key,
                    "unknown_parameter"};
  }
  return std::nullopt;
}

// logit_bias {"id": bias in [-100, 100]}, presence_penalty / frequency_penalty in [-2, 2].
std::optional<ApiError> parse_penalties(const json& obj, const ApiLimits& lim, ApiRequest& r) {
  serve::GenerateParams& p = r.params;
  if (auto e = number_field(obj, "presence_penalty", -2, 2, p.presence_penalty)) return e;
  if (auto e = number_field(obj, "frequency_penalty", -2, 2, p.frequency_penalty)) return e;
  auto it = obj.find("logit_bias");
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_object())
    return bad_field("logit_bias", "'logit_bias' is " + type_name(*it) + ", expected an object");
  for (const auto& [key, v] : it->items()) {
    int64_t id = -1;
    if (!key.empty() && key.size() < 10 && key.find_first_not_of("0123456789") == std::string::npos)
      id = std::stoll(key);
    if (id < 0 || id >= lim.vocab)
      return bad_field("logit_bias", str_cat("'logit_bias' has key \"", key,
                                             "\", expected token ids in [0, ", lim.vocab, ")"));
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < -100 ||
        v.get<double>() > 100)
      return bad_field("logit_bias", "'logit_bias' of " + key + " = " + v.dump() +
                                         ", expected a number in [-100, 100]");
    p.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
  }
  return std::nullopt;
}

// chat: "logprobs" true|false and "top_logprobs" 0..20 (only with logprobs true);
// completions: "logprobs" 0..5 alternatives (null = none).
std::optional<ApiError> parse_logprobs(const json& obj, ApiRequest& r) {
  int32_t& want = r.params.logprobs;
  if (!r.chat) {
    int32_t n = -1;
    if (auto e = number_field(obj, "logprobs", 0, 5, n)) return e;
    want = n;
    if (obj.contains("top_logprobs") && !obj["top_logprobs"].is_null())
      return unsupported("top_logprobs", "is a chat completions field; completions take "
                                         "'logprobs': N alternatives");
    return std::nullopt;
  }
  bool on = false;
  if (auto e = bool_field(obj, "logprobs", on)) return e;
  int32_t top = -1;
  if (auto e = number_field(obj, "top_logprobs", 0, serve::kMaxTopLogprobs, top)) return e;
  if (top >= 0 && !on)
    return bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  want = on ? std::max(top, 0) : -1;
  return std::nullopt;
}

// chat "reasoning_effort": low, medium or high (null = the template's default).
std::optional<ApiError> parse_reasoning_effort(const json& obj, ApiRequest& r) {
  auto it = obj.find("reasoning_effort");
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const std::string v = it->is_string() ? it->get<std::string>() : "";
  if (v != "low" && v != "medium" && v != "high")
    return bad_field("reasoning_effort",
                     "'reasoning_effort' = " + it->dump() + ", expected low, medium or high");
  r.reasoning_effort = v;
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
  if (auto e = bool_field(obj, "draft", p.draft)) return e;
  if (auto e = stop_strings(obj, "stop", /*single=*/true, p.stop)) return e;
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

std::optional<ApiError> parse_response_format(const nlohmann::ordered_json& rf,
                                              serve::GenerateParams& p) {
  if (rf.is_null()) return std::nullopt;
  if (!rf.is_object())
    return bad_field("response_format", "'response_format' is " + std::string(rf.type_name()) +
                                            ", expected an object");
  for (const auto& [key, v] : rf.items())
    if (key != "type" && key != "json_schema")
      return ApiError{400, "unrecognized field 'response_format." + key + "'",
                      "invalid_request_error", "response_format." + key, "unknown_parameter"};
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    return bad_field("response_format.type", "'response_format.type' is required: text, "
                                             "json_object or json_schema");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    p.grammar = text::json_object_grammar();
    return std::nullopt;
  }
  if (t != "json_schema")
    return bad_field("response_format.type", "'response_format.type' = " + type->dump() +
                                                 ", expected text, json_object or json_schema");
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    return bad_field("response_format.json_schema",
                     "'response_format.json_schema' is required with type json_schema: "
                     "{\"name\", \"schema\", \"strict\"}");
  for (const auto& [key, v] : js->items()) {
    const std::string at = "response_format.json_schema." + key;
    if (key == "name" || key == "description") {
      if (!v.is_string()) return bad_field(at, "'" + at + "' must be a string");
    } else if (key == "strict") {
      if (!v.is_boolean() && !v.is_null()) return bad_field(at, "'" + at + "' must be a boolean");
    } else if (key != "schema") {
      return ApiError{400, "unrecognized field '" + at + "'", "invalid_request_error", at,
                      "unknown_parameter"};
    }
  }
  auto schema = js->find("schema");
  if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
    return bad_field("response_format.json_schema.schema",
                     "'response_format.json_schema.schema' is required: a JSON Schema object");
  Result<std::shared_ptr<const text::Grammar>> g = text::compile_json_schema(schema->dump());
  if (!g.ok())
    return ApiError{400, g.status().message(), "invalid_request_error",
                    "response_format.json_schema.schema", "unsupported_schema"};
  p.grammar = std::move(*g);
  return std::nullopt;
}

std::optional<ApiError> parse_request(std::string_view body, bool chat, const ApiLimits& lim,
                                      ApiRequest& r, const std::vector<std::string>& also_allowed) {
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
  if (auto e = check_fields(obj, chat, also_allowed)) return e;
  if (auto e = parse_penalties(obj, lim, r)) return e;
  if (auto e = parse_sampling(obj, lim, r)) return e;
  if (auto e = parse_logprobs(obj, r)) return e;
  if (auto e = parse_reasoning_effort(obj, r)) return e;
  auto rf = obj.find("response_format");
  const bool tools = chat && (obj.contains("tools") || obj.contains("tool_choice") ||
                              obj.contains("parallel_tool_calls"));
  if ((rf == obj.end() || rf->is_null()) && !tools) return std::nullopt;
  // Again in the order the client wrote it: a schema's properties are generated in order, and
  // a tool's keys are rendered in order.
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, false);
  if (tools) {
    if (auto e = parse_tools(ordered, r.tools)) return e;
    if (r.tools.active() && r.params.logprobs >= 0)  // a call's tokens are not streamed as text
      return unsupported("logprobs", "together with tools is not supported by this server");
  }
  if (rf == obj.end() || rf->is_null()) return std::nullopt;
  return parse_response_format(ordered.at("response_format"), r.params);
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
  engine::SpecStats draft;
  for (const serve::Completion& c : r.completions) {
    generated += static_cast<int64_t>(c.tokens.size());
    draft.steps += c.draft.steps;
    draft.drafted += c.draft.drafted;
    draft.accepted += c.draft.accepted;
  }
  json u{{"prompt_tokens", r.prompt_tokens},
         {"completion_tokens", generated},
         {"total_tokens", r.prompt_tokens + generated},
         {"prompt_tokens_details", {{"cached_tokens", r.cached_prompt_tokens}}}};
  if (draft.steps > 0) {  // extension fields: the executor drafts (make_drafter)
    u["draft_tokens"] = draft.drafted;
    u["accepted_draft_tokens"] = draft.accepted;
    u["draft_steps"] = draft.steps;
  }
  return u;
}

namespace {

float finite_logprob(float lp) { return std::isfinite(lp) ? std::max(lp, -9999.0f) : -9999.0f; }

json bytes_json(const std::string& b) {
  json out = json::array();
  for (unsigned char ch : b) out.push_back(ch);
  return out;
}

}  // namespace

json logprobs_json(const ResponseMeta& m, std::span<const engine::TokenLogprob> lps,
                   int64_t offset) {
  auto text_of = [&](int32_t id) { return m.token_bytes ? m.token_bytes(id) : std::string(); };
  if (m.chat) {
    json content = json::array();
    for (const engine::TokenLogprob& t : lps) {
      const std::string b = text_of(t.token);
      json top = json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string tb = text_of(id);
        top.push_back({{"token", tb}, {"logprob", finite_logprob(lp)}, {"bytes", bytes_json(tb)}});
      }
      content.push_back({{"token", b},
                         {"logprob", finite_logprob(t.logprob)},
                         {"bytes", bytes_json(b)},
                         {"top_logprobs", std::move(top)}});
    }
    return json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const engine::TokenLogprob& t : lps) {
    const std::string b = text_of(t.token);
    tokens.push_back(b);
    values.push_back(finite_logprob(t.logprob));
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[text_of(id)] = finite_logprob(lp);
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(b.size());
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(values)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

json response_json(const ResponseMeta& m, const serve::RequestResult& r,
                   const std::vector<std::string>& texts,
                   const std::vector<std::vector<ApiToolCall>>& calls,
                   const std::vector<std::string>& reasoning) {
  json choices = json::array();
  for (size_t i = 0; i < r.completions.size(); ++i) {
    const bool with_calls = i < calls.size() && !calls[i].empty();
    json c{{"index", i},
           {"logprobs", m.logprobs ? logprobs_json(m, r.completions[i].logprobs) : json(nullptr)},
           {"finish_reason",
            with_calls ? "tool_calls" : finish_reason(r.completions[i].finish)}};
    if (m.chat) {
      c["message"] = {{"role", "assistant"}, {"content", texts.at(i)}};
      if (i < reasoning.size() && !reasoning[i].empty())
        c["message"]["reasoning_content"] = reasoning[i];
      if (with_calls) {
        if (texts.at(i).empty()) c["message"]["content"] = nullptr;
        json tc = json::array();
        for (const ApiToolCall& call : calls[i])
          tc.push_back({{"id", call.id}, {"type", "function"},
                        {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        c["message"]["tool_calls"] = std::move(tc);
      }
    } else {
      c["text"] = texts.at(i);
    }
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
                std::optional<serve::Finish> finish, bool tool_calls,
                std::span<const engine::TokenLogprob> lps, int64_t offset) {
  json c{{"index", index},
         {"logprobs", m.logprobs && !first ? logprobs_json(m, lps, offset) : json(nullptr)},
         {"finish_reason", !finish     ? json(nullptr)
                           : tool_calls ? json("tool_calls")
                                        : json(finish_reason(*finish))}};
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

json reasoning_chunk_json(const ResponseMeta& m, int32_t index, std::string_view reasoning) {
  json j = chunk_json(m, index, "", false, std::nullopt);
  j["choices"][0]["delta"]["reasoning_content"] = std::string(reasoning);
  return j;
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
