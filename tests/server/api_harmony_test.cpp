// Harmony (gpt-oss) on the OpenAI wire: a reply split into message.reasoning_content, content
// and tool_calls (whole and streamed), malformed replies as content, the plan for its tools
// (auto: parsed only; required: the call header as the forced prefix) and the request's
// reasoning_effort and assistant reasoning_content.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/api.h"
#include "text/grammar_matcher.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

const ApiLimits kLimits{/*vocab=*/256, /*max_sessions=*/4, /*max_session_tokens=*/256};
constexpr text::ToolSyntax kHarmony = text::ToolSyntax::kHarmony;

constexpr const char* kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","description":"d",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}},
        "required":["city"]}}}])";

std::string chat_body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"x"}],)" + extra + "}";
}

serve::RequestResult one_result() {
  serve::RequestResult r;
  r.completions.resize(1);
  r.completions[0].finish = serve::Finish::kStop;
  return r;
}

TEST(ApiHarmony, ReplyBecomesReasoningAndContent) {
  const ChoiceOutput o = tool_output(
      kHarmony, "",
      "<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hi!",
      /*calls=*/false);
  EXPECT_EQ(o.content, "Hi!");
  EXPECT_EQ(o.reasoning, "Say hi.");
  EXPECT_TRUE(o.calls.empty());
  const ResponseMeta meta{"chatcmpl-1", 100, "tiny", true};
  const json j = response_json(meta, one_result(), {o.content}, {o.calls}, {o.reasoning});
  const json& msg = j["choices"][0]["message"];
  EXPECT_EQ(msg["content"], "Hi!");
  EXPECT_EQ(msg["reasoning_content"], "Say hi.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  // No reasoning: no field.
  const json plain = response_json(meta, one_result(), {"a"}, {{}}, {""});
  EXPECT_FALSE(plain["choices"][0]["message"].contains("reasoning_content"));
}

TEST(ApiHarmony, ACallBecomesToolCallsWithItsNameAndArguments) {
  const ChoiceOutput o = tool_output(
      kHarmony, "",
      "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>commentary"
      " to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].name, "get_weather");
  EXPECT_EQ(o.calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(o.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(o.content, "");
  EXPECT_EQ(o.reasoning, "Look it up.");
  const ResponseMeta meta{"chatcmpl-1", 100, "tiny", true};
  const json j = response_json(meta, one_result(), {o.content}, {o.calls}, {o.reasoning});
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  // After the forced prefix the answer starts at the name.
  const ChoiceOutput forced =
      tool_output(kHarmony, text::forced_call_prefix(kHarmony),
                  "get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}");
  ASSERT_EQ(forced.calls.size(), 1u);
  EXPECT_EQ(forced.calls[0].arguments, "{\"city\":\"Rome\"}");
}

TEST(ApiHarmony, MalformedRepliesArePlainContentNeverCalls) {
  const std::string cases[] = {
      "no framing at all",
      "<|channel|>commentary to=functions.get_weather<|message|>{\"city\": ",  // cut short
      "<|channel|>commentary to=functions.get_weather<|message|>[1, 2]",      // not an object
      "<|channel|>final<|message|>ok<|end|>junk after",
      "<|channel|>final no message token",
      "<|start|><|start|><|message|><|end|><|end|>",
      std::string("<|channel|>final<|message|>\xff\xfe"),
  };
  for (const std::string& text : cases) {
    const ChoiceOutput o = tool_output(kHarmony, "", text);
    EXPECT_TRUE(o.calls.empty()) << text;
    EXPECT_FALSE(o.content.empty()) << text;
  }
  EXPECT_EQ(tool_output(kHarmony, "", cases[0]).content, cases[0]);
  EXPECT_EQ(tool_output(kHarmony, "", cases[2]).content, cases[2]);
  EXPECT_EQ(tool_output(kHarmony, "", cases[3]).content, "ok\njunk after");
}

TEST(ApiHarmony, StreamSendsReasoningAndContentAsTheyGrowThenTheCall) {
  ToolCallStream s(kHarmony, "");
  EXPECT_EQ(s.push("<|channel|>analysis<|mes"), "");
  EXPECT_EQ(s.take_reasoning(), "");
  EXPECT_EQ(s.push("sage|>Think"), "");
  EXPECT_EQ(s.take_reasoning(), "Think");
  EXPECT_EQ(s.push("ing.<|e"), "");
  EXPECT_EQ(s.take_reasoning(), "ing.");
  EXPECT_EQ(s.push("nd|><|start|>assistant<|channel|>final<|message|>Hel"), "Hel");
  EXPECT_EQ(s.take_reasoning(), "");
  EXPECT_EQ(s.push("lo <"), "lo ");  // "<" may begin <|end|>
  EXPECT_EQ(s.push("b>"), "<b>");
  const ChoiceOutput end = s.finish();
  EXPECT_EQ(end.content, "");
  EXPECT_EQ(end.reasoning, "");
  EXPECT_TRUE(end.calls.empty());
  // A call comes at the end, with the reasoning before it.
  ToolCallStream c(kHarmony, "");
  EXPECT_EQ(c.push("<|channel|>analysis<|message|>T<|end|><|start|>assistant to=functions.get_"
                   "weather<|channel|>commentary json<|message|>{\"city\":"),
            "");
  EXPECT_EQ(c.take_reasoning(), "T");
  EXPECT_EQ(c.push("\"Oslo\"}"), "");
  const ChoiceOutput call = c.finish();
  ASSERT_EQ(call.calls.size(), 1u);
  EXPECT_EQ(call.calls[0].name, "get_weather");
  EXPECT_EQ(call.calls[0].arguments, "{\"city\":\"Oslo\"}");
  // Without tools a call stays content, sent at the end.
  ToolCallStream nocalls(kHarmony, "", /*calls=*/false);
  EXPECT_EQ(nocalls.push(" to=functions.f<|channel|>commentary json<|message|>{}"), "");
  const ChoiceOutput raw = nocalls.finish();
  EXPECT_TRUE(raw.calls.empty());
  EXPECT_EQ(raw.content, " to=functions.f<|channel|>commentary json<|message|>{}");
  // A reply without framing streams as it comes.
  ToolCallStream prose(kHarmony, "");
  EXPECT_EQ(prose.push("Plain"), "Plain");
  EXPECT_EQ(prose.push(" text"), " text");
  EXPECT_EQ(prose.finish().content, "");
  const ResponseMeta meta{"chatcmpl-1", 100, "tiny", true};
  EXPECT_EQ(reasoning_chunk_json(meta, 0, "T")["choices"][0]["delta"],
            (json{{"reasoning_content", "T"}}));
}

TEST(ApiHarmony, AStreamByteByByteSendsWhatTheWholeReplyHolds) {
  const std::string replies[] = {
      "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hi <there>.<|return|>",
      "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>commentary<|message|>"
      "Checking.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json"
      "<|message|>{\"city\":\"Oslo\"}<|call|>",
      "<|channel|>final<|message|>ok<|end|>junk <|sta after",
  };
  for (const std::string& reply : replies) {
    for (bool calls : {true, false}) {
      ToolCallStream s(kHarmony, "", calls);
      std::string content, reasoning;
      for (char ch : reply) {
        content += s.push(std::string(1, ch));
        reasoning += s.take_reasoning();
      }
      const ChoiceOutput end = s.finish();
      const ChoiceOutput whole = tool_output(kHarmony, "", reply, calls);
      EXPECT_EQ(content + end.content, whole.content) << reply;
      EXPECT_EQ(reasoning + end.reasoning, whole.reasoning) << reply;
      ASSERT_EQ(end.calls.size(), whole.calls.size()) << reply;
      for (size_t i = 0; i < end.calls.size(); ++i)
        EXPECT_EQ(end.calls[i].arguments, whole.calls[i].arguments);
    }
  }
  const ChoiceOutput two = tool_output(kHarmony, "", replies[1]);
  EXPECT_EQ(two.content, "Checking.");
  EXPECT_EQ(two.reasoning, "A");
  ASSERT_EQ(two.calls.size(), 1u);
  EXPECT_EQ(tool_output(kHarmony, "", replies[2]).content, "ok\njunk <|sta after");
}

TEST(ApiHarmony, AutoToolsAreParsedNotConstrainedAndRequiredForcesTheCallHeader) {
  const text::Tokenizer bytes = text::Tokenizer::bytes();
  ApiRequest r;
  ASSERT_FALSE(parse_request(chat_body(kTools), true, kLimits, r));
  ASSERT_FALSE(plan_tools(r, text::ChatTemplate::kHarmony, bytes));
  EXPECT_EQ(r.params.grammar, nullptr);
  EXPECT_TRUE(r.forced_prefix.empty());
  ASSERT_FALSE(parse_request(chat_body(std::string(kTools) + R"(,"tool_choice":"required")"),
                             true, kLimits, r));
  ASSERT_FALSE(plan_tools(r, text::ChatTemplate::kHarmony, bytes));
  EXPECT_EQ(r.forced_prefix, "<|channel|>commentary to=functions.");
  ASSERT_NE(r.params.grammar, nullptr);
  text::GrammarMatcher m(r.params.grammar);
  const text::GrammarState st =
      m.advance(m.start(), "get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}");
  EXPECT_TRUE(st != text::kDeadState && m.complete(st));
}

TEST(ApiHarmony, ReasoningEffortAndAssistantReasoningAreRead) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":"A","reasoning_content":"R"},{"role":"user","content":"y"}],
      "reasoning_effort":"high"})", true, kLimits, r));
  EXPECT_EQ(r.reasoning_effort, "high");
  EXPECT_EQ(r.messages[1].reasoning, "R");
  std::optional<ApiError> e = parse_request(chat_body(R"("reasoning_effort":"max")"), true,
                                            kLimits, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "reasoning_effort");
  EXPECT_EQ(e->message, "'reasoning_effort' = \"max\", expected low, medium or high");
  e = parse_request(R"({"messages":[{"role":"user","content":"x","reasoning_content":"R"}]})",
                    true, kLimits, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "messages[0].reasoning_content");
  e = parse_request(R"({"messages":[{"role":"assistant","content":"A","reasoning_content":3}]})",
                    true, kLimits, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "'messages[0].reasoning_content' must be a string");
  // Completions have no reasoning effort.
  e = parse_request(R"({"prompt":"x","reasoning_effort":"low"})", false, kLimits, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "reasoning_effort");
}

}  // namespace
}  // namespace kvcache::server
