// The Anthropic Messages wire format: bodies read into ApiRequest (fields, defaults, the 400s
// naming what is refused) and the message, stream events and error objects built back.
// Layer: tests (server).
#include "server/anthropic_api.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kvcache::server {
namespace {

const ApiLimits kLimits{/*vocab=*/256, /*max_sessions=*/4, /*max_session_tokens=*/256};

ApiError refused(std::string_view body, bool count_only = false) {
  ApiRequest r;
  std::optional<ApiError> e = parse_messages_body(body, count_only, kLimits, r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(AnthropicParse, ReadsSystemMessagesAndSampling) {
  ApiRequest r;
  ASSERT_FALSE(parse_messages_body(
      R"({"model":"m","max_tokens":9,"system":[{"type":"text","text":"Be "},{"type":"text",
      "text":"brief.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user",
      "content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yo"}]},
      {"role":"user","content":"again"}],"stop_sequences":["\n\n"],"top_k":5,"top_p":0.5,
      "stream":true,"metadata":{"user_id":"u"}})",
      false, kLimits, r));
  EXPECT_TRUE(r.chat);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[2].content, "yo");
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"\n\n"});
  EXPECT_EQ(r.params.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);  // the API's default
  EXPECT_TRUE(r.stream);
  ASSERT_FALSE(parse_messages_body(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[]})", true, kLimits, r));
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(AnthropicParse, RefusesWhatItDoesNotDoNamingIt) {
  const char* kOk = R"("model":"m","messages":[{"role":"user","content":"hi"}])";
  auto body = [&](const std::string& rest) {
    std::string b = "{";
    b += kOk;
    b += rest;
    b += "}";
    return b;
  };
  EXPECT_EQ(refused(body("")).message, "'max_tokens' is required");
  EXPECT_EQ(refused(R"({"max_tokens":5,"messages":[{"role":"user","content":"hi"}]})").param, "model");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"temperature":1.5)")).message,
            "'temperature' = 1.5, expected a value in [0, 1]");
  EXPECT_EQ(refused(body(R"(,"max_tokens":300)")).param, "max_tokens");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"tools":[{"name":"f"}])")).message,
            "'tools[0].input_schema' is required");
  const ApiError server_tool = refused(body(R"(,"max_tokens":5,"tools":[{"type":"bash_20250124",
      "name":"bash"}])"));
  EXPECT_EQ(server_tool.param, "tools[0].type");
  EXPECT_EQ(server_tool.code, "unsupported_parameter");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"tool_choice":{"type":"any"})")).param, "tool_choice");
  const ApiError schema = refused(body(R"(,"max_tokens":5,"tools":[{"name":"f",
      "input_schema":{"type":"array","uniqueItems":true}}])"));
  EXPECT_EQ(schema.param, "tools[0].input_schema");
  EXPECT_EQ(schema.code, "unsupported_schema");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"tools":[{"name":"f","input_schema":{}}],
      "tool_choice":{"type":"tool","name":"g"})")).param, "tool_choice.name");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"service_tier":"auto")")).code,
            "unsupported_parameter");
  const ApiError typo = refused(body(R"(,"max_tokens":5,"max_token":5)"));
  EXPECT_EQ(typo.code, "unknown_parameter");
  EXPECT_EQ(typo.message, "unrecognized request field 'max_token'");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5)"), /*count_only=*/true).param, "max_tokens");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[
      {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]})")
                .param, "messages[0].content[0].type");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},
      {"role":"assistant","content":"b"}]})").param, "messages[1].role");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"system","content":"a"}]})")
                .param, "messages[0].role");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[]})").param, "messages");
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[]}]})")
                .param, "messages[0].content");
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"stop_sequences":"x")")).message,
            "'stop_sequences' must be a list of at most 16 strings");
  EXPECT_EQ(refused("[1]").code, "invalid_json");
}

