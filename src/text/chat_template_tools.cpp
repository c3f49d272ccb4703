// The templates with tool syntax (Qwen2.5's ChatML, Llama 3.1, Mistral Nemo), written out as
// their Jinja does, and the generic form for the others. See chat_template.h.
#include <utility>

#include <nlohmann/json.hpp>

#include "text/chat_writer.h"
#include "text/py_json.h"

namespace kvcache::text {

using nlohmann::ordered_json;

namespace {

// A call's arguments as the templates see them: the parsed value, or the text when it is not
// JSON.
ordered_json arguments_value(const std::string& text) {
  ordered_json v = ordered_json::parse(text, nullptr, false);
  return v.is_discarded() ? ordered_json(text) : v;
}

}  // namespace

Result<std::vector<ordered_json>> parse_chat_tools(std::span<const std::string> tools) {
  std::vector<ordered_json> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    ordered_json t = ordered_json::parse(tools[i], nullptr, false);
    if (t.is_discarded() || !t.is_object() || !t.contains("function") ||
        !t["function"].is_object())
      return invalid_argument(str_cat("tools[", i, "]: expected {\"type\": \"function\", "
                                      "\"function\": {...}}"));
    out.push_back(std::move(t));
  }
  return out;
}

std::string arguments_json(const std::string& text) { return py_tojson(arguments_value(text)); }

namespace {

constexpr std::string_view kQwenSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// The "# Tools" section of Qwen's template (and of the generic form), after the system text.
void tools_section(ChatWriter& w, const std::vector<ordered_json>& tools) {
  w.raw("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
  for (const ordered_json& t : tools) w.raw("\n").content(py_tojson(t));
  w.raw("\n</tools>\n\nFor each function call, return a json object with function name and "
        "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
}

// <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call> (Qwen's rendering).
void hermes_call(ChatWriter& w, const ToolCall& c) {
  w.raw("<tool_call>\n{\"name\": \"").content(c.name).raw("\", \"arguments\": ")
      .content(arguments_json(c.arguments)).raw("}\n</tool_call>");
}

}  // namespace

Status render_chatml(ChatWriter& w, std::span<const ChatMessage> m, bool gen,
                     std::span<const std::string> tool_texts) {
  Result<std::vector<ordered_json>> tools = parse_chat_tools(tool_texts);
  if (!tools.ok()) return tools.status();
  const bool has_system = m[0].role == "system";
  w.raw("<|im_start|>system\n");
  if (has_system) w.content(m[0].content);
  else w.raw(kQwenSystem);
  if (!tools->empty()) tools_section(w, *tools);
  w.raw("<|im_end|>\n");
  for (size_t i = has_system ? 1 : 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "tool") {
      if (i == 0 || m[i - 1].role != "tool") w.raw("<|im_start|>user");
      w.raw("\n<tool_response>\n").content(msg.content).raw("\n</tool_response>");
      if (i + 1 == m.size() || m[i + 1].role != "tool") w.raw("<|im_end|>\n");
    } else if (msg.role == "assistant" && !msg.tool_calls.empty()) {
      w.raw("<|im_start|>assistant");
      if (!msg.content.empty()) w.raw("\n").content(msg.content);
      for (const ToolCall& c : msg.tool_calls) hermes_call(w.raw("\n"), c);
      w.raw("<|im_end|>\n");
    } else {
      w.raw("<|im_start|>").raw(msg.role).raw("\n").content(msg.content).raw("<|im_end|>\n");
    }
  }
  if (gen) w.raw("<|im_start|>assistant\n");
  return ok_status();
}

Status render_llama3(ChatWriter& w, std::span<const ChatMessage> m, bool gen,
                     const ChatTokens& t, std::span<const std::string> tool_texts) {
  Result<std::vector<ordered_json>> tools = parse_chat_tools(tool_texts);
  if (!tools.ok()) return tools.status();
  size_t first = 0;
  std::string_view system;
  if (m[0].role == "system") {
    system = chat_trim(m[0].content);
    first = 1;
  }
  w.raw(t.bos).raw("<|start_header_id|>system<|end_header_id|>\n\n");
  if (!tools->empty()) w.raw("Environment: ipython\n");
  w.raw("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
  w.content(system).raw("<|eot_id|>");
  if (!tools->empty()) {  // the tools go into the first message after the system one
    if (first == m.size())
      return chat_bad(": Cannot put tools in the first user message when there's no first "
                      "user message!");
    w.raw("<|start_header_id|>user<|end_header_id|>\n\n"
          "Given the following functions, please respond with a JSON for a function call "
          "with its proper arguments that best answers the given prompt.\n\n"
          "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
          "argument name and its value}.Do not use variables.\n\n");
    for (const ordered_json& tool : *tools) w.content(py_tojson(tool, 4)).raw("\n\n");
    w.content(chat_trim(m[first].content)).raw("<|eot_id|>");
    ++first;
  }
  for (size_t i = first; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "tool") {
      w.raw("<|start_header_id|>ipython<|end_header_id|>\n\n")
          .content(py_tojson(ordered_json(msg.content))).raw("<|eot_id|>");
    } else if (!msg.tool_calls.empty()) {
      if (msg.tool_calls.size() != 1)
        return chat_bad(chat_at(i) + ": This model only supports single tool-calls at once!");
      const ToolCall& c = msg.tool_calls[0];
      w.raw("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"").content(c.name)
          .raw("\", \"parameters\": ").content(arguments_json(c.arguments))
          .raw("}<|eot_id|>");
    } else {
      w.raw("<|start_header_id|>").raw(msg.role).raw("<|end_header_id|>\n\n")
          .content(chat_trim(msg.content)).raw("<|eot_id|>");
    }
  }
  if (gen) w.raw("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return ok_status();
}

namespace {

// MarkupSafe's escape: & < > ' ".
std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\'': out += "&#39;"; break;
      case '"': out += "&#34;"; break;
      default: out += c;
    }
  }
  return out;
}

// [AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS]: each function's keys in the client's order,
// strings written raw (as the template does), other values as JSON.
void mistral_tools(ChatWriter& w, const std::vector<ordered_json>& tools) {
  w.raw("[AVAILABLE_TOOLS][");
  for (size_t i = 0; i < tools.size(); ++i) {
    w.raw("{\"type\": \"function\", \"function\": {");
    bool first = true;
    for (const auto& [key, val] : tools[i]["function"].items()) {
      if (key == "return") continue;
      if (!first) w.raw(", ");
      first = false;
      if (val.is_string()) {
        w.raw("\"").content(key).raw("\": \"").content(val.get<std::string>()).raw("\"");
      } else {
        // The template adds a plain string to tojson's markup-safe one, so Jinja escapes the
        // plain part for HTML: "key":  becomes &#34;key&#34;: .
        w.content(html_escape("\"" + key + "\": ")).content(py_tojson(val));
      }
    }
    w.raw("}}").raw(i + 1 < tools.size() ? ", " : "]");
  }
  w.raw("[/AVAILABLE_TOOLS]");
}

Status mistral_id(const std::string& id, size_t i, const char* field) {
  if (id.size() == 9) return ok_status();
  return chat_bad(chat_at(i) + "." + field + " = \"" + id +
                  "\": Tool call IDs should be alphanumeric strings with length 9!");
}

}  // namespace

