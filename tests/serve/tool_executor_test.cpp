// Tool calls in the batching executor on the embedded tiny model (byte tokens; its text is
// nonsense, so the tests check structure): a forced call (tool_choice required: the prompt
// ends with the marker, the grammar covers the rest) always parses into calls of the offered
// tools whose arguments are documents of their schemas, for every completion of a sampled
// n = 4; a lazy grammar (tool_choice auto) switches on at its trigger text or trigger token
// and makes the rest a call, and stays off when the trigger cannot appear. Layer: tests.
#include <gtest/gtest.h>

#include "serve_test_util.h"
#include "text/grammar_matcher.h"
#include "text/json_schema.h"
#include "text/tool_calls.h"

namespace kvcache::serve::testing {
namespace {

constexpr const char* kWeather =
    R"({"type":"object","properties":{"city":{"enum":["Oslo","Rome","Lima"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false})";
constexpr const char* kNote =
    R"({"type":"object","properties":{"text":{"type":"string","maxLength":12},"urgent":{"type":"boolean"}},"required":["text"],"additionalProperties":false})";

struct Tools {
  std::vector<text::ToolGrammarSpec> specs;
  Tools() {
    for (auto [name, schema] : {std::pair{"get_weather", kWeather}, std::pair{"note", kNote}}) {
      auto g = text::compile_json_schema(schema);
      EXPECT_TRUE(g.ok()) << g.status().to_string();
      specs.push_back({name, *g});
    }
  }
  // Every call names an offered tool and its arguments are a document of that tool's schema.
  void expect_valid(const text::ParsedAnswer& a, const std::string& text) const {
    EXPECT_FALSE(a.calls.empty()) << text;
    for (const text::ParsedToolCall& c : a.calls) {
      const text::ToolGrammarSpec* spec = nullptr;
      for (const auto& s : specs)
        if (s.name == c.name) spec = &s;
      ASSERT_NE(spec, nullptr) << c.name;
      text::GrammarMatcher m(spec->arguments);
      const text::GrammarState st = m.advance(m.start(), c.arguments);
      EXPECT_TRUE(st != text::kDeadState && m.complete(st)) << c.arguments;
    }
  }
};

TEST(ExecutorTools, RequiredCallAlwaysParsesAndValidates) {
  ExecutorOptions o;
  o.max_sessions = 4;
  auto ex = make(o);
  ASSERT_NE(ex, nullptr);
  const Tools tools;
  // One call: the byte vocabulary has no end-of-generation token, so only a grammar that
  // ends (no parallel calls) stops the toy model; parallel documents are in tool_calls_test.
  // Harmony's call header (its framing tokens are plain bytes here) parses the same way.
  for (auto [syntax, seed] : {std::pair{text::ToolSyntax::kHermes, uint64_t{3}},
                              std::pair{text::ToolSyntax::kHermes, uint64_t{11}},
                              std::pair{text::ToolSyntax::kHarmony, uint64_t{5}}}) {
    auto g = text::tool_call_grammar(syntax, tools.specs, false, false);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    GenerateParams p;
    p.max_new_tokens = 150;
    p.n = 4;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = seed;
    p.grammar = *g;
    const std::string prefix(text::forced_call_prefix(syntax));
    const int64_t id = *ex->submit(ids("Call a tool.\n" + prefix), p);
    auto results = drain(*ex);
    ASSERT_EQ(results.at(id).completions.size(), 4u);
    for (const Completion& c : results.at(id).completions) {
      EXPECT_EQ(c.finish, Finish::kStop) << c.text;
      const text::ParsedAnswer a = text::parse_tool_calls(syntax, prefix + c.text);
      tools.expect_valid(a, c.text);
      EXPECT_EQ(a.calls.size(), 1u);
      EXPECT_EQ(a.content, "");
    }
  }
}

TEST(ExecutorTools, LazyGrammarSwitchesOnAtItsTriggerText) {
  auto ex = make(ExecutorOptions{});
  ASSERT_NE(ex, nullptr);
  const Tools tools;
  auto g = text::tool_call_grammar(text::ToolSyntax::kHermes, tools.specs, false, true);
  ASSERT_TRUE(g.ok());
  GenerateParams p;
  p.max_new_tokens = 150;
  p.grammar = *g;
  p.grammar_trigger = "<";  // the first byte of the marker: '<' is forced below
  p.logit_bias = {{'<', 100.0f}};
  const int64_t id = *ex->submit(ids("Answer: "), p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions.at(0);
  EXPECT_EQ(c.finish, Finish::kStop) << c.text;
  ASSERT_EQ(c.text.rfind("<tool_call>\n{\"name\": \"", 0), 0u) << c.text;
  tools.expect_valid(text::parse_tool_calls(text::ToolSyntax::kHermes, c.text), c.text);
}

TEST(ExecutorTools, TriggerTokenWritesTheMarkerAndSwitchesOn) {
  auto ex = make(ExecutorOptions{});
  ASSERT_NE(ex, nullptr);
  const Tools tools;
  auto g = text::tool_call_grammar(text::ToolSyntax::kMistral, tools.specs, false, true);
  ASSERT_TRUE(g.ok());
  GenerateParams p;
  p.max_new_tokens = 150;
  p.grammar = *g;
  p.grammar_trigger = "[TOOL_CALLS]";
  p.grammar_trigger_tokens = {7};  // byte 7 stands for a control token here
  p.logit_bias = {{7, 100.0f}};
  const int64_t id = *ex->submit(ids("Answer: "), p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions.at(0);
  EXPECT_EQ(c.finish, Finish::kStop) << c.text;
  ASSERT_EQ(c.text.rfind("\x07[TOOL_CALLS][{\"name\": \"", 0), 0u) << c.text;
  const text::ParsedAnswer a = text::parse_tool_calls(text::ToolSyntax::kMistral, c.text);
  tools.expect_valid(a, c.text);
  EXPECT_EQ(a.content, "\x07");
}

TEST(ExecutorTools, TriggerAtStartThatCannotAppearLeavesFreeText) {
  auto ex = make(ExecutorOptions{});
  ASSERT_NE(ex, nullptr);
  const Tools tools;
  auto g = text::tool_call_grammar(text::ToolSyntax::kLlama3, tools.specs, false, true);
  ASSERT_TRUE(g.ok());
  GenerateParams p;
  p.max_new_tokens = 12;
  p.grammar = *g;
  p.grammar_trigger = "{\"name\"";
  p.grammar_trigger_at_start = true;
  p.logit_bias = {{'{', -100.0f}, {'a', 100.0f}};  // starts with 'a': never a call
  const int64_t id = *ex->submit(ids("Answer: "), p);
  auto results = drain(*ex);
  const Completion& c = results.at(id).completions.at(0);
  EXPECT_EQ(c.finish, Finish::kLength);
  EXPECT_EQ(c.text, std::string(12, 'a'));  // free text: the bias alone decides
}

TEST(ExecutorTools, RefusesATriggerWithoutGrammarAndBadTriggerTokens) {
  auto ex = make(ExecutorOptions{});
  ASSERT_NE(ex, nullptr);
  GenerateParams p;
  p.grammar_trigger = "<tool_call>";
  auto r = ex->submit(ids("x"), p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "request: grammar_trigger without a grammar");
  const Tools tools;
  p.grammar = *text::tool_call_grammar(text::ToolSyntax::kHermes, tools.specs, true, true);
  p.grammar_trigger_tokens = {256};
  r = ex->submit(ids("x"), p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "request: grammar_trigger_tokens holds 256, expected a token id in [0, 256)");
}

}  // namespace
}  // namespace kvcache::serve::testing
