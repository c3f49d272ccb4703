// Tools on /v1/chat/completions: the request fields, the grammar plan, and the answer parsed
// into calls (whole and streamed). See api.h.
#include <algorithm>
#include <mutex>
#include <random>
#include <set>
#include <utility>

#include "core/str_cat.h"
#include "server/api.h"
#include "text/json_schema.h"

namespace kvcache::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr size_t kMaxTools = 128;

ApiError unknown(const std::string& at) {
  return ApiError{400, "unrecognized field '" + at + "'", "invalid_request_error", at,
                  "unknown_parameter"};
}

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  return true;
}

// One {"type": "function", "function": {...}}; its compiled parameters into `spec`.
std::optional<ApiError> parse_tool(const ordered_json& t, const std::string& at,
                                   text::ToolGrammarSpec& spec) {
  if (!t.is_object()) return bad_field(at, "'" + at + "' must be an object");
  for (const auto& [key, v] : t.items())
    if (key != "type" && key != "function") return unknown(at + "." + key);
  if (t.value("type", "") != "function")
    return bad_field(at + ".type", "'" + at + ".type' must be \"function\"");
  const std::string fat = at + ".function";
  auto f = t.find("function");
  if (f == t.end() || !f->is_object())
    return bad_field(fat, "'" + fat + "' is required: {\"name\", \"description\", \"parameters\"}");
  for (const auto& [key, v] : f->items()) {
    const std::string kat = fat + "." + key;
    if (key == "description" && !v.is_string() && !v.is_null())
      return bad_field(kat, "'" + kat + "' must be a string");
    if (key == "strict" && !v.is_boolean() && !v.is_null())
      return bad_field(kat, "'" + kat + "' must be a boolean");
    if (key != "name" && key != "description" && key != "parameters" && key != "strict")
      return unknown(kat);
  }
  auto name = f->find("name");
  if (name == f->end() || !name->is_string() || !valid_tool_name(name->get<std::string>()))
    return bad_field(fat + ".name", "'" + fat + ".name' must be 1 to 64 of a-z A-Z 0-9 _ -");
  spec.name = name->get<std::string>();
  auto params = f->find("parameters");
  std::string schema = R"({"type":"object","properties":{}})";  // none: no arguments
  if (params != f->end() && !params->is_null()) {
    if (!params->is_object())
      return bad_field(fat + ".parameters", "'" + fat + ".parameters' must be a JSON Schema object");
    schema = params->dump();
  }
  Result<std::shared_ptr<const text::Grammar>> g = text::compile_json_schema(schema);
  if (!g.ok())
    return ApiError{400, fat + ".parameters: " + g.status().message(), "invalid_request_error",
                    fat + ".parameters", "unsupported_schema"};
  spec.arguments = std::move(*g);
  return std::nullopt;
}

std::optional<ApiError> parse_choice(const ordered_json& c, ToolsRequest& out) {
  if (c.is_string()) {
    const std::string s = c.get<std::string>();
    if (s == "none") out.choice = ToolChoice::kNone;
    else if (s == "auto") out.choice = ToolChoice::kAuto;
    else if (s == "required") out.choice = ToolChoice::kRequired;
    else
      return bad_field("tool_choice", "'tool_choice' = " + c.dump() +
                                          ", expected none, auto, required or {\"type\": "
                                          "\"function\", \"function\": {\"name\": ...}}");
    return std::nullopt;
  }
  if (!c.is_object() || c.value("type", "") != "function" || !c.contains("function") ||
      !c["function"].is_object() || !c["function"].contains("name") ||
      !c["function"]["name"].is_string())
    return bad_field("tool_choice", "'tool_choice' = " + c.dump() +
                                        ", expected none, auto, required or {\"type\": "
                                        "\"function\", \"function\": {\"name\": ...}}");
  for (const auto& [key, v] : c.items())
    if (key != "type" && key != "function") return unknown("tool_choice." + key);
  for (const auto& [key, v] : c["function"].items())
    if (key != "name") return unknown("tool_choice.function." + key);
  out.choice = ToolChoice::kNamed;
  out.named = c["function"]["name"].get<std::string>();
  return std::nullopt;
}

std::string random_alnum(size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  constexpr std::string_view kAlnum =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::lock_guard<std::mutex> lk(mu);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kAlnum[rng() % kAlnum.size()];
  return s;
}

