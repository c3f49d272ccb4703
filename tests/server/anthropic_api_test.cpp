// The Anthropic Messages wire format: bodies read into ApiRequest (fields, defaults, the 400s
// naming what is refused) and the message, stream events and error objects built back.
// Layer: tests (server).
#include "server/anthropic_api.h"

#include <gtest/gtest.h>

#include <string>

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
  EXPECT_EQ(refused(body(R"(,"max_tokens":5,"thinking":{"type":"enabled"})")).code,
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

}  // namespace
}  // namespace kvcache::server
