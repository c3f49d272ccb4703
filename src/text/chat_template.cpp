#include "text/chat_template.h"

#include <array>
#include <utility>

#include "core/str_cat.h"
#include "text/chat_writer.h"

namespace kvcache::text {
namespace {

constexpr std::array<std::pair<ChatTemplate, std::string_view>, 7> kNames = {{
    {ChatTemplate::kPlain, "plain"},
    {ChatTemplate::kChatml, "chatml"},
    {ChatTemplate::kLlama3, "llama3"},
    {ChatTemplate::kGemma, "gemma"},
    {ChatTemplate::kMistral, "mistral"},
    {ChatTemplate::kPhi3, "phi3"},
    {ChatTemplate::kHarmony, "harmony"},
}};

// Checks the roles every template shares: known roles, system only first.
Status check_roles(std::span<const ChatMessage> m) {
  if (m.empty()) return chat_bad(": expected at least one message");
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return chat_bad(chat_at(i) + ".role = \"" + r +
                      "\", expected system, user, assistant or tool");
    if (r == "system" && i != 0)
      return chat_bad(chat_at(i) + " is a system message; only the first may be");
  }
  return ok_status();
}

// After an optional leading system message: user, assistant, user, ...
Status check_alternating(std::span<const ChatMessage> m, size_t from) {
  for (size_t i = from; i < m.size(); ++i) {
    const bool want_user = (i - from) % 2 == 0;
    if ((m[i].role == "user") != want_user)
      return chat_bad(chat_at(i) + ".role = \"" + m[i].role +
                      "\"; this template needs user and assistant turns to alternate");
  }
  return ok_status();
}

void render_gemma(ChatWriter& w, std::span<const ChatMessage> m, bool gen, const ChatTokens& t) {
  w.raw(t.bos);
  for (const ChatMessage& msg : m)
    w.raw("<start_of_turn>").raw(msg.role == "assistant" ? "model" : msg.role).raw("\n")
        .content(chat_trim(msg.content)).raw("<end_of_turn>\n");
  if (gen) w.raw("<start_of_turn>model\n");
}

void render_phi3(ChatWriter& w, std::span<const ChatMessage> m, bool gen, const ChatTokens& t) {
  for (const ChatMessage& msg : m) {
    if (msg.role == "system" && msg.content.empty()) continue;
    w.raw("<|").raw(msg.role).raw("|>\n").content(msg.content).raw("<|end|>\n");
  }
  w.raw(gen ? std::string_view("<|assistant|>\n") : std::string_view(t.eos));
}

// No template: one "role: content" line per message, then "assistant: " to generate.
void render_plain(ChatWriter& w, std::span<const ChatMessage> m, bool gen) {
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
  if (text.find("<|start|>") != std::string_view::npos &&
      text.find("<|message|>") != std::string_view::npos)
    return ChatTemplate::kHarmony;
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
    case ChatTemplate::kHarmony: return {"", "<|return|>"};
    case ChatTemplate::kChatml:
    case ChatTemplate::kPlain: break;
  }
  return {};
}

Result<RenderedChat> render_chat_spans(ChatTemplate t, std::span<const ChatMessage> m, bool gen,
                                       const ChatTokens& tokens,
                                       std::span<const std::string> tools,
                                       const ChatContext& context) {
  KVCACHE_RETURN_IF_ERROR(check_roles(m));
  ChatWriter w;
  switch (t) {
    case ChatTemplate::kChatml: KVCACHE_RETURN_IF_ERROR(render_chatml(w, m, gen, tools)); break;
    case ChatTemplate::kLlama3:
      KVCACHE_RETURN_IF_ERROR(render_llama3(w, m, gen, tokens, tools));
      break;
    case ChatTemplate::kMistral:
      KVCACHE_RETURN_IF_ERROR(render_mistral(w, m, tokens, tools));
      break;
    case ChatTemplate::kHarmony:
      KVCACHE_RETURN_IF_ERROR(render_harmony(w, m, gen, tools, context));
      break;
    case ChatTemplate::kGemma:
    case ChatTemplate::kPhi3:
    case ChatTemplate::kPlain: {
      // No tool syntax in these templates: the generic form, then the family's turns.
      Result<std::vector<ChatMessage>> folded =
          fold_tools_generic(m, tools, t != ChatTemplate::kGemma);
      if (!folded.ok()) return folded.status();
      const std::span<const ChatMessage> f = *folded;
      if (t == ChatTemplate::kGemma) {
        if (f[0].role == "system")
          return chat_bad("[0]: this model's template has no system role");
        KVCACHE_RETURN_IF_ERROR(check_alternating(f, 0));
        render_gemma(w, f, gen, tokens);
      } else if (t == ChatTemplate::kPhi3) {
        render_phi3(w, f, gen, tokens);
      } else {
        render_plain(w, f, gen);
      }
      break;
    }
  }
  return std::move(w.r);
}

Result<std::string> render_chat(ChatTemplate t, std::span<const ChatMessage> m, bool gen,
                                const ChatTokens& tokens, std::span<const std::string> tools,
                                const ChatContext& context) {
  Result<RenderedChat> r = render_chat_spans(t, m, gen, tokens, tools, context);
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