Status render_mistral(ChatWriter& w, std::span<const ChatMessage> m, const ChatTokens& t,
                      std::span<const std::string> tool_texts) {
  Result<std::vector<ordered_json>> tools = parse_chat_tools(tool_texts);
  if (!tools.ok()) return tools.status();
  const bool has_system = m[0].role == "system";
  const size_t from = has_system ? 1 : 0;
  // Tool results and calls aside, turns alternate user / assistant.
  size_t turn = 0, last_user = m.size();
  for (size_t i = from; i < m.size(); ++i) {
    if (m[i].role == "tool" || !m[i].tool_calls.empty()) continue;
    if ((m[i].role == "user") != (turn++ % 2 == 0))
      return chat_bad(chat_at(i) + ".role = \"" + m[i].role +
                      "\"; this template needs user and assistant turns to alternate");
  }
  for (size_t i = from; i < m.size(); ++i)
    if (m[i].role == "user") last_user = i;
  w.raw(t.bos);
  for (size_t i = from; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "user") {
      // The template compares messages by value: an earlier identical user turn gets them too.
      if (!tools->empty() && msg.content == m[last_user].content) mistral_tools(w, *tools);
      w.raw("[INST]");
      if (has_system && i + 1 == m.size()) w.content(m[0].content).raw("\n\n");
      w.content(msg.content).raw("[/INST]");
    } else if (!msg.tool_calls.empty()) {
      w.raw("[TOOL_CALLS][");
      for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
        const ToolCall& c = msg.tool_calls[k];
        const ordered_json fn{{"name", c.name}, {"arguments", arguments_value(c.arguments)}};
        const std::string out = py_tojson(fn);
        KVCACHE_RETURN_IF_ERROR(mistral_id(c.id, i, "tool_calls.id"));
        w.content(std::string_view(out).substr(0, out.size() - 1)).raw(", \"id\": \"")
            .content(c.id).raw("\"}");
        if (k + 1 < msg.tool_calls.size()) w.raw(", ");
        else w.raw("]").raw(t.eos);
      }
    } else if (msg.role == "assistant") {
      w.content(msg.content).raw(t.eos);
    } else {  // tool
      w.raw("[TOOL_RESULTS]{\"content\": ").content(msg.content).raw(", ");
      KVCACHE_RETURN_IF_ERROR(mistral_id(msg.tool_call_id, i, "tool_call_id"));
      w.raw("\"call_id\": \"").content(msg.tool_call_id).raw("\"}[/TOOL_RESULTS]");
    }
  }
  return ok_status();
}

Result<std::vector<ChatMessage>> fold_tools_generic(std::span<const ChatMessage> m,
                                                    std::span<const std::string> tool_texts,
                                                    bool system_role) {
  Result<std::vector<ordered_json>> tools = parse_chat_tools(tool_texts);
  if (!tools.ok()) return tools.status();
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "tool") {
      const bool joins = i > 0 && m[i - 1].role == "tool";
      if (!joins) out.emplace_back("user", "");
      std::string& c = out.back().content;
      if (joins) c += '\n';
      c.append("<tool_response>\n").append(msg.content).append("\n</tool_response>");
      continue;
    }
    ChatMessage plain(msg.role, msg.content);
    if (!msg.tool_calls.empty()) {
      ChatWriter calls;
      for (const ToolCall& c : msg.tool_calls)
        hermes_call(calls.raw(calls.r.text.empty() ? "" : "\n"), c);
      plain.content += (plain.content.empty() ? "" : "\n") + calls.r.text;
    }
    out.push_back(std::move(plain));
  }
  if (tools->empty()) return out;
  ChatWriter section;
  tools_section(section, *tools);
  const std::string text = section.r.text.substr(2);  // without the leading blank line
  if (system_role && out[0].role == "system") {
    out[0].content += "\n\n" + text;
  } else if (system_role) {
    out.insert(out.begin(), ChatMessage("system", text));
  } else {
    out[0].content = text + "\n\n" + out[0].content;
  }
  return out;
}

}  // namespace kvcache::text
