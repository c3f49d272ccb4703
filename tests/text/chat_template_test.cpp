// Chat templates: every built-in formatter against what Jinja renders from the model's real
// template (fixtures), conversations with and without a system message, multi-turn, with the
// generation prompt on and off; detection by markers; the plain default.
#include "text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "jinja_oracle.h"

namespace kvcache::text {
namespace {

using nlohmann::json;
using Conversation = std::vector<ChatMessage>;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture(const std::string& name) { return chat_fixture(name); }

std::vector<Conversation> conversations() {
  return {
      {{"user", "Hello!"}},
      {{"system", "You are terse."}, {"user", "What is 2+2?"}},
      {{"system", "Be kind."}, {"user", "Hi"}, {"assistant", "Hello, how can I help?"},
       {"user", "Tell me a joke."}},
      {{"user", "  padded question \n"}, {"assistant", " padded answer\n\n"}, {"user", "ok"}},
      {{"user", "One"}, {"assistant", "Two"}},
      {{"system", "Only system then user and assistant"}, {"user", "u"}, {"assistant", "a"}},
      {{"user", "caf\xC3\xA9 \xE2\x9C\x93 multi\nline"}},
      {{"user", "a"}, {"user", "b"}},  // not alternating: Gemma and Mistral refuse
  };
}

// Renders every conversation with generation prompt on and off through Jinja.
json render_with_jinja(const std::string& template_file, const ChatTokens& tokens) {
  json cases = json::array();
  for (const Conversation& c : conversations())
    for (bool gen : {true, false}) {
      json msgs = json::array();
      for (const ChatMessage& m : c) msgs.push_back({{"role", m.role}, {"content", m.content}});
      cases.push_back({{"messages", msgs}, {"add_generation_prompt", gen}, {"bos", tokens.bos},
                       {"eos", tokens.eos}});
    }
  return run_jinja(template_file, cases.dump());
}

void expect_matches_jinja(ChatTemplate t, const std::string& file) {
  if (!have_jinja()) GTEST_SKIP() << "/usr/bin/python3 with jinja2 is needed (python3-jinja2)";
  ASSERT_TRUE(std::filesystem::exists(fixture(file))) << fixture(file);
  const ChatTokens tokens = default_chat_tokens(t);
  const json expected = render_with_jinja(fixture(file), tokens);
  ASSERT_TRUE(expected.is_array()) << "the Jinja renderer failed";
  size_t i = 0, rendered = 0;
  for (const Conversation& c : conversations())
    for (bool gen : {true, false}) {
      const json& e = expected.at(i++);
      Result<std::string> got = render_chat(t, c, gen, tokens);
      SCOPED_TRACE("conversation " + std::to_string(i / 2) + " gen " + std::to_string(gen));
      if (e.contains("error")) {
        ASSERT_FALSE(got.ok()) << "Jinja refused (" << e["error"] << ") but we rendered:\n" << *got;
        EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
        continue;
      }
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(*got, e.at("text").get<std::string>());
      ++rendered;
    }
  EXPECT_GE(rendered, 8u);  // most conversations are ones the template accepts
}

TEST(ChatTemplate, ChatmlMatchesQwenTemplate) {
  expect_matches_jinja(ChatTemplate::kChatml, "Qwen-Qwen2.5-7B-Instruct.jinja");
}
TEST(ChatTemplate, Llama3MatchesLlama31Template) {
  expect_matches_jinja(ChatTemplate::kLlama3, "meta-llama-Llama-3.1-8B-Instruct.jinja");
}
TEST(ChatTemplate, GemmaMatchesGemma2Template) {
  expect_matches_jinja(ChatTemplate::kGemma, "google-gemma-2-2b-it.jinja");
}
TEST(ChatTemplate, MistralMatchesMistralNemoTemplate) {
  expect_matches_jinja(ChatTemplate::kMistral, "mistralai-Mistral-Nemo-Instruct-2407.jinja");
}
TEST(ChatTemplate, Phi3MatchesPhi35Template) {
  expect_matches_jinja(ChatTemplate::kPhi3, "microsoft-Phi-3.5-mini-instruct.jinja");
}

TEST(ChatTemplate, DetectsEveryFixtureByItsMarkers) {
  const std::pair<const char*, ChatTemplate> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ChatTemplate::kChatml},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ChatTemplate::kLlama3},
      {"google-gemma-2-2b-it.jinja", ChatTemplate::kGemma},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ChatTemplate::kMistral},
      {"microsoft-Phi-3.5-mini-instruct.jinja", ChatTemplate::kPhi3},
  };
  for (const auto& [file, want] : cases) {
    const std::string text = read_file(fixture(file));
    ASSERT_FALSE(text.empty()) << fixture(file);
    EXPECT_EQ(detect_chat_template(text), want) << file;
  }
  EXPECT_EQ(detect_chat_template("{{ messages }}"), std::nullopt);
}