TEST(AnthropicParse, ToolUseAndToolResultBlocksBecomeCallsAndToolTurns) {
  ApiRequest r;
  ASSERT_FALSE(parse_messages_body(
      R"({"model":"m","max_tokens":9,"tools":[{"name":"get","description":"d","input_schema":
      {"type":"object","properties":{"q":{"type":"string"}}}}],"tool_choice":{"type":"tool",
      "name":"get","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use",
      "id":"tu_1","name":"get","input":{"q":"a"}}]},{"role":"user","content":[{"type":
      "tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"42"}]},{"type":"text",
      "text":"and?"}]}]})",
      false, kLimits, r));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].role, "assistant");
  EXPECT_EQ(r.messages[1].content, "Let me look.");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "tu_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"q":"a"})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "tu_1");
  EXPECT_EQ(r.messages[2].content, "42");
  EXPECT_EQ(r.messages[3].content, "and?");
  EXPECT_EQ(r.tools.choice, ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "get");
  EXPECT_FALSE(r.tools.parallel);
  ASSERT_EQ(r.tools.specs.size(), 1u);
  EXPECT_EQ(r.tools.json[0], R"({"type":"function","function":{"name":"get","description":"d",)"
                             R"("parameters":{"type":"object","properties":{"q":{"type":"string"}}}}})");
  // any = required; a tool_use block in a user turn is not a call.
  ASSERT_FALSE(parse_messages_body(R"({"model":"m","max_tokens":9,"tools":[{"name":"get",
      "input_schema":{}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]})",
                                   false, kLimits, r));
  EXPECT_EQ(r.tools.choice, ToolChoice::kRequired);
  EXPECT_EQ(refused(R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":[
      {"type":"tool_use","id":"a","name":"b","input":{}}]}]})").param, "messages[0].content[0].type");
}

TEST(AnthropicResponse, MessageEventsAndErrorsTakeTheApiShapes) {
  serve::RequestResult r;
  r.prompt_tokens = 10;
  r.cached_prompt_tokens = 4;
  r.completions.resize(1);
  r.completions[0].tokens = {1, 2, 3};
  r.completions[0].finish = serve::Finish::kStop;
  ResponseMeta m;
  m.id = "msg_1";
  m.model = "tiny";
  EXPECT_EQ(message_json(m, r, "abc").dump(),
            R"({"content":[{"text":"abc","type":"text"}],"id":"msg_1","model":"tiny",)"
            R"("role":"assistant","stop_reason":"end_turn","stop_sequence":null,"type":"message",)"
            R"("usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":4,)"
            R"("input_tokens":6,"output_tokens":3}})");
  r.completions[0].stop_string = "\n";
  EXPECT_EQ(stop_reason(r.completions[0]), "stop_sequence");
  EXPECT_EQ(message_delta_json(r)["delta"].dump(), R"({"stop_reason":"stop_sequence","stop_sequence":"\n"})");
  r.completions[0].finish = serve::Finish::kLength;
  EXPECT_EQ(stop_reason(r.completions[0]), "max_tokens");
  const nlohmann::json called = message_json(m, r, "", {ApiToolCall{"tu", "get", R"({"q":"a"})"}});
  EXPECT_EQ(called["content"].dump(), R"([{"id":"tu","input":{"q":"a"},"name":"get","type":"tool_use"}])");
  EXPECT_EQ(called["stop_reason"], "tool_use");
  EXPECT_EQ(tool_use_events(1, ApiToolCall{"tu", "get", R"({"q":"a"})"}),
            "event: content_block_start\ndata: {\"content_block\":{\"id\":\"tu\",\"input\":{},"
            "\"name\":\"get\",\"type\":\"tool_use\"},\"index\":1,\"type\":\"content_block_start\"}\n\n"
            "event: content_block_delta\ndata: {\"delta\":{\"partial_json\":\"{\\\"q\\\":\\\"a\\\"}\",\"type\":"
            "\"input_json_delta\"},\"index\":1,\"type\":\"content_block_delta\"}\n\n"
            "event: content_block_stop\ndata: {\"index\":1,\"type\":\"content_block_stop\"}\n\n");
  EXPECT_EQ(event(text_delta_json("hi")),
            "event: content_block_delta\ndata: {\"delta\":{\"text\":\"hi\",\"type\":\"text_delta\"},"
            "\"index\":0,\"type\":\"content_block_delta\"}\n\n");
  EXPECT_EQ(message_start_json(m, 10)["message"]["usage"].dump(),
            R"({"input_tokens":10,"output_tokens":0})");
  EXPECT_EQ(anthropic_error_body(ApiError{400, "bad", "", "", ""}),
            R"({"error":{"message":"bad","type":"invalid_request_error"},"type":"error"})");
  EXPECT_EQ(anthropic_error_body(ApiError{401, "key", "", "", ""}),
            R"({"error":{"message":"key","type":"authentication_error"},"type":"error"})");
  EXPECT_EQ(anthropic_error_body(ApiError{429, "busy", "", "", ""}),
            R"({"error":{"message":"busy","type":"rate_limit_error"},"type":"error"})");
  EXPECT_EQ(anthropic_error_body(ApiError{503, "down", "", "", ""}),
            R"({"error":{"message":"down","type":"overloaded_error"},"type":"error"})");
}

