// Tools on the OpenAI wire: tools / tool_choice / parallel_tool_calls and their 400s naming
// the field, conversations with tool calls and results, the grammar plan per family, answers
// parsed into calls (content null, finish_reason tool_calls), streamed as delta.tool_calls
// chunks, and call ids.
#include <set>

#include <gtest/gtest.h>

#include "server/api.h"
#include "text/grammar_matcher.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

const ApiLimits kLimits{/*vocab=*/256, /*max_sessions=*/4, /*max_session_tokens=*/256};

constexpr const char* kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
      {"type":"function","function":{"name":"ping"}}])";

std::string chat_body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"x"}],)" + extra + "}";
}

ApiError expect_error(const std::string& body) {
  ApiRequest r;
  std::optional<ApiError> e = parse_request(body, true, kLimits, r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(ApiTools, ToolsAndChoicesAreRead) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(chat_body(kTools), true, kLimits, r));
  EXPECT_EQ(r.tools.choice, ToolChoice::kAuto);  // the default with tools
  ASSERT_EQ(r.tools.specs.size(), 2u);
  EXPECT_EQ(r.tools.specs[1].name, "ping");
  EXPECT_TRUE(r.tools.parallel);
  // The client's key order is kept (Mistral renders it).
  EXPECT_EQ(r.tools.json[0].rfind(R"({"type":"function","function":{"name":"get_weather",)"
                                  R"("description":"d","parameters":{"type":"object",)", 0),
            0u);
  ASSERT_FALSE(parse_request(chat_body(std::string(kTools) +
                                       R"(,"tool_choice":{"type":"function","function":{"name":"ping"}},
                                       "parallel_tool_calls":false)"),
                             true, kLimits, r));
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "ping");
  EXPECT_FALSE(r.tools.parallel);
  for (auto [choice, want] : {std::pair{"\"none\"", ToolChoice::kNone},
                              std::pair{"\"required\"", ToolChoice::kRequired}}) {
    ASSERT_FALSE(parse_request(chat_body(std::string(kTools) + ",\"tool_choice\":" + choice), true,
                               kLimits, r));
    EXPECT_EQ(r.tools.choice, want);
  }
  ASSERT_FALSE(parse_request(chat_body(R"("tool_choice":"none","tools":[])"), true, kLimits, r));
  EXPECT_FALSE(r.tools.active());
}

TEST(ApiTools, BadToolFieldsAreRefusedNamingThem) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("tools":[],"tool_choice":5)", "tool_choice"},
      {std::string(kTools) + R"(,"tool_choice":"bogus")", "tool_choice"},
      {std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})",
       "tool_choice.function.name"},
      {std::string(kTools) + R"(,"tool_choice":{"type":"other"})", "tool_choice"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}])",
       "tools[1].function.name"},
      {R"("tools":[{"type":"retrieval"}])", "tools[0].type"},
      {R"("tools":[{"type":"function","function":{"name":"has space"}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"a","extra":1}}])", "tools[0].function.extra"},
      {R"("tools":{"a":1})", "tools"},
      {std::string(kTools) + R"(,"parallel_tool_calls":"yes")", "parallel_tool_calls"},
  };
  for (const auto& [extra, param] : cases) {
    const ApiError e = expect_error(chat_body(extra));
    EXPECT_EQ(e.status, 400) << extra;
    EXPECT_EQ(e.param, param) << extra;
  }
  EXPECT_EQ(expect_error(chat_body(R"("tools":[],"tool_choice":"required")")).message,
            "'tool_choice' = \"required\" needs 'tools'");
  const ApiError schema = expect_error(chat_body(
      R"("tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"tags":{"type":"array","uniqueItems":true}}}}}])"));
  EXPECT_EQ(schema.param, "tools[0].function.parameters");
  EXPECT_EQ(schema.code, "unsupported_schema");
  EXPECT_EQ(schema.message, "tools[0].function.parameters: unsupported JSON Schema keyword "
                            "'uniqueItems' at /properties/tags");
}

TEST(ApiTools, ConversationsCarryCallsAndResults) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"cold"}]})", true, kLimits, r));
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"tool","content":"x"}]})").param,
            "messages[0].tool_call_id");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"assistant","content":null}]})").param,
            "messages[0].content");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"assistant","tool_calls":[{"id":"a"}]}]})").param,
            "messages[0].tool_calls[0]");
}