TEST(ChatTemplate, NamesRoundTripAndUnknownIsRefused) {
  for (auto t : {ChatTemplate::kPlain, ChatTemplate::kChatml, ChatTemplate::kLlama3,
                 ChatTemplate::kGemma, ChatTemplate::kMistral, ChatTemplate::kPhi3,
                 ChatTemplate::kHarmony})
    EXPECT_EQ(chat_template_from_name(to_string(t)), t);
  EXPECT_EQ(chat_template_from_name("jinja"), std::nullopt);
}

TEST(ChatTemplate, ChoiceTakesTheFlagThenTheModelThenPlain) {
  EXPECT_EQ(choose_chat_template("gemma", "<|im_start|>").tmpl, ChatTemplate::kGemma);
  EXPECT_EQ(choose_chat_template("", "{{ '<|im_start|>' }}").tmpl, ChatTemplate::kChatml);
  EXPECT_EQ(choose_chat_template("", std::nullopt).tmpl, ChatTemplate::kPlain);
  const TemplateChoice bad_name = choose_chat_template("jinja", std::nullopt);
  EXPECT_EQ(bad_name.tmpl, std::nullopt);
  EXPECT_EQ(bad_name.problem, "no chat template: chat_template = 'jinja' is not one of plain, "
                              "chatml, llama3, gemma, mistral, phi3, harmony");
  const TemplateChoice unknown = choose_chat_template("", "{{ messages }}");
  EXPECT_EQ(unknown.tmpl, std::nullopt);
  EXPECT_EQ(unknown.problem,
            "the model's tokenizer.chat_template is not one the server knows; pick one with "
            "chat_template: plain, chatml, llama3, gemma, mistral, phi3, harmony");
}

TEST(ChatTemplate, PlainWritesRoleLinesThenAssistantPrompt) {
  const Conversation c = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  Result<std::string> on = render_chat(ChatTemplate::kPlain, c, true, {});
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(*on, "system: S\nuser: U\nassistant: A\nuser: V\nassistant: ");
  Result<std::string> off = render_chat(ChatTemplate::kPlain, c, false, {});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(*off, "system: S\nuser: U\nassistant: A\nuser: V\n");
}

TEST(ChatTemplate, RefusesBadConversationsNamingMessages) {
  const Conversation empty;
  EXPECT_EQ(render_chat(ChatTemplate::kChatml, empty, true, {}).status().code(),
            StatusCode::kInvalidArgument);
  const Conversation late_system = {{"user", "u"}, {"system", "s"}};
  Result<std::string> r = render_chat(ChatTemplate::kChatml, late_system, true, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "messages[1] is a system message; only the first may be");
  const Conversation fn = {{"function", "x"}};
  Result<std::string> t = render_chat(ChatTemplate::kPlain, fn, true, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "messages[0].role = \"function\", expected system, user, assistant or tool");
  const Conversation sys = {{"system", "s"}, {"user", "u"}};
  EXPECT_EQ(render_chat(ChatTemplate::kGemma, sys, true, default_chat_tokens(ChatTemplate::kGemma))
                .status().message(),
            "messages[0]: this model's template has no system role");
}

}  // namespace
}  // namespace kvcache::text
