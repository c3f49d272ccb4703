// Harmony (gpt-oss) replies split into reasoning, content and calls, whole and as they grow;
// malformed replies stay content; the forced-call grammar writes harmony's call header.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "text/grammar_matcher.h"
#include "text/json_schema.h"
#include "text/tool_calls.h"

namespace kvcache::text {
namespace {

constexpr const char* kAnswer =
    "<|channel|>analysis<|message|>The user greets.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!";

TEST(HarmonyReply, AnalysisIsReasoningAndFinalIsContent) {
  const ParsedAnswer a = parse_harmony(kAnswer, true, false);
  EXPECT_EQ(a.reasoning, "The user greets.");
  EXPECT_EQ(a.content, "Hello there!");
  EXPECT_TRUE(a.calls.empty());
  // A reply that repeats the prompt's <|start|>assistant reads the same.
  EXPECT_EQ(parse_harmony(std::string("<|start|>assistant") + kAnswer, true, false).content,
            "Hello there!");
  // The end token, when the text keeps it, ends the message.
  EXPECT_EQ(parse_harmony(std::string(kAnswer) + "<|return|>", true, false).content,
            "Hello there!");
  // parse_tool_calls reads harmony the same way.
  EXPECT_EQ(parse_tool_calls(ToolSyntax::kHarmony, kAnswer).reasoning, "The user greets.");
}

TEST(HarmonyReply, ACallWithTheRecipientInEitherPlaceIsParsed) {
  const std::string channel_first =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary"
      " to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"n\": 2}"
      "<|call|>";
  const ParsedAnswer a = parse_harmony(channel_first, true, false);
  EXPECT_EQ(a.reasoning, "Need weather.");
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\":\"Paris\",\"n\":2}");
  // As the template writes it in a history: the recipient before the channel; <|call|> is an
  // end of generation, so a reply usually stops right after the arguments.
  const ParsedAnswer b = parse_harmony(
      " to=functions.sum<|channel|>commentary json<|message|>{\"n\":3}", true, false);
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_EQ(b.calls[0].name, "sum");
  EXPECT_EQ(b.calls[0].arguments, "{\"n\":3}");
  EXPECT_EQ(b.content, "");
}

TEST(HarmonyReply, CommentaryWithoutRecipientIsContentJoinedToTheFinalText) {
  const ParsedAnswer a = parse_harmony(
      "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Done.",
      true, false);
  EXPECT_EQ(a.content, "Checking.\nDone.");
}

TEST(HarmonyReply, MalformedRepliesStayContent) {
  // Not harmony at all: the whole text.
  for (const char* plain : {"Just prose.", "", "<|chan", "{\"a\": 1}"})
    EXPECT_EQ(parse_harmony(plain, true, false).content, plain);
  // A header with no <|message|>: what follows the last message, as written.
  EXPECT_EQ(parse_harmony("<|channel|>final<|message|>Hi<|end|><|start|>assistant<|chan", true,
                          false).content,
            "Hi\n<|start|>assistant<|chan");
  // Text after a message that is not another message.
  EXPECT_EQ(parse_harmony("<|channel|>final<|message|>Hi<|end|>stray", true, false).content,
            "Hi\nstray");
  // A call whose arguments are not a JSON object, or to another recipient: as written.
  const std::string bad_args =
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": ";
  ParsedAnswer a = parse_harmony(bad_args, true, false);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, bad_args);
  a = parse_harmony("<|channel|>analysis<|message|>T<|end|><|start|>assistant to=browser.search"
                    "<|channel|>commentary json<|message|>{}",
                    true, false);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.reasoning, "T");
  EXPECT_EQ(a.content, "<|start|>assistant to=browser.search<|channel|>commentary json"
                       "<|message|>{}");
  // Calls not asked for: as written too.
  a = parse_harmony(" to=functions.f<|channel|>commentary json<|message|>{}", false, false);
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, " to=functions.f<|channel|>commentary json<|message|>{}");
  EXPECT_TRUE(parse_harmony(" to=functions.<|channel|>commentary<|message|>{}", true, false)
                  .calls.empty());
}