const ApiLimits kLong{/*vocab=*/256, /*max_sessions=*/4, /*max_session_tokens=*/65536};

std::string thinking_body(const std::string& thinking, int max_tokens = 32000) {
  return R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":)" +
         std::to_string(max_tokens) + R"(,"thinking":)" + thinking + "}";
}

TEST(AnthropicThinking, EnabledAsksForAnEffortByItsBudgetAndDisabledForLow) {
  for (const auto& [budget, effort] : std::vector<std::pair<int, std::string>>{
           {1024, "low"}, {4095, "low"}, {4096, "medium"}, {16383, "medium"},
           {16384, "high"}, {31999, "high"}}) {
    ApiRequest r;
    ASSERT_FALSE(parse_messages_body(
        thinking_body(R"({"type":"enabled","budget_tokens":)" + std::to_string(budget) + "}"),
        false, kLong, r));
    EXPECT_EQ(r.reasoning_effort, effort) << budget;
    EXPECT_TRUE(r.thinking);
    EXPECT_TRUE(r.effort_ignorable);
    EXPECT_EQ(thinking_effort(budget), effort);
  }
  ApiRequest r;
  ASSERT_FALSE(parse_messages_body(thinking_body(R"({"type":"disabled"})"), false, kLong, r));
  EXPECT_EQ(r.reasoning_effort, "low");
  EXPECT_FALSE(r.thinking);
  ASSERT_FALSE(parse_messages_body(thinking_body("null"), false, kLong, r));
  EXPECT_EQ(r.reasoning_effort, "");
  EXPECT_FALSE(r.effort_ignorable);
  // count_tokens has no max_tokens: the budget is only checked against 1024.
  ASSERT_FALSE(parse_messages_body(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled",
      "budget_tokens":70000}})", true, kLong, r));
  EXPECT_EQ(r.reasoning_effort, "high");
}