TEST(ApiTools, PlanSetsTheFamilysGrammarAndRefusesResponseFormatToo) {
  const text::Tokenizer bytes = text::Tokenizer::bytes();
  ApiRequest r;
  ASSERT_FALSE(parse_request(chat_body(kTools), true, kLimits, r));
  ASSERT_FALSE(plan_tools(r, text::ChatTemplate::kChatml, bytes));
  EXPECT_NE(r.params.grammar, nullptr);
  EXPECT_EQ(r.params.grammar_trigger, "<tool_call>");
  EXPECT_TRUE(r.forced_prefix.empty());
  const std::shared_ptr<const text::Grammar> first = r.params.grammar;
  ASSERT_FALSE(parse_request(chat_body(kTools), true, kLimits, r));
  ASSERT_FALSE(plan_tools(r, text::ChatTemplate::kChatml, bytes));
  EXPECT_EQ(r.params.grammar, first);  // the same tools again: the same grammar (warm masks)
  ASSERT_FALSE(parse_request(chat_body(std::string(kTools) + R"(,"tool_choice":"required")"), true,
                             kLimits, r));
  ASSERT_FALSE(plan_tools(r, text::ChatTemplate::kMistral, bytes));
  EXPECT_NE(r.params.grammar, first);
  EXPECT_EQ(r.forced_prefix, "[TOOL_CALLS]");
  EXPECT_TRUE(r.params.grammar_trigger.empty());
  text::GrammarMatcher m(r.params.grammar);
  const text::GrammarState s =
      m.advance(m.start(), "[{\"name\": \"ping\", \"arguments\": {}}]");
  EXPECT_TRUE(s != text::kDeadState && m.complete(s));
  ASSERT_FALSE(parse_request(chat_body(std::string(kTools) +
                                       R"(,"response_format":{"type":"json_object"})"),
                             true, kLimits, r));
  const std::optional<ApiError> e = plan_tools(r, text::ChatTemplate::kChatml, bytes);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "response_format");
}

TEST(ApiTools, AnswersBecomeToolCallsWithContentNull) {
  const ChoiceOutput o = tool_output(
      text::ToolSyntax::kHermes, "<tool_call>\n",
      "{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.content, "");
  serve::RequestResult r;
  r.completions.resize(1);
  r.completions[0].finish = serve::Finish::kStop;
  const ResponseMeta meta{"chatcmpl-1", 100, "tiny", true};
  const json j = response_json(meta, r, {o.content}, {o.calls});
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  const json& call = j["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "ping");
  EXPECT_EQ(call["function"]["arguments"], "{}");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  // Malformed: the text as content, no calls.
  const ChoiceOutput bad = tool_output(text::ToolSyntax::kHermes, "", "<tool_call>\n{\"name\"");
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<tool_call>\n{\"name\"");
}

TEST(ApiTools, StreamHoldsBackAPossibleMarkerThenYieldsCalls) {
  ToolCallStream s(text::ToolSyntax::kHermes, "");
  EXPECT_EQ(s.push("Hello <to"), "Hello ");  // "<to" may begin <tool_call>
  EXPECT_EQ(s.push("y>"), "<toy>");
  EXPECT_EQ(s.push(" <tool_call>\n{\"name\": \"ping\", "), " ");
  EXPECT_EQ(s.push("\"arguments\": {\"a\":\"\xC3\xA9\xC3\xA9\"}}\n</tool_call>"), "");
  const ChoiceOutput o = s.finish();
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].arguments, "{\"a\":\"\xC3\xA9\xC3\xA9\"}");
  const ResponseMeta meta{"chatcmpl-1", 100, "tiny", true};
  const std::vector<json> chunks = tool_call_chunks(meta, 0, 0, o.calls[0], 8);
  ASSERT_GE(chunks.size(), 3u);
  const json& first = chunks[0]["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["id"], o.calls[0].id);
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "ping");
  EXPECT_EQ(first["function"]["arguments"], "");
  std::string args;
  for (size_t i = 1; i < chunks.size(); ++i) {
    const json& tc = chunks[i]["choices"][0]["delta"]["tool_calls"][0];
    EXPECT_FALSE(tc.contains("id"));
    args += tc["function"]["arguments"].get<std::string>();  // whole characters each
  }
  EXPECT_EQ(args, o.calls[0].arguments);
  // A marker that never completes: the held text comes out at the end.
  ToolCallStream cut(text::ToolSyntax::kHermes, "");
  EXPECT_EQ(cut.push("abc <tool_ca"), "abc ");
  const ChoiceOutput rest = cut.finish();
  EXPECT_TRUE(rest.calls.empty());
  EXPECT_EQ(rest.content, "<tool_ca");
  // Llama: only an answer that starts with the marker can be a call.
  ToolCallStream llama(text::ToolSyntax::kLlama3, "");
  EXPECT_EQ(llama.push("{\"na"), "");
  EXPECT_EQ(llama.push("me\": \"ping\", \"parameters\": {}}"), "");
  EXPECT_EQ(llama.finish().calls.size(), 1u);
  ToolCallStream prose(text::ToolSyntax::kLlama3, "");
  EXPECT_EQ(prose.push("Sure {\"name\""), "Sure {\"name\"");
}

TEST(ApiTools, CallIdsAreUniqueAndMistralsHaveNineCharacters) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(new_tool_call_id(text::ToolSyntax::kHermes));
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_EQ(ids.begin()->size(), 29u);  // "call_" + 24
  EXPECT_EQ(new_tool_call_id(text::ToolSyntax::kMistral).size(), 9u);
}

}  // namespace
}  // namespace kvcache::server