// The grammar of a tool set, choice and family: the same ones (the last 16) give the same
// object, so the executor's matcher and its cached masks are shared by an agent's turns.
Result<std::shared_ptr<const text::Grammar>> tool_grammar(text::ToolSyntax s,
                                                          const ToolsRequest& t,
                                                          bool forced) {
  constexpr size_t kKept = 16;
  static std::mutex mu;
  static std::vector<std::pair<std::string, std::shared_ptr<const text::Grammar>>> kept;
  const bool parallel = t.parallel && t.choice != ToolChoice::kNamed;
  std::string key = str_cat(static_cast<int>(s), "|", static_cast<int>(t.choice), "|", t.named,
                            "|", parallel, "|", forced);
  for (const std::string& j : t.json) key += "\n" + j;
  {
    std::lock_guard<std::mutex> lk(mu);
    for (const auto& [k, g] : kept)
      if (k == key) return g;
  }
  std::vector<text::ToolGrammarSpec> specs;
  for (const text::ToolGrammarSpec& spec : t.specs)
    if (t.choice != ToolChoice::kNamed || spec.name == t.named) specs.push_back(spec);
  Result<std::shared_ptr<const text::Grammar>> g =
      text::tool_call_grammar(s, specs, parallel, /*with_marker=*/!forced);
  if (!g.ok()) return g;
  std::lock_guard<std::mutex> lk(mu);
  kept.insert(kept.begin(), {std::move(key), *g});
  if (kept.size() > kKept) kept.pop_back();
  return g;
}

std::vector<ApiToolCall> with_ids(text::ToolSyntax s, std::vector<text::ParsedToolCall> calls) {
  std::vector<ApiToolCall> out;
  for (text::ParsedToolCall& c : calls)
    out.push_back({new_tool_call_id(s), std::move(c.name), std::move(c.arguments)});
  return out;
}

}  // namespace

std::optional<ApiError> parse_tools(const ordered_json& body, ToolsRequest& out) {
  out = ToolsRequest{};
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array() || tools->size() > kMaxTools)
      return bad_field("tools", str_cat("'tools' must be a list of at most ", kMaxTools,
                                        " function tools"));
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string at = str_cat("tools[", i, "]");
      text::ToolGrammarSpec spec;
      if (auto e = parse_tool((*tools)[i], at, spec)) return e;
      if (!names.insert(spec.name).second)
        return bad_field(at + ".function.name", "'" + at + ".function.name' = \"" + spec.name +
                                                    "\" names another tool too");
      out.json.push_back((*tools)[i].dump());
      out.specs.push_back(std::move(spec));
    }
  }
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) {
    out.choice = out.specs.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  } else if (auto e = parse_choice(*choice, out)) {
    return e;
  }
  if (out.choice != ToolChoice::kNone && out.specs.empty())
    return bad_field("tool_choice", "'tool_choice' = " + choice->dump() + " needs 'tools'");
  if (out.choice == ToolChoice::kNamed &&
      std::none_of(out.specs.begin(), out.specs.end(),
                   [&](const text::ToolGrammarSpec& t) { return t.name == out.named; }))
    return bad_field("tool_choice.function.name", "'tool_choice.function.name' = \"" +
                                                      out.named + "\" is not one of 'tools'");
  auto parallel = body.find("parallel_tool_calls");
  if (parallel != body.end() && !parallel->is_null()) {
    if (!parallel->is_boolean())
      return bad_field("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    out.parallel = parallel->get<bool>();
  }
  return std::nullopt;
}

std::optional<ApiError> plan_tools(ApiRequest& r, text::ChatTemplate t,
                                   const text::Tokenizer& tokenizer) {
  if (!r.tools.active()) return std::nullopt;
  if (r.params.grammar)
    return bad_field("response_format", "'response_format' asks for JSON and 'tools' for calls: "
                                        "use one, or tool_choice \"none\"");
  const text::ToolSyntax s = text::tool_syntax(t);
  const bool forced = r.tools.choice != ToolChoice::kAuto;
  // Harmony's own calls are parsed, not constrained: its recipient may come before or after
  // the channel, after an analysis message.
  if (s == text::ToolSyntax::kHarmony && !forced) return std::nullopt;
  Result<std::shared_ptr<const text::Grammar>> g = tool_grammar(s, r.tools, forced);
  if (!g.ok()) return bad_field("tools", g.status().message());
  r.params.grammar = std::move(*g);
  if (forced) {
    r.forced_prefix = std::string(text::forced_call_prefix(s));
    return std::nullopt;
  }
  const text::ToolMarker m = text::tool_marker(s);
  r.params.grammar_trigger = m.text;
  r.params.grammar_trigger_at_start = m.at_start;
  text::EncodeOptions o;
  o.add_special = false;
  Result<std::vector<int32_t>> ids = tokenizer.encode(m.text, o);
  if (ids.ok() && ids->size() == 1 && tokenizer.decode_one((*ids)[0]).empty())
    r.params.grammar_trigger_tokens = *ids;  // a control token: it prints nothing
  return std::nullopt;
}

std::string new_tool_call_id(text::ToolSyntax s) {
  return s == text::ToolSyntax::kMistral ? random_alnum(9) : "call_" + random_alnum(24);
}

