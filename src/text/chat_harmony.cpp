// gpt-oss's harmony chat format, written out as the model's template lays it out: the model's
// system message, the developer message with instructions and the tools' TypeScript-like
// namespace, and the channels of assistant turns. See render_chat in chat_template.h.
#include <ctime>
#include <utility>

#include "text/chat_writer.h"
#include "text/py_json.h"

namespace kvcache::text {

using nlohmann::ordered_json;

namespace {

std::string str_of(const ordered_json& v) {
  return v.is_string() ? v.get<std::string>() : py_tojson(v);
}

bool truthy(const ordered_json* v) {
  return v != nullptr && !v->is_null() && !(v->is_boolean() && !v->get<bool>()) &&
         !(v->is_structured() && v->empty()) && !(v->is_string() && v->get<std::string>().empty());
}

const ordered_json* field(const ordered_json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

bool type_is(const ordered_json& spec, const char* name) {
  const ordered_json* t = field(spec, "type");
  return t != nullptr && t->is_string() && *t == name;
}

bool listed(const ordered_json* list, const std::string& name) {
  if (list == nullptr || !list->is_array()) return false;
  for (const ordered_json& e : *list)
    if (e.is_string() && e == name) return true;
  return false;
}

std::string nullable(const ordered_json& spec) {
  return truthy(field(spec, "nullable")) ? " | null" : "";
}

std::string ts_type(const ordered_json& spec);

std::string ts_array(const ordered_json& spec) {
  const ordered_json* items = field(spec, "items");
  if (!truthy(items)) return "any[]" + nullable(spec);
  std::string inner;
  if (type_is(*items, "string")) inner = "string";
  else if (type_is(*items, "number") || type_is(*items, "integer")) inner = "number";
  else if (type_is(*items, "boolean")) inner = "boolean";
  else inner = ts_type(*items);
  if (inner == "object | object" || inner.size() > 50) inner = "any";
  return inner + "[]" + nullable(spec);
}

// An object's properties inline. The template's Jinja also writes its own source whitespace
// before each type here (and after each " | " of a oneOf); that is not reproduced.
std::string ts_object(const ordered_json& spec) {
  const ordered_json* props = field(spec, "properties");
  if (!truthy(props) || !props->is_object()) return "object";
  std::string out = "{\n";
  size_t k = 0;
  for (const auto& [name, p] : props->items()) {
    out += name + (listed(field(spec, "required"), name) ? "" : "?") + ": " + ts_type(p);
    if (++k < props->size()) out += ", ";
  }
  return out + "}";
}

// oneOf: the variants' types as a union (the template means objects among several to be
// `any`, but its Jinja never sets that flag outside its loop, so it writes the union too).
std::string ts_one_of(const ordered_json& variants) {
  if (!variants.is_array()) return "any";
  std::string out;
  for (const ordered_json& v : variants) out += (out.empty() ? "" : " | ") + ts_type(v);
  return out;
}

// A JSON-schema property as the template's TypeScript-like type.
std::string ts_type(const ordered_json& spec) {
  const ordered_json* type = field(spec, "type");
  if (type_is(spec, "array")) return ts_array(spec);
  if (type != nullptr && type->is_array() && !type->empty()) {
    std::string out;
    for (const ordered_json& t : *type) out += (out.empty() ? "" : " | ") + str_of(t);
    return out;
  }
  if (const ordered_json* one = field(spec, "oneOf"); truthy(one)) return ts_one_of(*one);
  if (type_is(spec, "string")) {
    const ordered_json* e = field(spec, "enum");
    if (!truthy(e) || !e->is_array()) return "string" + nullable(spec);
    std::string out;
    for (const ordered_json& v : *e) out += (out.empty() ? "\"" : "\" | \"") + str_of(v);
    return out + "\"";
  }
  if (type_is(spec, "number") || type_is(spec, "integer")) return "number";
  if (type_is(spec, "boolean")) return "boolean";
  if (type_is(spec, "object")) return ts_object(spec);
  return "any";
}

// One parameter line: // description, name?: type, // default: value.
std::string ts_param(const std::string& name, const ordered_json& spec, bool required) {
  std::string out;
  if (const ordered_json* d = field(spec, "description"); truthy(d))
    out += "// " + str_of(*d) + "\n";
  out += name + (required ? "" : "?") + ": " + ts_type(spec);
  if (const ordered_json* d = field(spec, "default"); d != nullptr) {
    if (truthy(field(spec, "enum"))) out += ", // default: " + str_of(*d);
    else if (truthy(field(spec, "oneOf"))) out += "// default: " + str_of(*d);
    else out += ", // default: " + py_tojson(*d);
  }
  return out + ",\n";
}

// ## functions\n\nnamespace functions {\n\n ... } // namespace functions
std::string functions_namespace(const std::vector<ordered_json>& tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (const ordered_json& tool : tools) {
    const ordered_json& f = tool["function"];
    if (const ordered_json* d = field(f, "description"); d != nullptr && d->is_string())
      out += "// " + d->get<std::string>() + "\n";
    const ordered_json* name = field(f, "name");
    out += "type " + (name != nullptr ? str_of(*name) : std::string()) + " = ";
    const ordered_json* params = field(f, "parameters");
    const ordered_json* props = params != nullptr ? field(*params, "properties") : nullptr;
    if (!truthy(props) || !props->is_object()) {
      out += "() => any;\n\n";
      continue;
    }
    out += "(_: {\n";
    for (const auto& [pname, spec] : props->items())
      out += ts_param(pname, spec, listed(field(*params, "required"), pname));
    out += "}) => any;\n\n";
  }
  return out + "} // namespace functions";
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

Status check_context(const ChatContext& c) {
  const std::string& e = c.reasoning_effort;
  if (e != "low" && e != "medium" && e != "high")
    return invalid_argument("reasoning_effort = \"" + e + "\", expected low, medium or high");
  const std::string& d = c.date;
  bool ok = d.empty() || d.size() == 10;
  for (size_t i = 0; ok && i < d.size(); ++i)
    ok = (i == 4 || i == 7) ? d[i] == '-' : (d[i] >= '0' && d[i] <= '9');
  if (!ok) return invalid_argument("chat date = \"" + d + "\", expected YYYY-MM-DD");
  return ok_status();
}

void system_message(ChatWriter& w, const ChatContext& c, bool tools) {
  w.raw("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
        "Knowledge cutoff: 2024-06\nCurrent date: ")
      .raw(c.date.empty() ? today_utc() : c.date).raw("\n\nReasoning: ").raw(c.reasoning_effort)
      .raw("\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
           "every message.");
  if (tools) w.raw("\nCalls to these tools must go to the commentary channel: 'functions'.");
  w.raw("<|end|>");
}

void developer_message(ChatWriter& w, std::string_view instructions,
                       const std::vector<ordered_json>& tools) {
  if (instructions.empty() && tools.empty()) return;
  w.raw("<|start|>developer<|message|>");
  if (!instructions.empty()) w.raw("# Instructions\n\n").content(instructions).raw("\n\n");
  if (!tools.empty()) w.raw("# Tools\n\n").content(functions_namespace(tools));
  w.raw("<|end|>");
}

void analysis(ChatWriter& w, std::string_view text) {
  w.raw("<|start|>assistant<|channel|>analysis<|message|>").content(text).raw("<|end|>");
}

// The name of the call a tool result at i answers: by id, else the latest call before it.
const ToolCall* answered_call(std::span<const ChatMessage> m, size_t i) {
  const ToolCall* latest = nullptr;
  for (size_t k = i; k-- > 0 && latest == nullptr;) {
    if (m[k].role != "assistant") continue;
    if (m[k].tool_calls.empty()) return nullptr;  // a final answer came between
    latest = &m[k].tool_calls.back();
    for (const ToolCall& c : m[k].tool_calls)
      if (!m[i].tool_call_id.empty() && c.id == m[i].tool_call_id) return &c;
  }
  return latest;
}

void tool_call_turn(ChatWriter& w, std::span<const ChatMessage> m, size_t i) {
  bool later_final = false;
  for (size_t k = i + 1; k < m.size(); ++k)
    later_final |= m[k].role == "assistant" && m[k].tool_calls.empty();
  const std::string& thought = m[i].reasoning.empty() ? m[i].content : m[i].reasoning;
  if (!later_final && !thought.empty()) analysis(w, thought);
  for (const ToolCall& c : m[i].tool_calls)
    w.raw("<|start|>assistant to=functions.").content(c.name)
        .raw("<|channel|>commentary json<|message|>").content(arguments_json(c.arguments))
        .raw("<|call|>");
}

}  // namespace

Status render_harmony(ChatWriter& w, std::span<const ChatMessage> m, bool gen,
                      std::span<const std::string> tool_texts, const ChatContext& context) {
  KVCACHE_RETURN_IF_ERROR(check_context(context));
  Result<std::vector<ordered_json>> tools = parse_chat_tools(tool_texts);
  if (!tools.ok()) return tools.status();
  system_message(w, context, !tools->empty());
  const bool has_system = m[0].role == "system";
  developer_message(w, has_system ? std::string_view(m[0].content) : "", *tools);
  for (size_t i = has_system ? 1 : 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "user") {
      w.raw("<|start|>user<|message|>").content(msg.content).raw("<|end|>");
    } else if (msg.role == "tool") {
      const ToolCall* call = answered_call(m, i);
      if (call == nullptr)
        return chat_bad(chat_at(i) + " is a tool result with no assistant tool call before it");
      w.raw("<|start|>functions.").content(call->name)
          .raw(" to=assistant<|channel|>commentary<|message|>")
          .content(py_tojson(ordered_json(msg.content))).raw("<|end|>");
    } else if (!msg.tool_calls.empty()) {
      tool_call_turn(w, m, i);
    } else if (i + 1 == m.size() && !gen) {  // a finished reply (training's shape)
      if (!msg.reasoning.empty()) analysis(w, msg.reasoning);
      w.raw("<|start|>assistant<|channel|>final<|message|>").content(msg.content)
          .raw("<|return|>");
    } else {
      w.raw("<|start|>assistant<|channel|>final<|message|>").content(msg.content).raw("<|end|>");
    }
  }
  if (gen) w.raw("<|start|>assistant");
  return ok_status();
}

}  // namespace kvcache::text