TEST(AnthropicThinking, BadThinkingFieldsAreA400NamingTheField) {
  auto no = [](const std::string& body) {
    ApiRequest r;
    std::optional<ApiError> e = parse_messages_body(body, false, kLong, r);
    EXPECT_TRUE(e.has_value()) << body;
    return e.value_or(ApiError{});
  };
  ApiError e = no(thinking_body(R"({"type":"adaptive"})"));
  EXPECT_EQ(e.param, "thinking.type");
  EXPECT_EQ(e.message, "'thinking.type' = \"adaptive\", expected \"enabled\" or \"disabled\"");
  EXPECT_EQ(no(thinking_body(R"({"budget_tokens":2048})")).message,
            "'thinking.type' = absent, expected \"enabled\" or \"disabled\"");
  e = no(thinking_body(R"({"type":"enabled"})"));
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  EXPECT_EQ(e.message,
            "'thinking.budget_tokens' = absent, expected an integer of at least 1024");
  EXPECT_EQ(no(thinking_body(R"({"type":"enabled","budget_tokens":1023})")).message,
            "'thinking.budget_tokens' = 1023, expected an integer of at least 1024");
  EXPECT_EQ(no(thinking_body(R"({"type":"enabled","budget_tokens":2048.5})")).param,
            "thinking.budget_tokens");
  EXPECT_EQ(no(thinking_body(R"({"type":"enabled","budget_tokens":"2048"})")).param,
            "thinking.budget_tokens");
  e = no(thinking_body(R"({"type":"enabled","budget_tokens":2048})", 2048));
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  EXPECT_EQ(e.message, "'thinking.budget_tokens' = 2048 must be less than 'max_tokens' (2048)");
  EXPECT_EQ(anthropic_error_body(e),
            R"x({"error":{"message":"'thinking.budget_tokens' = 2048 must be less than )x"
            R"x('max_tokens' (2048)","type":"invalid_request_error"},"type":"error"})x");
  EXPECT_EQ(no(thinking_body("true")).message,
            "'thinking' is boolean, expected {\"type\": \"enabled\", \"budget_tokens\": N} or "
            "{\"type\": \"disabled\"}");
  e = no(thinking_body(R"({"type":"disabled","budget_tokens":2048})"));
  EXPECT_EQ(e.param, "thinking.budget_tokens");
  EXPECT_EQ(e.code, "unsupported_parameter");
  EXPECT_EQ(no(thinking_body(R"({"type":"enabled","budget_tokens":2048,"display":"omitted"})"))
                .param, "thinking.display");
  // The small server's max_tokens (at most 256) leaves no room for a budget.
  EXPECT_EQ(refused(thinking_body(R"({"type":"enabled","budget_tokens":1024})", 200)).param,
            "thinking.budget_tokens");
}

TEST(AnthropicThinking, AnAssistantsThinkingBlocksBecomeItsReasoning) {
  ApiRequest r;
  ASSERT_FALSE(parse_messages_body(
      R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":[{"type":"thinking","thinking":"First.","signature":"s1"},
      {"type":"redacted_thinking","data":"opaque"},{"type":"thinking","thinking":"Then.",
      "signature":"whatever"},{"type":"text","text":"Hi."}]},
      {"role":"assistant","content":[{"type":"thinking","thinking":"Only this.",
      "signature":"s"}]},{"role":"user","content":"y"}]})",
      false, kLimits, r));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].reasoning, "First.\nThen.");
  EXPECT_EQ(r.messages[1].content, "Hi.");
  EXPECT_EQ(r.messages[2].reasoning, "Only this.");
  EXPECT_EQ(r.messages[2].content, "");
  auto at = [](const std::string& blocks, const std::string& role = "assistant") {
    return refused(R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"},
        {"role":")" + role + R"(","content":[)" + blocks + R"(]},{"role":"user","content":"y"}]})");
  };
  EXPECT_EQ(at(R"({"type":"thinking","signature":"s"})").message,
            "'messages[1].content[0].thinking' is required");
  EXPECT_EQ(at(R"({"type":"thinking","thinking":1})").param, "messages[1].content[0].thinking");
  EXPECT_EQ(at(R"({"type":"redacted_thinking"})").param, "messages[1].content[0].data");
  EXPECT_EQ(at(R"({"type":"thinking","thinking":"t","extra":1})").code, "unsupported_parameter");
  EXPECT_EQ(at(R"({"type":"thinking","thinking":"t"})", "user").param,
            "messages[1].content[0].type");
}

