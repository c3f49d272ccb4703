// Chat templates: built-in formatters that render a conversation the way a model family's
// own Jinja template does (ChatML/Qwen2.5, Llama 3, Gemma, Mistral, Phi-3, gpt-oss's harmony,
// and a plain one for models without a template), and detection of the family from a GGUF's
// tokenizer.chat_template text by its markers. Layer: text. There is no Jinja engine: tools,
// assistant tool calls and tool results are rendered as the Qwen2.5, Llama 3.1, Mistral and
// gpt-oss templates do, and by a documented generic form (fold_tools_generic) for the others;
// template variables other than messages/tools/add_generation_prompt and ChatContext's are
// not rendered.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "text/tokenizer.h"

namespace kvcache::text {

// Serialized by name (the chat_template option); append only.
enum class ChatTemplate { kPlain, kChatml, kLlama3, kGemma, kMistral, kPhi3, kHarmony };

std::string_view to_string(ChatTemplate t);
std::optional<ChatTemplate> chat_template_from_name(std::string_view name);
// nullopt when the text has none of the known markers (the caller warns; chat is refused).
std::optional<ChatTemplate> detect_chat_template(std::string_view jinja_text);

// The template a model is served with: `name` (the chat_template option) when given, else
// detected from the model's own template text; plain when the model has none. tmpl is nullopt
// for an unknown name or an unrecognised template, and `problem` says why, naming the option
// as "chat_template" (the CLI maps it to its flag; callers warn at startup and refuse chat
// requests with it).
struct TemplateChoice {
  std::optional<ChatTemplate> tmpl;
  std::string problem;
};
TemplateChoice choose_chat_template(std::string_view name,
                                    const std::optional<std::string>& model_template);

// One call an assistant message made (OpenAI's tool_calls[i]).
struct ToolCall {
  std::string id;         // as the client sent it (Mistral's template needs 9 characters)
  std::string name;       // function name
  std::string arguments;  // JSON text; rendered as the parsed value when it parses
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c) : role(std::move(r)), content(std::move(c)) {}
  std::string role;     // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant: calls it made (empty = none)
  std::string tool_call_id;          // tool: the call this result answers
  std::string reasoning;  // assistant: its reasoning (harmony's analysis channel; the other
                          // families do not render it)
};

// What a template takes besides the messages: harmony's system message states the date and
// the reasoning effort (the other families ignore both).
struct ChatContext {
  std::string date;                          // "YYYY-MM-DD"; empty = today (UTC)
  std::string reasoning_effort = "medium";   // low, medium or high
};

// The bos/eos spellings the family's models use (<|begin_of_text|>, <bos>, <s> and </s>,
// <|endoftext|>); empty for ChatML and plain.
struct ChatTokens {
  std::string bos;
  std::string eos;
};
ChatTokens default_chat_tokens(ChatTemplate t);

// `tools`: the tools offered, each the client's JSON text of {"type": "function", "function":
// {...}} with its key order (Mistral writes the function's keys in that order); empty = none.
// InvalidArgument (naming "messages") where the model's own template refuses the
// conversation: no messages, a role other than system/user/assistant/tool, a system message
// that is not first, a system message with Gemma, roles that do not alternate user/assistant
// with Gemma and Mistral (tool turns aside), more than one call in a Llama 3 assistant turn,
// a Mistral tool call id that is not 9 characters, a tool that is not a JSON object.
// Harmony (gpt-oss) as its template renders it: the model's system message (identity,
// "Knowledge cutoff: 2024-06", the context's date and reasoning effort, the valid channels and,
// with tools, that calls go to the commentary channel); a leading system message as the
// developer message's "# Instructions", and the tools as its "# Tools" TypeScript-like
// `namespace functions` (string, number/integer, boolean, string enums as unions of literals,
// typed arrays, nested objects, type lists and oneOf as unions, `?` for a property not
// required, descriptions and defaults as // comments; anything else `any`; the template's
// stray source whitespace inside nested objects and oneOf unions is not reproduced); user
// turns; an
// assistant's reasoning in the analysis channel (only where the template keeps it: before
// tool calls with no later final answer, and in a last assistant turn without the generation
// prompt, which then ends <|return|>), its content in the final channel, each call as
// <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>; tool
// results as <|start|>functions.NAME to=assistant<|channel|>commentary<|message|>"TEXT"<|end|>
// (the content as a JSON string), NAME the call whose id the result answers (else the last
// call); the generation prompt <|start|>assistant. Where the template refuses, this differs:
// several calls in a turn are each rendered (it renders the first), reasoning and content on
// a tool-call turn render the reasoning (it refuses both). InvalidArgument for a tool result
// with no call before it, a reasoning effort other than low/medium/high, a date not
// YYYY-MM-DD.
Result<std::string> render_chat(ChatTemplate t, std::span<const ChatMessage> messages,
                                bool add_generation_prompt, const ChatTokens& tokens,
                                std::span<const std::string> tools = {},
                                const ChatContext& context = {});

// The rendering plus where message content landed: [begin, end) byte ranges of `text`, in
// order. Special tokens are matched only outside them, so a message cannot forge a turn.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content;
};
Result<RenderedChat> render_chat_spans(ChatTemplate t, std::span<const ChatMessage> messages,
                                       bool add_generation_prompt, const ChatTokens& tokens,
                                       std::span<const std::string> tools = {},
                                       const ChatContext& context = {});

// The generic tool form, for families whose templates have no tool syntax (Gemma, Phi-3,
// plain): the conversation rewritten into plain turns. The tools go into the system message
// (appended after a blank line; a new first message when there is none, or the first user
// message when `system_role` is false) as a "# Tools" section with one JSON line per tool and
// the <tool_call>{"name": ..., "arguments": ...}</tool_call> answer shape; an assistant's
// calls become that text after its content; consecutive tool results become one user turn of
// <tool_response> blocks. InvalidArgument for a tool that is not a JSON object.
Result<std::vector<ChatMessage>> fold_tools_generic(std::span<const ChatMessage> messages,
                                                    std::span<const std::string> tools,
                                                    bool system_role);

// How a rendered chat prompt is encoded: the template's spellings of control tokens become
// those tokens, the `content` ranges stay text, and no BOS/EOS is added (the template writes
// its own). `content` is borrowed until the encode call returns.
EncodeOptions chat_prompt_options(std::span<const std::pair<size_t, size_t>> content);

}  // namespace kvcache::text
