// Tool calls: parsing each family's answers (calls, content before them, parallel calls, and
// malformed answers returned whole as content), and the call grammar: it accepts exactly the
// family's shape with a tool's name and arguments its schema allows.
#include "text/tool_calls.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "text/grammar_matcher.h"
#include "text/json_schema.h"

namespace kvcache::text {
namespace {

TEST(ToolCalls, HermesAnswerSplitsIntoContentAndCalls) {
  const ParsedAnswer a = parse_tool_calls(
      ToolSyntax::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"b\": 1, \"a\": [2]}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"put\", \"arguments\": {}}\n</tool_call>\n");
  EXPECT_EQ(a.content, "Let me look.");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get");
  EXPECT_EQ(a.calls[0].arguments, "{\"b\":1,\"a\":[2]}");  // compact, the model's key order
  EXPECT_EQ(a.calls[1].name, "put");
  EXPECT_EQ(a.calls[1].arguments, "{}");
}

TEST(ToolCalls, LlamaAnswerIsOneBareObject) {
  const ParsedAnswer a = parse_tool_calls(
      ToolSyntax::kLlama3, " {\"name\": \"get\", \"parameters\": {\"city\": \"Oslo\"}}");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_TRUE(parse_tool_calls(ToolSyntax::kLlama3, "The answer is {1}").calls.empty());
}

TEST(ToolCalls, MistralAnswerIsAListAfterTheMarker) {
  const ParsedAnswer a = parse_tool_calls(
      ToolSyntax::kMistral,
      "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
      "\"arguments\": {}, \"id\": \"abcdefghi\"}]");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[1].name, "b");
}

TEST(ToolCalls, MalformedAnswersStayContent) {
  const std::pair<ToolSyntax, std::string> cases[] = {
      {ToolSyntax::kHermes, "plain prose"},
      {ToolSyntax::kHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1"},  // cut
      {ToolSyntax::kHermes, "<tool_call>\n{\"name\": \"a\"}\n</tool_call>"},  // no arguments
      {ToolSyntax::kHermes, "<tool_call>\n{\"name\": 3, \"arguments\": {}}\n</tool_call>"},
      {ToolSyntax::kHermes, "<tool_call>{\"name\": \"a\", \"arguments\": []}</tool_call>"},
      {ToolSyntax::kHermes,
       "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> and then more text"},
      {ToolSyntax::kHermes, "<tool_call>not json</tool_call>"},
      {ToolSyntax::kLlama3, "{\"name\": \"a\", \"parameters\": {}} trailing"},
      {ToolSyntax::kLlama3, "{\"name\": \"\", \"parameters\": {}}"},
      {ToolSyntax::kMistral, "[TOOL_CALLS][]"},
      {ToolSyntax::kMistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}"},
      {ToolSyntax::kMistral, "[TOOL_CALLS]{\"name\": \"a\", \"arguments\": {}}"},
      {ToolSyntax::kMistral, std::string("[TOOL_CALLS][\xff]")},
  };
  for (const auto& [s, text] : cases) {
    const ParsedAnswer a = parse_tool_calls(s, text);
    EXPECT_TRUE(a.calls.empty()) << text;
    EXPECT_EQ(a.content, text);
  }
}

// Whether the grammar accepts `doc` as a whole document.
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  GrammarMatcher m(g);
  const GrammarState s = m.advance(m.start(), doc);
  return s != kDeadState && m.complete(s);
}

std::vector<ToolGrammarSpec> two_tools() {
  auto weather = compile_json_schema(
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false})");
  auto sum = compile_json_schema(
      R"({"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":9}},"required":["n"],"additionalProperties":false})");
  EXPECT_TRUE(weather.ok() && sum.ok());
  return {{"get_weather", *weather}, {"sum", *sum}};
}

TEST(ToolCalls, HermesGrammarTakesOneOrMoreCallsOfTheTools) {
  const std::vector<ToolGrammarSpec> tools = two_tools();
  auto g = tool_call_grammar(ToolSyntax::kHermes, tools, /*parallel=*/true, true);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const std::string one =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n</tool_call>";
  const std::string two = "<tool_call>\n{\"name\": \"sum\", \"arguments\": {\"n\":3}}\n</tool_call>";
  EXPECT_TRUE(accepts(*g, one));
  EXPECT_TRUE(accepts(*g, one + "\n" + two));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n{\"name\": \"sum\", \"arguments\": {\"n\":10}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*g, "<tool_call>\n{\"name\": \"sum\", \"arguments\": {\"city\":\"x\"}}\n</tool_call>"));
  auto single = tool_call_grammar(ToolSyntax::kHermes, tools, /*parallel=*/false, false);
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(accepts(*single, one));  // the prompt ends with the marker: not repeated
  EXPECT_TRUE(accepts(*single, one.substr(12)));
  EXPECT_FALSE(accepts(*single, one.substr(12) + "\n" + two));
  // Every document parses back into its calls.
  const ParsedAnswer a = parse_tool_calls(ToolSyntax::kHermes, one + "\n" + two);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[1].arguments, "{\"n\":3}");
}

TEST(ToolCalls, LlamaAndMistralGrammarsWriteTheirShapes) {
  const std::vector<ToolGrammarSpec> tools = two_tools();
  auto llama = tool_call_grammar(ToolSyntax::kLlama3, tools, true, true);
  ASSERT_TRUE(llama.ok());
  EXPECT_TRUE(accepts(*llama, "{\"name\": \"sum\", \"parameters\": {\"n\":0}}"));
  EXPECT_FALSE(accepts(*llama, "{\"name\": \"sum\", \"arguments\": {\"n\":0}}"));
  auto mistral = tool_call_grammar(ToolSyntax::kMistral, tools, true, true);
  ASSERT_TRUE(mistral.ok());
  EXPECT_TRUE(accepts(*mistral, "[TOOL_CALLS][{\"name\": \"sum\", \"arguments\": {\"n\":0}}, "
                                "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"\"}}]"));
  auto forced = tool_call_grammar(ToolSyntax::kMistral, tools, false, false);
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(accepts(*forced, "[{\"name\": \"sum\", \"arguments\": {\"n\":0}}]"));
}

TEST(ToolCalls, GrammarRefusesNoToolsAndOddNames) {
  EXPECT_EQ(tool_call_grammar(ToolSyntax::kHermes, {}, true, true).status().code(),
            StatusCode::kInvalidArgument);
  std::vector<ToolGrammarSpec> tools = two_tools();
  tools[0].name = "bad name\"";
  auto g = tool_call_grammar(ToolSyntax::kHermes, tools, true, true);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(),
            "tool call grammar: name 'bad name\"', expected letters, digits, _ and -");
}

}  // namespace
}  // namespace kvcache::text
