// Tool calls in a model's answer, by template family: the marker that opens them, the grammar
// that makes them valid (one tool's name and its arguments' schema per call) and the parser that
// splits an answer into content and calls. Layer: text. Families: Hermes (Qwen2.5's ChatML and
// the generic form of chat_template.h), Llama 3.1 (a bare JSON object) and Mistral
// ([TOOL_CALLS] and a JSON list). It does not render prompts (chat_template.h) or make ids.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "text/chat_template.h"
#include "text/grammar.h"

namespace kvcache::text {

enum class ToolSyntax { kHermes, kLlama3, kMistral };
ToolSyntax tool_syntax(ChatTemplate t);  // Gemma, Phi-3 and plain use the generic Hermes form

// What opens the calls: "<tool_call>" (Hermes), "[TOOL_CALLS]" (Mistral), or {"name" as the
// first bytes of the answer (Llama 3.1; at_start).
struct ToolMarker {
  std::string text;
  bool at_start = false;
};
ToolMarker tool_marker(ToolSyntax s);

// What a forced call's prompt ends with, so the model goes on from inside the call:
// "<tool_call>\n" (Hermes), "[TOOL_CALLS]" (Mistral), "" (Llama 3.1).
std::string_view forced_call_prefix(ToolSyntax s);

struct ToolGrammarSpec {
  std::string name;                      // written as is: [A-Za-z0-9_-] only
  std::shared_ptr<const Grammar> arguments;  // the parameters schema's grammar (checked)
};

// One call of any of `tools`, or several (`parallel`, not for Llama 3.1, whose template has
// one call a turn), as the family writes them: Hermes <tool_call>\n{"name": "N", "arguments":
// ARGS}\n</tool_call> joined by "\n"; Llama {"name": "N", "parameters": ARGS}; Mistral
// [TOOL_CALLS][{"name": "N", "arguments": ARGS}, ...]. with_marker false: the document starts
// after forced_call_prefix(). InvalidArgument for no tools or a name outside [A-Za-z0-9_-].
Result<std::shared_ptr<const Grammar>> tool_call_grammar(ToolSyntax s,
                                                         std::span<const ToolGrammarSpec> tools,
                                                         bool parallel, bool with_marker);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // compact JSON object text, keys in the model's order
};
struct ParsedAnswer {
  std::string content;               // the text before the calls (the whole text without)
  std::vector<ParsedToolCall> calls;
};
// Splits an answer. The calls must be the rest of the answer (whitespace aside), each a JSON
// object with a string "name" and an object "arguments" ("parameters" for Llama 3.1): anything
// else (cut short, invalid JSON, text after the calls) leaves the whole answer as content and
// no calls. Never fails.
ParsedAnswer parse_tool_calls(ToolSyntax s, std::string_view text);

}  // namespace kvcache::text
