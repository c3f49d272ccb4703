// Tool calls in a model's answer, by template family: the marker that opens them, the grammar
// that makes them valid (one tool's name and its arguments' schema per call) and the parser that
// splits an answer into content and calls. Layer: text. Families: Hermes (Qwen2.5's ChatML and
// the generic form of chat_template.h), Llama 3.1 (a bare JSON object), Mistral
// ([TOOL_CALLS] and a JSON list) and harmony (gpt-oss: messages to functions.NAME, and the
// reasoning in its analysis channel). It does not render prompts (chat_template.h) or make ids.
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

enum class ToolSyntax { kHermes, kLlama3, kMistral, kHarmony };
ToolSyntax tool_syntax(ChatTemplate t);  // Gemma, Phi-3 and plain use the generic Hermes form

// What opens the calls: "<tool_call>" (Hermes), "[TOOL_CALLS]" (Mistral), {"name" as the
// first bytes of the answer (Llama 3.1; at_start), "to=functions." (harmony; its replies are
// parsed whole by parse_harmony, this marker is informative).
struct ToolMarker {
  std::string text;
  bool at_start = false;
};
ToolMarker tool_marker(ToolSyntax s);

// What a forced call's prompt ends with, so the model goes on from inside the call:
// "<tool_call>\n" (Hermes), "[TOOL_CALLS]" (Mistral), "" (Llama 3.1),
// "<|channel|>commentary to=functions." (harmony, after the prompt's <|start|>assistant).
std::string_view forced_call_prefix(ToolSyntax s);

struct ToolGrammarSpec {
  std::string name;                      // written as is: [A-Za-z0-9_-] only
  std::shared_ptr<const Grammar> arguments;  // the parameters schema's grammar (checked)
};

// One call of any of `tools`, or several (`parallel`, not for Llama 3.1, whose template has
// one call a turn), as the family writes them: Hermes <tool_call>\n{"name": "N", "arguments":
// ARGS}\n</tool_call> joined by "\n"; Llama {"name": "N", "parameters": ARGS}; Mistral
// [TOOL_CALLS][{"name": "N", "arguments": ARGS}, ...]; harmony (one call: a message ends at
// <|call|>) <|channel|>commentary to=functions.N <|constrain|>json<|message|>ARGS, its
// framing matched as the tokens' spelling (Tokenizer::decode shows harmony's framing).
// with_marker false: the document starts
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
  std::string reasoning;             // harmony: its analysis channel's text ("" for others)
};
// Splits an answer. The calls must be the rest of the answer (whitespace aside), each a JSON
// object with a string "name" and an object "arguments" ("parameters" for Llama 3.1): anything
// else (cut short, invalid JSON, text after the calls) leaves the whole answer as content and
// no calls. Harmony: parse_harmony(text, true, false). Never fails.
ParsedAnswer parse_tool_calls(ToolSyntax s, std::string_view text);

// A harmony reply: the text generated after the prompt's <|start|>assistant (it may repeat
// <|start|>assistant), its framing tokens decoded as written. Its messages (header <|message|> text, ended by <|end|>,
// <|call|>, <|return|>, the next <|start|> or the end of the reply): analysis text is
// `reasoning`, final and commentary text without a recipient is `content` (several messages'
// texts joined by "\n"), a message to functions.NAME whose text is a JSON object is a call
// (with `calls`). Anything else stays content as written: a reply that does not begin like a
// harmony header, text after a message that is not another message, a header with no
// <|message|>, a call whose arguments are not a JSON object, a call to another recipient or
// with `calls` false. `partial` (a reply still being generated): an open message's text
// without a possible end token's beginning, an open call and a header cut short not yet
// reported; what it reports is a beginning of what the whole reply gives. Never fails.
ParsedAnswer parse_harmony(std::string_view text, bool calls, bool partial);

// A harmony reply read as it grows, with parse_harmony's result, in work bounded by the open
// message: the messages that ended (at <|end|>, <|call|>, <|return|> or the next <|start|>) are
// read once and kept; each read reads only what follows them, or only the new bytes once the
// rest is content as written (a reply without framing, text after a message that cannot begin
// another).
class HarmonyStream {
 public:
  explicit HarmonyStream(bool calls) : calls_(calls) {}
  // `reply`: the whole reply so far (each one begins with the one read before).
  void read(std::string_view reply, bool partial);
  // parse_harmony(reply, calls, partial)'s content, reasoning from byte `from` on ("" when
  // it is shorter), and calls.
  std::string content_from(size_t from) const;
  std::string reasoning_from(size_t from) const;
  std::vector<ParsedToolCall> calls() const;
  // Where the last read began: the end of the last message that had ended before it (or the
  // previous read's end, once the rest is as written).
  size_t read_from() const { return read_from_; }

 private:
  bool calls_;
  bool verbatim_ = false;  // the rest of the reply is content as written
  size_t at_ = 0, read_from_ = 0, read_to_ = 0;
  ParsedAnswer done_, open_;  // the messages that ended; what follows them
};

}  // namespace kvcache::text
