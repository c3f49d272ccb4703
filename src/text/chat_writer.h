// What the chat template renderers share: the writer that remembers where client text went,
// Jinja's trim, and the "messages..." errors. Layer: text; internal to chat_template*.cpp.
// It renders nothing itself.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/str_cat.h"
#include "text/chat_template.h"

namespace kvcache::text {

// Jinja's trim: Python str.strip() (ASCII whitespace here; other Unicode spaces are kept).
inline std::string_view chat_trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

inline Status chat_bad(std::string what) { return invalid_argument("messages" + std::move(what)); }
inline std::string chat_at(size_t i) { return str_cat("[", i, "]"); }

// Appends template text and client text (content), remembering where client text went.
struct ChatWriter {
  RenderedChat r;
  ChatWriter& raw(std::string_view s) {
    r.text += s;
    return *this;
  }
  ChatWriter& content(std::string_view s) {
    if (!s.empty()) r.content.emplace_back(r.text.size(), r.text.size() + s.size());
    r.text += s;
    return *this;
  }
};

// The tools as JSON values; InvalidArgument naming tools[i] when one is not
// {"function": {...}, ...}.
Result<std::vector<nlohmann::ordered_json>> parse_chat_tools(std::span<const std::string> tools);
// A call's arguments as the templates write them: the parsed value through tojson, or the
// text as a JSON string when it is not JSON.
std::string arguments_json(const std::string& text);

// The families whose templates have tool syntax (chat_template_tools.cpp, chat_harmony.cpp).
Status render_chatml(ChatWriter& w, std::span<const ChatMessage> m, bool gen,
                     std::span<const std::string> tools);
Status render_llama3(ChatWriter& w, std::span<const ChatMessage> m, bool gen,
                     const ChatTokens& t, std::span<const std::string> tools);
Status render_mistral(ChatWriter& w, std::span<const ChatMessage> m, const ChatTokens& t,
                      std::span<const std::string> tools);
Status render_harmony(ChatWriter& w, std::span<const ChatMessage> m, bool gen,
                      std::span<const std::string> tools, const ChatContext& context);

}  // namespace kvcache::text