TEST(AnthropicThinking, TheReplyStartsWithAThinkingBlockWhole) {
  serve::RequestResult r;
  r.completions.resize(1);
  r.completions[0].finish = serve::Finish::kStop;
  ResponseMeta m;
  const nlohmann::json j = message_json(m, r, "Hi.", {}, "Say hi.");
  ASSERT_EQ(j["content"].size(), 2u);
  EXPECT_EQ(j["content"][0].dump(),
            R"({"signature":")" + thinking_signature("Say hi.") +
                R"(","thinking":"Say hi.","type":"thinking"})");
  EXPECT_EQ(j["content"][1].dump(), R"({"text":"Hi.","type":"text"})");
  // Thinking and a call: no empty text block.
  const nlohmann::json called =
      message_json(m, r, "", {ApiToolCall{"tu", "get", R"({"q":"a"})"}}, "Look.");
  ASSERT_EQ(called["content"].size(), 2u);
  EXPECT_EQ(called["content"][0]["type"], "thinking");
  EXPECT_EQ(called["content"][1]["type"], "tool_use");
  EXPECT_EQ(message_json(m, r, "Hi.")["content"].size(), 1u);
  // The signature: opaque, the same for the same text, another for another.
  EXPECT_EQ(thinking_signature("Say hi."), thinking_signature("Say hi."));
  EXPECT_NE(thinking_signature("Say hi."), thinking_signature("Say hi!"));
  EXPECT_EQ(thinking_signature("Say hi.").rfind("kvcache-7-", 0), 0u);
  EXPECT_EQ(thinking_signature("Say hi.").size(), std::string("kvcache-7-").size() + 16);
}

TEST(AnthropicThinking, StreamedBlocksOpenInTurnWithTheSignatureBeforeTheStop) {
  auto lines = [](const std::string& events) {  // the data lines only
    std::string out;
    for (size_t at = events.find("data: "); at != std::string::npos;
         at = events.find("data: ", at + 1))
      out += events.substr(at + 6, events.find('\n', at) - at - 6) + "\n";
    return out;
  };
  BlockStream b;
  std::string all;
  for (const char* piece : {"", "Say", " hi."}) all += b.thinking(piece);
  all += b.text("Hi");
  all += b.text("!");
  all += b.close(true);
  const std::string sig = thinking_signature("Say hi.");
  EXPECT_EQ(lines(all),
            R"({"content_block":{"thinking":"","type":"thinking"})"
            R"(,"index":0,"type":"content_block_start"})" "\n"
            R"({"delta":{"thinking":"Say","type":"thinking_delta"})"
            R"(,"index":0,"type":"content_block_delta"})" "\n"
            R"({"delta":{"thinking":" hi.","type":"thinking_delta"})"
            R"(,"index":0,"type":"content_block_delta"})" "\n"
            R"({"delta":{"signature":")" + sig + R"(","type":"signature_delta"})"
            R"(,"index":0,"type":"content_block_delta"})" "\n"
            R"({"index":0,"type":"content_block_stop"})" "\n"
            R"({"content_block":{"text":"","type":"text"})"
            R"(,"index":1,"type":"content_block_start"})" "\n"
            R"({"delta":{"text":"Hi","type":"text_delta"})"
            R"(,"index":1,"type":"content_block_delta"})" "\n"
            R"({"delta":{"text":"!","type":"text_delta"})"
            R"(,"index":1,"type":"content_block_delta"})" "\n"
            R"({"index":1,"type":"content_block_stop"})" "\n");
  EXPECT_EQ(b.next_index(), 2);
  EXPECT_NE(all.find("event: content_block_start\ndata: "), std::string::npos);
  // Thinking then calls: no text block; close(true) with nothing sent: an empty text block.
  BlockStream calls;
  all = calls.thinking("T");
  all += calls.close(false);
  EXPECT_EQ(lines(all).find("\"text\""), std::string::npos);
  EXPECT_EQ(calls.next_index(), 1);
  BlockStream none;
  EXPECT_EQ(lines(none.close(true)),
            R"({"content_block":{"text":"","type":"text"})"
            R"(,"index":0,"type":"content_block_start"})" "\n"
            R"({"index":0,"type":"content_block_stop"})" "\n");
  // Thinking after text opens another thinking block.
  BlockStream again;
  all = again.text("a");
  all += again.thinking("b");
  all += again.close(true);
  EXPECT_EQ(again.next_index(), 2);
  EXPECT_NE(lines(all).find(R"("index":1,"type":"content_block_start")"), std::string::npos);
}

// The data of each event, parsed.
std::vector<nlohmann::json> events_of(const std::string& sse) {
  std::vector<nlohmann::json> out;
  for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1))
    out.push_back(nlohmann::json::parse(sse.substr(at + 6, sse.find('\n', at) - at - 6)));
  return out;
}

