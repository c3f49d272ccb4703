#include "text/chat_template.h"

#include <array>
#include <utility>

#include "core/str_cat.h"

namespace kvcache::text {
namespace {

constexpr std::array<std::pair<ChatTemplate, std::string_view>, 6> kNames = {{
    {ChatTemplate::kPlain, "plain"},
    {ChatTemplate::kChatml, "chatml"},
    {ChatTemplate::kLlama3, "llama3"},
    {ChatTemplate::kGemma, "gemma"},
    {ChatTemplate::kMistral, "mistral"},
    {ChatTemplate::kPhi3, "phi3"},
}};

// Jinja's trim: Python str.strip() (ASCII whitespace here; other Unicode spaces are kept).
std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\v\f";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

Status bad(std::string what) { return invalid_argument("messages" + std::move(what)); }

// "[i]".
std::string at(size_t i) { return str_cat("[", i, "]"); }

// Checks the roles every template shares: known roles, system only first.
Status check_roles(std::span<const ChatMessage> m) {
  if (m.empty()) return bad(": expected at least one message");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      return bad(at(i) + ".role = \"" + r +
                 "\", expected system, user or assistant");
    if (r == "system" && i != 0)
      return bad(at(i) + " is a system message; only the first may be");
  }
  return ok_status();
}

// After an optional leading system message: user, assistant, user, ...
Status check_alternating(std::span<const ChatMessage> m, size_t from) {
  for (size_t i = from; i < m.size(); ++i) {
    const bool want_user = (i - from) % 2 == 0;
    if ((m[i].role == "user") != want_user)
      return bad(at(i) + ".role = \"" + m[i].role +
                 "\"; this template needs user and assistant turns to alternate");
  }
  return ok_status();
}

// Appends template text and message content, remembering where content went.
struct Writer {
  RenderedChat r;
  Writer& raw(std::string_view s) {
    r.text += s;
    return *this;
  }
  Writer& content(std::string_view s) {
    if (!s.empty()) r.content.emplace_back(r.text.size(), r.text.size() + s.size());
    r.text += s;
    return *this;
  }
};

void render_chatml(Writer& w, std::span<const ChatMessage> m, bool gen) {
  if (m[0].role != "system")
    w.raw("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
          "assistant.<|im_end|>\n");
  for (const ChatMessage& msg : m)
    w.raw("<|im_start|>").raw(msg.role).raw("\n").content(msg.content).raw("<|im_end|>\n");
  if (gen) w.raw("<|im_start|>assistant\n");
}

void render_llama3(Writer& w, std::span<const ChatMessage> m, bool gen, const ChatTokens& t) {
  size_t first = 0;
  std::string_view system;
  if (m[0].role == "system") {
    system = trim(m[0].content);
    first = 1;
  }
  w.raw(t.bos).raw("<|start_header_id|>system<|end_header_id|>\n\n"
                   "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
  w.content(system).raw("<|eot_id|>");
  for (size_t i = first; i < m.size(); ++i)
    w.raw("<|start_header_id|>").raw(m[i].role).raw("<|end_header_id|>\n\n")
        .content(trim(m[i].content)).raw("<|eot_id|>");
  if (gen) w.raw("<|start_header_id|>assistant<|end_header_id|>\n\n");
}

void render_gemma(Writer& w, std::span<const ChatMessage> m, bool gen, const ChatTokens& t) {
  w.raw(t.bos);
  for (const ChatMessage& msg : m)
    w.raw("<start_of_turn>").raw(msg.role == "assistant" ? "model" : msg.role).raw("\n")
        .content(trim(msg.content)).raw("<end_of_turn>\n");
  if (gen) w.raw("<start_of_turn>model\n");
}

// The system message goes into the last message when that is a user turn (else it is
// dropped, as the model's template does); there is no generation prompt.
void render_mistral(Writer& w, std::span<const ChatMessage> m, const ChatTokens& t) {
  const bool has_system = m[0].role == "system";
  w.raw(t.bos);
  for (size_t i = has_system ? 1 : 0; i < m.size(); ++i) {
    if (m[i].role == "user") {
      w.raw("[INST]");
      if (has_system && i + 1 == m.size()) w.content(m[0].content).raw("\n\n");
      w.content(m[i].content).raw("[/INST]");
    } else {
      w.content(m[i].content).raw(t.eos);
    }
  }
}

void render_phi3(Writer& w, std::span<const ChatMessage> m, bool gen, const ChatTokens& t) {
  for (const ChatMessage& msg : m) {
    if (msg.role == "system" && msg.content.empty()) continue;
    w.raw("<|").raw(msg.role).raw("|>\n").content(msg.content).raw("<|end|>\n");
  }
  w.raw(gen ? std::string_view("<|assistant|>\n") : std::string_view(t.eos));
}

// No template: one "role: content" line per message, then "assistant: " to generate.
void render_plain(Writer& w, std::span<const ChatMessage> m, bool gen) {
  for (const ChatMessage& msg : m) w.raw(msg.role).raw(": ").content(msg.content).raw("\n");
  if (gen) w.raw("assistant: ");  // so a reply continues the line as its message renders
}

}  // namespace

std::string_view to_string(ChatTemplate t) {
  for (const auto& [v, name] : kNames)
    if (v == t) return name;
  return "unknown";
}

std::optional<ChatTemplate> chat_template_from_name(std::string_view name) {
  for (const auto& [v, n] : kNames)
    if (n == name) return v;
  return std::nullopt;
}

std::optional<ChatTemplate> detect_chat_template(std::string_view text) {
  if (text.find("<|im_start|>") != std::string_view::npos) return ChatTemplate::kChatml;
  if (text.find("<|start_header_id|>") != std::string_view::npos) return ChatTemplate::kLlama3;
  if (text.find("<start_of_turn>") != std::string_view::npos) return ChatTemplate::kGemma;
  if (text.find("[INST]") != std::string_view::npos) return ChatTemplate::kMistral;
  if (text.find("<|user|>") != std::string_view::npos &&
      text.find("<|end|>") != std::string_view::npos)
    return ChatTemplate::kPhi3;
  return std::nullopt;
}

TemplateChoice choose_chat_template(std::string_view name,
                                    const std::optional<std::string>& model_template) {
  std::string known;
  for (const auto& [v, n] : kNames) known += (known.empty() ? "" : ", ") + std::string(n);
  TemplateChoice c;
  if (!name.empty()) {
    c.tmpl = chat_template_from_name(name);
    if (!c.tmpl)
      c.problem =
          "no chat template: chat_template = '" + std::string(name) + "' is not one of " + known;
    return c;
  }
  if (!model_template) {
    c.tmpl = ChatTemplate::kPlain;
    return c;
  }
  c.tmpl = detect_chat_template(*model_template);
  if (!c.tmpl)
    c.problem = "the model's tokenizer.chat_template is not one the server knows; pick one with "
                "chat_template: " + known;
  return c;
}

ChatTokens default_chat_tokens(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::kLlama3: return {"<|begin_of_text|>", "<|eot_id|>"};
    case ChatTemplate::kGemma: return {"<bos>", "<eos>"};
    case ChatTemplate::kMistral: return {"<s>", "</s>"};
    case ChatTemplate::kPhi3: return {"<s>", "<|endoftext|>"};
    case ChatTemplate::kChatml:
    case ChatTemplate::kPlain: break;
  }
  return {};
}

