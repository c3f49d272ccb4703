// Chat templates with tools: the Qwen2.5 (ChatML), Llama 3.1 and Mistral Nemo formatters
// against what Jinja renders from the real templates given tools, assistant tool calls and
// tool results (byte for byte, refusals included); the generic form of the other families
// (Gemma, Phi-3) against Jinja rendering the folded conversation, and the fold itself.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "jinja_oracle.h"
#include "text/chat_template.h"

namespace kvcache::text {
namespace {

using nlohmann::ordered_json;
using Conversation = std::vector<ChatMessage>;

// Description after parameters: Mistral writes the function's keys in the client's order;
// <, &, ' and non-ASCII: Jinja's tojson escapes them.
const std::vector<std::string> kTools = {
    R"({"type":"function","function":{"name":"get_weather","description":"Weather <now> & 'then' in a city, caf\u00e9 \u2603","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city"]}}})",
    R"({"type":"function","function":{"name":"sum","parameters":{"type":"object","properties":{"xs":{"type":"array","items":{"type":"number"}}}},"description":"Adds numbers."}})",
};

ChatMessage calls(std::vector<ToolCall> c, std::string content = "") {
  ChatMessage m("assistant", std::move(content));
  m.tool_calls = std::move(c);
  return m;
}
ChatMessage result(std::string id, std::string content) {
  ChatMessage m("tool", std::move(content));
  m.tool_call_id = std::move(id);
  return m;
}

const ToolCall kWeather{"abc123XYZ", "get_weather", R"({"city":"Paris <FR>","days":2})"};
const ToolCall kSum{"Q9w8e7r6t", "sum", R"({"xs":[1,2.5]})"};

struct Case {
  Conversation messages;
  bool tools;
};

std::vector<Case> cases() {
  return {
      {{{"user", "Weather in Paris?"}}, true},
      {{{"system", "  Be brief. "}, {"user", "Weather in Paris?"}}, true},
      {{{"user", "Weather?"}, calls({kWeather}), result("abc123XYZ", "{\"temp\": 21}")}, true},
      {{{"system", "S"}, {"user", "Both?"}, calls({kWeather}, "Checking."),
        result("abc123XYZ", "sunny"), {"assistant", "It is sunny."}, {"user", "Thanks"}},
       true},
      // Two calls in one turn and their two results (Llama 3.1 refuses it).
      {{{"user", "Weather and a sum"}, calls({kWeather, kSum}), result("abc123XYZ", "rain"),
        result("Q9w8e7r6t", "3.5")},
       true},
      // History with calls but no tools offered now.
      {{{"user", "Weather?"}, calls({kWeather}), result("abc123XYZ", "cold"),
        {"assistant", "Cold."}, {"user", "ok"}},
       false},
      // Mistral gives the tools to every user turn equal to the last one.
      {{{"user", "same"}, {"assistant", "a"}, {"user", "same"}}, true},
      // Refused by Mistral: a call id that is not 9 characters.
      {{{"user", "x"}, calls({{"call_1", "sum", "{}"}}), result("call_1", "0")}, true},
      // Refused by Llama 3.1: tools and no message to put them in.
      {{{"system", "only"}}, true},
  };
}

ordered_json message_json(const ChatMessage& m) {
  ordered_json j{{"role", m.role}};
  j["content"] = m.content.empty() && !m.tool_calls.empty() ? ordered_json() : ordered_json(m.content);
  if (!m.tool_calls.empty()) {
    j["tool_calls"] = ordered_json::array();
    for (const ToolCall& c : m.tool_calls)
      j["tool_calls"].push_back(
          {{"id", c.id},
           {"type", "function"},
           {"function", {{"name", c.name}, {"arguments", ordered_json::parse(c.arguments)}}}});
  }
  if (m.role == "tool") j["tool_call_id"] = m.tool_call_id;
  return j;
}

ordered_json case_json(const Conversation& c, bool tools, bool gen, const ChatTokens& t) {
  ordered_json msgs = ordered_json::array();
  for (const ChatMessage& m : c) msgs.push_back(message_json(m));
  ordered_json j{{"messages", msgs}, {"add_generation_prompt", gen}, {"bos", t.bos},
                 {"eos", t.eos}};
  if (tools) {
    j["tools"] = ordered_json::array();
    for (const std::string& s : kTools) j["tools"].push_back(ordered_json::parse(s));
  }
  return j;
}

// Every case, generation prompt on and off, against Jinja; returns how many rendered.
size_t expect_tools_match_jinja(ChatTemplate t, const std::string& file) {
  const ChatTokens tokens = default_chat_tokens(t);
  ordered_json all = ordered_json::array();
  for (const Case& c : cases())
    for (bool gen : {true, false}) all.push_back(case_json(c.messages, c.tools, gen, tokens));
  const nlohmann::json expected = run_jinja(chat_fixture(file), all.dump());
  EXPECT_TRUE(expected.is_array()) << "the Jinja renderer failed";
  if (!expected.is_array()) return 0;
  size_t i = 0, rendered = 0;
  for (const Case& c : cases())
    for (bool gen : {true, false}) {
      const nlohmann::json& e = expected.at(i++);
      const std::span<const std::string> tools =
          c.tools ? std::span<const std::string>(kTools) : std::span<const std::string>();
      Result<std::string> got = render_chat(t, c.messages, gen, tokens, tools);
      SCOPED_TRACE("case " + std::to_string((i - 1) / 2) + " gen " + std::to_string(gen));
      if (e.contains("error")) {
        EXPECT_FALSE(got.ok()) << "Jinja refused (" << e["error"] << ") but we rendered:\n"
                               << *got;
        if (!got.ok()) {
          EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
        }
        continue;
      }
      EXPECT_TRUE(got.ok()) << got.status().to_string();
      if (!got.ok()) continue;
      EXPECT_EQ(*got, e.at("text").get<std::string>());
      ++rendered;
    }
  return rendered;
}

#define SKIP_WITHOUT_JINJA() \
  if (!have_jinja()) GTEST_SKIP() << "/usr/bin/python3 with jinja2 is needed (python3-jinja2)"

TEST(ChatTools, QwenToolsCallsAndResultsMatchTheTemplate) {
  SKIP_WITHOUT_JINJA();
  EXPECT_EQ(expect_tools_match_jinja(ChatTemplate::kChatml, "Qwen-Qwen2.5-7B-Instruct.jinja"),
            18u);  // every case, both ways
}

TEST(ChatTools, Llama31ToolsCallsAndIpythonResultsMatchTheTemplate) {
  SKIP_WITHOUT_JINJA();
  // Refused: two calls in one turn (case 4), no message for the tools (case 8).
  EXPECT_EQ(expect_tools_match_jinja(ChatTemplate::kLlama3,
                                     "meta-llama-Llama-3.1-8B-Instruct.jinja"),
            14u);
}

TEST(ChatTools, MistralAvailableToolsCallsAndResultsMatchTheTemplate) {
  SKIP_WITHOUT_JINJA();
  // Refused: a 6-character call id (case 7). A system message alone renders (as <s>).
  EXPECT_EQ(expect_tools_match_jinja(ChatTemplate::kMistral,
                                     "mistralai-Mistral-Nemo-Instruct-2407.jinja"),
            16u);
}

// The generic form: Jinja renders the folded conversation exactly as the formatter does.
void expect_generic_matches(ChatTemplate t, const std::string& file, bool system_role) {
  const ChatTokens tokens = default_chat_tokens(t);
  ordered_json all = ordered_json::array();
  std::vector<std::pair<Conversation, bool>> used;
  for (const Case& c : cases()) {
    Result<std::vector<ChatMessage>> folded =
        fold_tools_generic(c.messages, c.tools ? kTools : std::vector<std::string>{}, system_role);
    ASSERT_TRUE(folded.ok()) << folded.status().to_string();
    for (const ChatMessage& m : *folded) ASSERT_TRUE(m.tool_calls.empty()) << m.content;
    all.push_back(case_json(*folded, false, true, tokens));
    used.emplace_back(c.messages, c.tools);
  }
  const nlohmann::json expected = run_jinja(chat_fixture(file), all.dump());
  ASSERT_TRUE(expected.is_array()) << "the Jinja renderer failed";
  size_t rendered = 0;
  for (size_t i = 0; i < used.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    Result<std::string> got =
        render_chat(t, used[i].first, true, tokens,
                    used[i].second ? std::span<const std::string>(kTools)
                                   : std::span<const std::string>());
    if (expected[i].contains("error")) {
      EXPECT_FALSE(got.ok());
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, expected[i].at("text").get<std::string>());
    ++rendered;
  }
  EXPECT_GE(rendered, 5u);
}

TEST(ChatTools, GemmaGetsTheGenericFormInItsFirstUserTurn) {
  SKIP_WITHOUT_JINJA();
  expect_generic_matches(ChatTemplate::kGemma, "google-gemma-2-2b-it.jinja", false);
}

TEST(ChatTools, Phi3GetsTheGenericFormInItsSystemTurn) {
  SKIP_WITHOUT_JINJA();
  expect_generic_matches(ChatTemplate::kPhi3, "microsoft-Phi-3.5-mini-instruct.jinja", true);
}

TEST(ChatTools, GenericFoldWritesCallsAndJoinsResults) {
  const Conversation c = {{"user", "Q"}, calls({kWeather, kSum}, "Let me see."),
                          result("abc123XYZ", "rain"), result("Q9w8e7r6t", "3.5")};
  Result<std::vector<ChatMessage>> f = fold_tools_generic(c, {}, true);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 3u);
  EXPECT_EQ((*f)[1].role, "assistant");
  EXPECT_EQ((*f)[1].content,
            "Let me see.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
            "\"Paris \\u003cFR\\u003e\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": "
            "\"sum\", \"arguments\": {\"xs\": [1, 2.5]}}\n</tool_call>");
  EXPECT_EQ((*f)[2].role, "user");
  EXPECT_EQ((*f)[2].content,
            "<tool_response>\nrain\n</tool_response>\n<tool_response>\n3.5\n</tool_response>");
  // Tools: a system message of their own when there is none.
  Result<std::vector<ChatMessage>> t = fold_tools_generic(c, kTools, true);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 4u);
  EXPECT_EQ((*t)[0].role, "system");
  EXPECT_EQ((*t)[0].content.rfind("# Tools\n\nYou may call one or more functions", 0), 0u);
  EXPECT_NE((*t)[0].content.find("\n{\"function\": {\"description\": \"Adds numbers.\", \"name\": "
                                 "\"sum\""),
            std::string::npos);
}

TEST(ChatTools, ToolThatIsNotAnObjectIsRefusedNamingIt) {
  const Conversation c = {{"user", "Q"}};
  const std::vector<std::string> bad = {kTools[0], "[1]"};
  Result<std::string> r = render_chat(ChatTemplate::kChatml, c, true, {}, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "tools[1]: expected {\"type\": \"function\", \"function\": {...}}");
}

}  // namespace
}  // namespace kvcache::text
