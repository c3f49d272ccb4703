// gpt-oss's harmony chat format: the rendered text pinned byte for byte. There is no gpt-oss
// Jinja fixture in the tree; the expected strings are what the model's published template
// renders for the same conversations (its date fixed), except where a test says otherwise.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "text/chat_template.h"

namespace kvcache::text {
namespace {

using Conversation = std::vector<ChatMessage>;

const ChatContext kDec4{"2026-12-04", "medium"};

std::string system_part(std::string_view effort, bool tools) {
  return std::string("<|start|>system<|message|>You are ChatGPT, a large language model trained "
                     "by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-12-04\n\n"
                     "Reasoning: ") +
         std::string(effort) +
         "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
         "message." +
         (tools ? "\nCalls to these tools must go to the commentary channel: 'functions'." : "") +
         "<|end|>";
}

std::string render(const Conversation& c, bool gen, const std::vector<std::string>& tools = {},
                   const ChatContext& ctx = kDec4) {
  Result<std::string> r = render_chat(ChatTemplate::kHarmony, c, gen, {}, tools, ctx);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : "";
}

TEST(ChatHarmony, UserTurnGetsTheModelsSystemMessageWithDateAndEffort) {
  EXPECT_EQ(render({{"user", "Hi"}}, true, {}, {"2026-12-04", "high"}),
            system_part("high", false) + "<|start|>user<|message|>Hi<|end|><|start|>assistant");
  // Without the generation prompt the conversation ends with its last message.
  EXPECT_EQ(render({{"user", "Hi"}}, false),
            system_part("medium", false) + "<|start|>user<|message|>Hi<|end|>");
}

TEST(ChatHarmony, SystemMessageBecomesTheDevelopersInstructions) {
  const Conversation c = {{"system", "Answer in French."}, {"user", "Hi"}};
  Result<RenderedChat> r = render_chat_spans(ChatTemplate::kHarmony, c, true, {}, {}, kDec4);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->text, system_part("medium", false) +
                         "<|start|>developer<|message|># Instructions\n\nAnswer in French.\n\n"
                         "<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant");
  // Client text is the instructions and the user's turn, nothing of the format.
  ASSERT_EQ(r->content.size(), 2u);
  EXPECT_EQ(r->text.substr(r->content[0].first, r->content[0].second - r->content[0].first),
            "Answer in French.");
}

TEST(ChatHarmony, ToolsAreATypeScriptNamespaceInTheDeveloperMessage) {
  const std::vector<std::string> tools = {
      R"({"type": "function", "function": {"name": "get_weather",
          "description": "Current weather in a city.",
          "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city name."},
            "days": {"type": "integer", "default": 1},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "exact": {"type": "boolean"},
            "where": {"type": "object", "properties": {"lat": {"type": "number"},
                      "lon": {"type": "number"}}, "required": ["lat"]},
            "extra": {}},
          "required": ["city", "unit"]}}})",
      R"({"type": "function", "function": {"name": "now", "description": "The time.",
          "parameters": {"type": "object", "properties": {}}}})"};
  // The template also writes its own source indentation before a nested property's type
  // ("lat: \n                number"); that is the one difference.
  EXPECT_EQ(render({{"user", "Weather?"}}, true, tools),
            system_part("medium", true) +
                "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
                "// Current weather in a city.\ntype get_weather = (_: {\n"
                "// The city name.\ncity: string,\n"
                "days?: number, // default: 1,\n"
                "unit: \"celsius\" | \"fahrenheit\",\n"
                "tags?: string[],\n"
                "exact?: boolean,\n"
                "where?: {\nlat: number, lon?: number},\n"
                "extra?: any,\n"
                "}) => any;\n\n"
                "// The time.\ntype now = () => any;\n\n"
                "} // namespace functions<|end|>"
                "<|start|>user<|message|>Weather?<|end|><|start|>assistant");
}