ChoiceOutput tool_output(text::ToolSyntax s, std::string_view forced_prefix,
                         std::string_view text, bool calls) {
  const std::string whole = std::string(forced_prefix) + std::string(text);
  if (s == text::ToolSyntax::kHarmony) {
    text::ParsedAnswer a = text::parse_harmony(whole, calls, /*partial=*/false);
    return ChoiceOutput{std::move(a.content), with_ids(s, std::move(a.calls)),
                        std::move(a.reasoning)};
  }
  text::ParsedAnswer a = text::parse_tool_calls(s, whole);
  if (a.calls.empty()) return ChoiceOutput{std::string(text), {}, {}};
  return ChoiceOutput{std::move(a.content), with_ids(s, std::move(a.calls)), {}};
}

ToolCallStream::ToolCallStream(text::ToolSyntax s, std::string forced_prefix, bool calls)
    : syntax_(s), buf_(std::move(forced_prefix)), in_calls_(!buf_.empty()), harmony_(calls) {}

// Harmony: the reply read again past its ended messages; returns the content not sent yet
// (each partial read's content begins with the previous one's). `whole`: the final read's
// calls go there.
std::string ToolCallStream::push_harmony(bool partial, ChoiceOutput* whole) {
  harmony_.read(buf_, partial);
  const std::string reasoning = harmony_.reasoning_from(reasoning_read_);
  reasoning_read_ += reasoning.size();
  reasoning_ += reasoning;
  if (whole != nullptr) whole->calls = with_ids(syntax_, harmony_.calls());
  std::string out = harmony_.content_from(sent_);
  sent_ += out.size();
  return out;
}

std::string ToolCallStream::take_reasoning() {
  return std::exchange(reasoning_, {});
}

std::string ToolCallStream::push(std::string_view text) {
  buf_ += text;
  if (syntax_ == text::ToolSyntax::kHarmony) return push_harmony(/*partial=*/true, nullptr);
  if (in_calls_) return "";
  const text::ToolMarker m = text::tool_marker(syntax_);
  size_t upto = buf_.size();
  if (!free_ && m.at_start) {
    if (buf_.compare(0, m.text.size(), m.text) == 0) {
      in_calls_ = true;
      return "";
    }
    if (buf_.size() < m.text.size() && m.text.compare(0, buf_.size(), buf_) == 0) return "";
    free_ = true;
  } else if (!free_) {
    const size_t at = buf_.find(m.text, sent_);
    if (at != std::string::npos) {
      upto = at;
      in_calls_ = true;
    } else {  // hold back what may be the marker's beginning
      for (size_t k = std::min(m.text.size() - 1, buf_.size() - sent_); k > 0; --k)
        if (buf_.compare(buf_.size() - k, k, m.text, 0, k) == 0) {
          upto = buf_.size() - k;
          break;
        }
    }
  }
  std::string out = buf_.substr(sent_, upto - sent_);
  sent_ = upto;
  return out;
}

ChoiceOutput ToolCallStream::finish() {
  if (syntax_ == text::ToolSyntax::kHarmony) {
    ChoiceOutput o;
    o.content = push_harmony(/*partial=*/false, &o);
    o.reasoning = take_reasoning();
    return o;
  }
  const std::string rest = buf_.substr(sent_);
  sent_ = buf_.size();
  if (!in_calls_) return ChoiceOutput{rest, {}, {}};
  text::ParsedAnswer a = text::parse_tool_calls(syntax_, rest);
  if (a.calls.empty()) return ChoiceOutput{rest, {}, {}};
  return ChoiceOutput{std::move(a.content), with_ids(syntax_, std::move(a.calls)), {}};
}

std::vector<json> tool_call_chunks(const ResponseMeta& m, int32_t index, int32_t call_index,
                                   const ApiToolCall& call, size_t fragment) {
  auto chunk = [&](json tc) {
    tc["index"] = call_index;
    json c{{"index", index}, {"logprobs", nullptr}, {"finish_reason", nullptr},
           {"delta", {{"tool_calls", json::array({std::move(tc)})}}}};
    return json{{"id", m.id}, {"object", "chat.completion.chunk"}, {"created", m.created},
                {"model", m.model}, {"choices", json::array({std::move(c)})}};
  };
  std::vector<json> out;
  out.push_back(chunk({{"id", call.id}, {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", ""}}}}));
  const std::string& a = call.arguments;
  for (size_t i = 0; i < a.size();) {
    size_t n = std::min(fragment, a.size() - i);
    while (i + n < a.size() && (static_cast<unsigned char>(a[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(chunk({{"function", {{"arguments", a.substr(i, n)}}}}));
    i += n;
  }
  return out;
}

}  // namespace kvcache::server