TEST(HarmonyReply, EveryBeginningReportsABeginningOfTheWhole) {
  const std::string reply =
      "<|channel|>analysis<|message|>Think <b>.<|end|><|start|>assistant<|channel|>final"
      "<|message|>A < B and <|x|>.";
  const ParsedAnswer whole = parse_harmony(reply, true, false);
  EXPECT_EQ(whole.reasoning, "Think <b>.");
  EXPECT_EQ(whole.content, "A < B and <|x|>.");
  for (size_t n = 0; n <= reply.size(); ++n) {
    const ParsedAnswer p = parse_harmony(reply.substr(0, n), true, true);
    EXPECT_EQ(whole.reasoning.compare(0, p.reasoning.size(), p.reasoning), 0) << n;
    EXPECT_EQ(whole.content.compare(0, p.content.size(), p.content), 0) << n;
    EXPECT_TRUE(p.calls.empty());
  }
  // Held back: a possible end token's beginning, an open call, a header cut short.
  EXPECT_EQ(parse_harmony("<|channel|>final<|message|>Hi <|en", true, true).content, "Hi ");
  EXPECT_EQ(parse_harmony(" to=functions.f<|channel|>commentary json<|message|>{\"a\"", true,
                          true).content, "");
  EXPECT_EQ(parse_harmony("<|channel|>fin", true, true).content, "");
  EXPECT_EQ(parse_harmony("<|cha", true, true).content, "");
  EXPECT_EQ(parse_harmony("<|sta", true, true).content, "");
  EXPECT_EQ(parse_harmony("Plain", true, true).content, "Plain");
}

// Replies of every shape the parser knows, for the stream tests.
const std::vector<std::string>& stream_cases() {
  static const std::vector<std::string> k = {
      kAnswer,
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\"}"
      "<|call|>",
      "<|channel|>analysis<|message|>A<|end|><|start|>assistant<|channel|>commentary<|message|>"
      "Checking.<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>"
      "{\"n\":1}<|call|><|start|>assistant<|channel|>analysis<|message|>B <b><|end|>"
      "<|start|>assistant<|channel|>final<|message|>Done < 2.<|return|>",
      "<|start|>assistant<|channel|>final<|message|>Hi<|end|><|start|>assistant<|chan",
      "<|channel|>final<|message|>Hi<|end|>stray <|sta text",
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": ",
      "<|channel|>analysis<|message|>T<|end|><|start|>assistant to=browser.search"
      "<|channel|>commentary json<|message|>{}<|end|><|start|>assistant<|channel|>final"
      "<|message|>ok",
      " to=functions.f<|channel|>commentary json<|message|>{}",
      "Just prose <|end|> with tokens.",
      "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|><|end|>",
  };
  return k;
}

// A stream of `reply` in pieces of `step` bytes matches parse_harmony of every beginning read
// so far, and of the whole reply at the end.
void expect_stream_matches(const std::string& reply, bool calls, size_t step) {
  HarmonyStream s(calls);
  auto same = [&](std::string_view text, bool partial) {
    s.read(text, partial);
    const ParsedAnswer want = parse_harmony(text, calls, partial);
    EXPECT_EQ(s.content_from(0), want.content) << text;
    EXPECT_EQ(s.reasoning_from(0), want.reasoning) << text;
    const std::vector<ParsedToolCall> got = s.calls();
    ASSERT_EQ(got.size(), want.calls.size()) << text;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].name, want.calls[i].name);
      EXPECT_EQ(got[i].arguments, want.calls[i].arguments);
    }
  };
  for (size_t n = 0; n < reply.size(); n += step)
    same(std::string_view(reply).substr(0, n), /*partial=*/true);
  same(reply, /*partial=*/false);
}