// Where the template's Jinja writes its own source whitespace (after " | " in a oneOf, before
// a nested property's type) this writes none; otherwise the same text.
TEST(ChatHarmony, ToolTypesCoverUnionsNullableArraysAndDefaults) {
  const std::vector<std::string> tools = {
      R"({"type": "function", "function": {"name": "t1", "description": "Mixed.",
          "parameters": {"type": "object", "properties": {
            "a": {"type": "string", "nullable": true},
            "b": {"type": ["string", "number"]},
            "c": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "e": {"type": "array", "items": {"type": "integer"}},
            "f": {"type": "array"},
            "g": {"type": "array", "items": {"type": "object",
                  "properties": {"x": {"type": "string"}}}},
            "h": {"type": "string", "enum": ["x", "y"], "default": "x"},
            "i": {"type": "object"},
            "j": {"type": "boolean", "default": false, "description": "A flag."},
            "m": {"type": "null"}},
          "required": ["a"]}}})",
      R"({"type": "function", "function": {"name": "t2"}})"};
  const std::string r = render({{"user", "Q"}}, true, tools);
  const size_t from = r.find("type t1");
  ASSERT_NE(from, std::string::npos);
  EXPECT_EQ(r.substr(from, r.find("<|end|>", from) - from),
            "type t1 = (_: {\n"
            "a: string | null,\n"
            "b?: string | number,\n"
            "c?: string | number,\n"
            "e?: number[],\n"
            "f?: any[],\n"
            "g?: {\nx?: string}[],\n"
            "h?: \"x\" | \"y\", // default: x,\n"
            "i?: object,\n"
            "// A flag.\nj?: boolean, // default: false,\n"
            "m?: any,\n"
            "}) => any;\n\n"
            "type t2 = () => any;\n\n"  // no description: no comment line
            "} // namespace functions");
}

