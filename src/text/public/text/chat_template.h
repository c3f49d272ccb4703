// Chat templates: built-in formatters that render a conversation the way a model family's
// own Jinja template does (ChatML/Qwen2.5, Llama 3, Gemma, Mistral, Phi-3, and a plain one
// for models without a template), and detection of the family from a GGUF's
// tokenizer.chat_template text by its markers. Layer: text. There is no Jinja engine:
// tool calls and template variables other than messages/add_generation_prompt are not rendered.
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
enum class ChatTemplate { kPlain, kChatml, kLlama3, kGemma, kMistral, kPhi3 };

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

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
};

// The bos/eos spellings the family's models use (<|begin_of_text|>, <bos>, <s> and </s>,
// <|endoftext|>); empty for ChatML and plain.
struct ChatTokens {
  std::string bos;
  std::string eos;
};
ChatTokens default_chat_tokens(ChatTemplate t);

// InvalidArgument (naming "messages") where the model's own template refuses the
// conversation: no messages, a role other than system/user/assistant, a system message
// that is not first, a system message with Gemma, roles that do not alternate user/assistant
// with Gemma and Mistral.
Result<std::string> render_chat(ChatTemplate t, std::span<const ChatMessage> messages,
                                bool add_generation_prompt, const ChatTokens& tokens);

// The rendering plus where message content landed: [begin, end) byte ranges of `text`, in
// order. Special tokens are matched only outside them, so a message cannot forge a turn.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> content;
};
Result<RenderedChat> render_chat_spans(ChatTemplate t, std::span<const ChatMessage> messages,
                                       bool add_generation_prompt, const ChatTokens& tokens);

// How a rendered chat prompt is encoded: the template's spellings of control tokens become
// those tokens, the `content` ranges stay text, and no BOS/EOS is added (the template writes
// its own). `content` is borrowed until the encode call returns.
EncodeOptions chat_prompt_options(std::span<const std::pair<size_t, size_t>> content);

}  // namespace kvcache::text
