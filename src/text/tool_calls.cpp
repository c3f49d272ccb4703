// Tool-call markers, grammars and parsing. See tool_calls.h.
#include "text/tool_calls.h"

#include <nlohmann/json.hpp>

#include "core/str_cat.h"
#include "text/chat_writer.h"

namespace kvcache::text {
namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>\n", kHermesClose = "\n</tool_call>";
constexpr std::string_view kHarmonyOpen = "<|channel|>commentary to=functions.";

// Copies src's rules into dst; returns the id src's root has there.
int32_t import_rules(Grammar& dst, const Grammar& src) {
  const int32_t offset = dst.n_rules();
  for (int32_t r = 0; r < src.n_rules(); ++r) dst.add_rule(src.name(r));
  for (int32_t r = 0; r < src.n_rules(); ++r)
    for (const GrammarSeq& alt : src.alts(r)) {
      GrammarSeq seq;
      for (GrammarElement e : alt) {
        if (e.kind == GrammarElement::Kind::kBytes) e = dst.bytes(src.set(e.index));
        else e.index += offset;
        seq.push_back(e);
      }
      dst.add_alt(offset + r, std::move(seq));
    }
  return offset + src.root();
}

GrammarSeq cat(GrammarSeq a, const GrammarSeq& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool valid_name(std::string_view n) {
  if (n.empty()) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return false;
  return true;
}

// A JSON object with a string "name" and an object under `args_key`; false otherwise.
bool read_call(const ordered_json& j, const char* args_key, ParsedToolCall& out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  auto a = j.find(args_key);
  if (a == j.end() || !a->is_object()) return false;
  out.name = j["name"].get<std::string>();
  out.arguments = a->dump();
  return !out.name.empty();
}

bool only_space(std::string_view s) { return chat_trim(s).empty(); }

// <tool_call>{...}</tool_call> blocks separated by whitespace, to the end.
bool parse_hermes(std::string_view rest, std::vector<ParsedToolCall>& calls) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  while (!only_space(rest)) {
    rest = rest.substr(rest.find_first_not_of(" \t\n\r\v\f"));
    if (rest.substr(0, kOpen.size()) != kOpen) return false;
    const size_t end = rest.find(kClose);
    if (end == std::string_view::npos) return false;
    const ordered_json j = ordered_json::parse(rest.substr(kOpen.size(), end - kOpen.size()),
                                               nullptr, false);
    ParsedToolCall c;
    if (j.is_discarded() || !read_call(j, "arguments", c)) return false;
    calls.push_back(std::move(c));
    rest = rest.substr(end + kClose.size());
  }
  return !calls.empty();
}

}  // namespace

ToolSyntax tool_syntax(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama3: return ToolSyntax::kLlama3;
    case ChatTemplate::kMistral: return ToolSyntax::kMistral;
    case ChatTemplate::kHarmony: return ToolSyntax::kHarmony;
    default: return ToolSyntax::kHermes;
  }
}

ToolMarker tool_marker(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kLlama3: return {"{\"name\"", true};
    case ToolSyntax::kMistral: return {"[TOOL_CALLS]", false};
    case ToolSyntax::kHarmony: return {"to=functions.", false};
    case ToolSyntax::kHermes: break;
  }
  return {"<tool_call>", false};
}

std::string_view forced_call_prefix(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::kLlama3: return "";
    case ToolSyntax::kMistral: return "[TOOL_CALLS]";
    case ToolSyntax::kHarmony: return kHarmonyOpen;
    case ToolSyntax::kHermes: break;
  }
  return kHermesOpen;
}

Result<std::shared_ptr<const Grammar>> tool_call_grammar(ToolSyntax s,
                                                         std::span<const ToolGrammarSpec> tools,
                                                         bool parallel, bool with_marker) {
  if (tools.empty()) return invalid_argument("tool call grammar: no tools");
  auto g = std::make_shared<Grammar>();
  const char* key = s == ToolSyntax::kLlama3 ? "\", \"parameters\": " : "\", \"arguments\": ";
  const bool harmony = s == ToolSyntax::kHarmony;
  std::vector<GrammarSeq> alts;
  for (const ToolGrammarSpec& t : tools) {
    if (!valid_name(t.name))
      return invalid_argument("tool call grammar: name '" + t.name +
                              "', expected letters, digits, _ and -");
    const int32_t args = import_rules(*g, *t.arguments);
    GrammarSeq seq = g->literal(harmony ? str_cat(t.name, " <|constrain|>json<|message|>")
                                        : str_cat("{\"name\": \"", t.name, key));
    seq.push_back(Grammar::ref(args));
    alts.push_back(harmony ? std::move(seq) : cat(std::move(seq), g->literal("}")));
  }
  const int32_t call = g->rule_of("tool_call", std::move(alts));
  const std::string_view prefix = with_marker ? forced_call_prefix(s) : "";
  GrammarSeq root;
  if (s == ToolSyntax::kLlama3) {
    root = {Grammar::ref(call)};
  } else if (harmony) {
    root = g->literal(prefix);
    root.push_back(Grammar::ref(call));
  } else if (s == ToolSyntax::kMistral) {
    root = g->literal(str_cat(prefix, "["));
    root.push_back(Grammar::ref(call));
    if (parallel)
      root.push_back(Grammar::repeat(g->rule_of("more_calls", {cat(g->literal(", "),
                                                                   {Grammar::ref(call)})}),
                                     0, -1));
    root = cat(std::move(root), g->literal("]"));
  } else {
    root = g->literal(prefix);
    root.push_back(Grammar::ref(call));
    root = cat(std::move(root), g->literal(kHermesClose));
    if (parallel) {
      GrammarSeq more = g->literal(str_cat("\n", kHermesOpen));
      more.push_back(Grammar::ref(call));
      more = cat(std::move(more), g->literal(kHermesClose));
      root.push_back(Grammar::repeat(g->rule_of("more_calls", {std::move(more)}), 0, -1));
    }
  }
  g->set_root(g->rule_of("tool_calls", {std::move(root)}));
  KVCACHE_RETURN_IF_ERROR(g->check());
  return std::shared_ptr<const Grammar>(std::move(g));
}

ParsedAnswer parse_tool_calls(ToolSyntax s, std::string_view text) {
  if (s == ToolSyntax::kHarmony) return parse_harmony(text, true, false);
  ParsedAnswer whole{std::string(text), {}, {}};
  const ToolMarker m = tool_marker(s);
  if (s == ToolSyntax::kLlama3) {
    std::string_view t = chat_trim(text);
    if (t.substr(0, 14) == "<|python_tag|>") t = chat_trim(t.substr(14));
    if (t.empty() || t[0] != '{') return whole;
    const ordered_json j = ordered_json::parse(t, nullptr, false);
    ParsedToolCall c;
    if (j.is_discarded() || !(read_call(j, "parameters", c) || read_call(j, "arguments", c)))
      return whole;
    return ParsedAnswer{"", {std::move(c)}, {}};
  }
  const size_t at = text.find(m.text);
  if (at == std::string_view::npos) return whole;
  ParsedAnswer out{std::string(chat_trim(text.substr(0, at))), {}, {}};
  if (s == ToolSyntax::kHermes) {
    if (!parse_hermes(text.substr(at), out.calls)) return whole;
    return out;
  }
  const ordered_json j = ordered_json::parse(text.substr(at + m.text.size()), nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) return whole;
  for (const ordered_json& e : j) {
    ParsedToolCall c;
    if (!read_call(e, "arguments", c)) return whole;
    out.calls.push_back(std::move(c));
  }
  return out;
}

}  // namespace kvcache::text