TEST(ChatHarmony, ReasoningAndACallThenItsResultThenTheGenerationPrompt) {
  const std::vector<std::string> tools = {
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"]}}})"};
  Conversation c = {{"system", "Be terse."}, {"user", "Weather in Paris?"}, {"assistant", ""},
                    {"tool", "{\"temp\": 18}"}};
  c[2].reasoning = "I should call get_weather.";
  c[2].tool_calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  c[3].tool_call_id = "call_1";
  // The template's Jinja HTML-escapes the tool result's header (tojson's markup joins it);
  // this writes the format's tokens there.
  EXPECT_EQ(render(c, true, tools),
            system_part("medium", true) +
                "<|start|>developer<|message|># Instructions\n\nBe terse.\n\n# Tools\n\n"
                "## functions\n\nnamespace functions {\n\n// Weather.\n"
                "type get_weather = (_: {\ncity: string,\n}) => any;\n\n"
                "} // namespace functions<|end|>"
                "<|start|>user<|message|>Weather in Paris?<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>I should call get_weather.<|end|>"
                "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                "{\"city\": \"Paris\"}<|call|>"
                "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
                "\"{\\\"temp\\\": 18}\"<|end|><|start|>assistant");
}

TEST(ChatHarmony, ReasoningIsDroppedOnceAFinalAnswerFollows) {
  Conversation c = {{"user", "Q"}, {"assistant", ""}, {"tool", "r"}, {"assistant", "A"},
                    {"user", "Q2"}};
  c[1].reasoning = "T1";
  c[1].tool_calls = {{"c", "f", "{}"}};
  c[3].reasoning = "T2";
  EXPECT_EQ(render(c, true),
            system_part("medium", false) +
                "<|start|>user<|message|>Q<|end|>"
                "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>"
                "<|start|>functions.f to=assistant<|channel|>commentary<|message|>\"r\"<|end|>"
                "<|start|>assistant<|channel|>final<|message|>A<|end|>"
                "<|start|>user<|message|>Q2<|end|><|start|>assistant");
}

TEST(ChatHarmony, AFinishedReplyKeepsItsReasoningAndEndsWithReturn) {
  Conversation c = {{"user", "Hi"}, {"assistant", "Hello!"}};
  c[1].reasoning = "Greet back.";
  EXPECT_EQ(render(c, false),
            system_part("medium", false) +
                "<|start|>user<|message|>Hi<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>Greet back.<|end|>"
                "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>");
}

TEST(ChatHarmony, EachOfSeveralCallsIsRenderedAndResultsFindTheirCallById) {
  Conversation c = {{"user", "Q"}, {"assistant", ""}, {"tool", "b"}, {"tool", "a"}};
  c[1].tool_calls = {{"id_a", "fa", "{\"x\":1}"}, {"id_b", "fb", "not json"}};
  c[2].tool_call_id = "id_b";
  c[3].tool_call_id = "id_a";
  EXPECT_EQ(render(c, true),
            system_part("medium", false) +
                "<|start|>user<|message|>Q<|end|>"
                "<|start|>assistant to=functions.fa<|channel|>commentary json<|message|>"
                "{\"x\": 1}<|call|>"
                "<|start|>assistant to=functions.fb<|channel|>commentary json<|message|>"
                "\"not json\"<|call|>"
                "<|start|>functions.fb to=assistant<|channel|>commentary<|message|>\"b\"<|end|>"
                "<|start|>functions.fa to=assistant<|channel|>commentary<|message|>\"a\"<|end|>"
                "<|start|>assistant");
}

TEST(ChatHarmony, RefusesAResultWithoutACallAndABadEffortOrDate) {
  Result<std::string> orphan =
      render_chat(ChatTemplate::kHarmony, {{{"user", "Q"}, {"tool", "r"}}}, true, {}, {}, kDec4);
  EXPECT_EQ(orphan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(orphan.status().message(),
            "messages[1] is a tool result with no assistant tool call before it");
  // A final answer in between closes the call.
  Conversation c = {{"user", "Q"}, {"assistant", ""}, {"assistant", "A"}, {"tool", "r"}};
  c[1].tool_calls = {{"c", "f", "{}"}};
  EXPECT_EQ(render_chat(ChatTemplate::kHarmony, c, true, {}, {}, kDec4).status().code(),
            StatusCode::kInvalidArgument);
  Result<std::string> effort = render_chat(ChatTemplate::kHarmony, {{{"user", "Q"}}}, true, {},
                                           {}, {"2026-12-04", "extreme"});
  EXPECT_EQ(effort.status().message(),
            "reasoning_effort = \"extreme\", expected low, medium or high");
  Result<std::string> date = render_chat(ChatTemplate::kHarmony, {{{"user", "Q"}}}, true, {},
                                         {}, {"4 Dec 2026", "low"});
  EXPECT_EQ(date.status().message(), "chat date = \"4 Dec 2026\", expected YYYY-MM-DD");
  EXPECT_EQ(render_chat(ChatTemplate::kHarmony, {{{"bot", "x"}}}, true, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ChatHarmony, DefaultDateIsTodayAndTheFamilyIsDetected) {
  Result<std::string> r = render_chat(ChatTemplate::kHarmony, {{{"user", "Q"}}}, true, {});
  ASSERT_TRUE(r.ok());
  const size_t at = r->find("Current date: ");
  ASSERT_NE(at, std::string::npos);
  const std::string date = r->substr(at + 14, 11);
  EXPECT_EQ(date[4], '-');
  EXPECT_EQ(date[7], '-');
  EXPECT_EQ(date[10], '\n');
  EXPECT_EQ(detect_chat_template("{{- '<|start|>' + role + '<|message|>' }}"),
            ChatTemplate::kHarmony);
  EXPECT_EQ(default_chat_tokens(ChatTemplate::kHarmony).eos, "<|return|>");
}

}  // namespace
}  // namespace kvcache::text