TEST(AnthropicThinking, AHarmonyReplyStreamedTokenByTokenSendsThinkingThenText) {
  const std::string reply =
      "<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hi <b>.<|return|>";
  BlockStream blocks;
  ToolCallStream ts(text::ToolSyntax::kHarmony, "", /*calls=*/false);
  bool called = true;
  std::string sse;
  for (size_t i = 0; i < reply.size(); i += 3)
    sse += answer_events(blocks, &ts, /*thinking=*/true, reply.substr(i, 3), false, called);
  sse += answer_events(blocks, &ts, true, "", /*fin=*/true, called);
  EXPECT_FALSE(called);
  std::string kinds, thought, said;
  for (const nlohmann::json& e : events_of(sse)) {
    kinds += e["type"].get<std::string>() + ":" + std::to_string(e["index"].get<int>());
    if (e.contains("content_block")) kinds += ":" + e["content_block"]["type"].get<std::string>();
    if (e.contains("delta")) {
      kinds += ":" + e["delta"]["type"].get<std::string>();
      thought += e["delta"].value("thinking", "");
      said += e["delta"].value("text", "");
      if (e["delta"]["type"] == "signature_delta") {
        EXPECT_EQ(e["delta"]["signature"], thinking_signature("Say hi."));
      }
    }
    kinds += " ";
  }
  EXPECT_EQ(thought, "Say hi.");
  EXPECT_EQ(said, "Hi <b>.");
  // Deltas as the messages grow, one kind of block at a time.
  std::string shape;
  for (size_t at = 0, next; at < kinds.size(); at = next + 1) {
    next = kinds.find(' ', at);
    const std::string k = kinds.substr(at, next - at);
    if (shape.size() < k.size() || shape.compare(shape.size() - k.size() - 1, k.size(), k) != 0)
      shape += k + " ";
  }
  EXPECT_EQ(shape,
            "content_block_start:0:thinking content_block_delta:0:thinking_delta "
            "content_block_delta:0:signature_delta content_block_stop:0 "
            "content_block_start:1:text content_block_delta:1:text_delta content_block_stop:1 ");
  // Thinking not asked for: the reasoning is not sent (the text block opened with the stream).
  BlockStream plain;
  ToolCallStream quiet(text::ToolSyntax::kHarmony, "", false);
  sse = plain.text("");
  sse += answer_events(plain, &quiet, /*thinking=*/false, reply, false, called);
  sse += answer_events(plain, &quiet, false, "", true, called);
  const std::vector<nlohmann::json> events = events_of(sse);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1]["delta"]["text"], "Hi <b>.");
  EXPECT_EQ(sse.find("thinking"), std::string::npos);
}

TEST(AnthropicThinking, AHarmonyCallStreamsAfterItsThinkingBlock) {
  BlockStream blocks;
  ToolCallStream ts(text::ToolSyntax::kHarmony, "", /*calls=*/true);
  bool called = false;
  std::string sse = answer_events(
      blocks, &ts, true,
      "<|channel|>analysis<|message|>Look.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get <|constrain|>json<|message|>{\"q\":\"a\"}<|call|>",
      false, called);
  sse += answer_events(blocks, &ts, true, "", true, called);
  EXPECT_TRUE(called);
  const std::vector<nlohmann::json> e = events_of(sse);
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0]["content_block"]["type"], "thinking");
  EXPECT_EQ(e[1]["delta"]["thinking"], "Look.");
  EXPECT_EQ(e[2]["delta"]["type"], "signature_delta");
  EXPECT_EQ(e[3]["type"], "content_block_stop");
  EXPECT_EQ(e[4]["content_block"]["type"], "tool_use");
  EXPECT_EQ(e[4]["index"], 1);
  EXPECT_EQ(e[5]["delta"]["partial_json"], "{\"q\":\"a\"}");
  EXPECT_EQ(e[6]["index"], 1);
}

}  // namespace
}  // namespace kvcache::server