TEST(HarmonyReply, AStreamReadsWhatTheWholeParseReadsAtEveryByte) {
  for (const std::string& reply : stream_cases())
    for (bool calls : {true, false})
      for (size_t step : {1u, 2u, 3u, 7u, 64u}) expect_stream_matches(reply, calls, step);
  // The multi-message case, whole: reasoning joined, the commentary text, one call.
  const ParsedAnswer a = parse_harmony(stream_cases()[2], true, false);
  EXPECT_EQ(a.reasoning, "A\nB <b>");
  EXPECT_EQ(a.content, "Checking.\nDone < 2.");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"n\":1}");
  // content_from past the end, and from inside the text.
  HarmonyStream s(true);
  s.read(stream_cases()[2], false);
  EXPECT_EQ(s.content_from(6), "ng.\nDone < 2.");
  EXPECT_EQ(s.content_from(100), "");
}

TEST(HarmonyReply, AStreamReadsOnlyTheOpenMessage) {
  std::string reply = "<|channel|>analysis<|message|>Plan.<|end|>";
  for (int i = 0; i < 200; ++i)
    reply += "<|start|>assistant<|channel|>commentary<|message|>Step " + std::to_string(i) +
             ".<|end|>";
  reply += "<|start|>assistant<|channel|>final<|message|>Done.<|return|>";
  // The longest message: "<|start|>assistant<|channel|>commentary<|message|>Step 199.<|end|>".
  const size_t longest = std::string("<|start|>assistant<|channel|>commentary<|message|>"
                                     "Step 199.<|end|>").size();
  HarmonyStream s(true);
  size_t most = 0;
  for (size_t n = 1; n <= reply.size(); ++n) {
    s.read(std::string_view(reply).substr(0, n), true);
    most = std::max(most, n - s.read_from());
  }
  EXPECT_LE(most, longest);  // each read: at most the open message, never the reply
  EXPECT_GT(reply.size(), 50 * longest);
  EXPECT_EQ(s.read_from(), reply.size() - std::string("<|start|>assistant<|channel|>final"
                                                      "<|message|>Done.<|return|>").size());
  s.read(reply, false);
  EXPECT_EQ(s.read_from(), reply.size());  // the last message ended: nothing left to read
  // Text that is content as written (no framing, or after a message) is read once.
  for (const std::string head : {"", "<|channel|>final<|message|>Hi<|end|>"}) {
    const std::string prose = head + std::string(5000, 'x');
    HarmonyStream p(true);
    size_t widest = 0;
    for (size_t n = 1; n <= prose.size(); ++n) {
      p.read(std::string_view(prose).substr(0, n), true);
      if (n > head.size() + 1) widest = std::max(widest, n - p.read_from());
    }
    EXPECT_EQ(widest, 1u);
    p.read(prose, false);
    EXPECT_EQ(p.content_from(0), parse_harmony(prose, true, false).content);
  }
  EXPECT_EQ(s.content_from(0).substr(0, 15), "Step 0.\nStep 1.");
  EXPECT_EQ(s.reasoning_from(0), "Plan.");
}

TEST(HarmonyReply, ForcedGrammarWritesTheCallHeaderThenTheArguments) {
  auto sum = compile_json_schema(
      R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],)"
      R"("additionalProperties":false})");
  ASSERT_TRUE(sum.ok());
  const std::vector<ToolGrammarSpec> tools = {{"sum", *sum}};
  auto g = tool_call_grammar(ToolSyntax::kHarmony, tools, true, /*with_marker=*/false);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto accepts = [&](const std::string& doc) {
    GrammarMatcher m(*g);
    const GrammarState s = m.advance(m.start(), doc);
    return s != kDeadState && m.complete(s);
  };
  const std::string doc = "sum <|constrain|>json<|message|>{\"n\":4}";
  EXPECT_TRUE(accepts(doc));
  EXPECT_FALSE(accepts("sum <|constrain|>json<|message|>{\"n\":\"x\"}"));
  EXPECT_FALSE(accepts("other <|constrain|>json<|message|>{\"n\":4}"));
  // The prompt ends with forced_call_prefix: together they parse into the call.
  const std::string prefix(forced_call_prefix(ToolSyntax::kHarmony));
  const ParsedAnswer a = parse_tool_calls(ToolSyntax::kHarmony, prefix + doc);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "sum");
  EXPECT_EQ(a.calls[0].arguments, "{\"n\":4}");
}

}  // namespace
}  // namespace kvcache::text