Result<RenderedChat> render_chat_spans(ChatTemplate t, std::span<const ChatMessage> m, bool gen,
                                       const ChatTokens& tokens) {
  KVCACHE_RETURN_IF_ERROR(check_roles(m));
  Writer w;
  switch (t) {
    case ChatTemplate::kChatml: render_chatml(w, m, gen); break;
    case ChatTemplate::kLlama3: render_llama3(w, m, gen, tokens); break;
    case ChatTemplate::kGemma:
      if (m[0].role == "system") return bad("[0]: this model's template has no system role");
      KVCACHE_RETURN_IF_ERROR(check_alternating(m, 0));
      render_gemma(w, m, gen, tokens);
      break;
    case ChatTemplate::kMistral:
      KVCACHE_RETURN_IF_ERROR(check_alternating(m, m[0].role == "system" ? 1 : 0));
      render_mistral(w, m, tokens);
      break;
    case ChatTemplate::kPhi3: render_phi3(w, m, gen, tokens); break;
    case ChatTemplate::kPlain: render_plain(w, m, gen); break;
  }
  return std::move(w.r);
}

Result<std::string> render_chat(ChatTemplate t, std::span<const ChatMessage> m, bool gen,
                                const ChatTokens& tokens) {
  Result<RenderedChat> r = render_chat_spans(t, m, gen, tokens);
  if (!r.ok()) return r.status();
  return std::move(r->text);
}

EncodeOptions chat_prompt_options(std::span<const std::pair<size_t, size_t>> content) {
  EncodeOptions o;
  o.add_special = false;
  o.parse_special = true;
  o.plain = content;
  return o;
}

}  // namespace kvcache::text
