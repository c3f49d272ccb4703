// The OpenAI wire format: request parsing and its 400s naming the field, max_tokens against the
// session budget (413), and the shapes of responses, chunks, usage and errors.
#include "server/api.h"

#include <gtest/gtest.h>

#include <limits>

#include "text/grammar_matcher.h"

namespace kvcache::server {
namespace {

using nlohmann::json;

const ApiLimits kLimits{/*vocab=*/256, /*max_sessions=*/4, /*max_session_tokens=*/256};

ApiError expect_error(std::string_view body, bool chat) {
  ApiRequest r;
  std::optional<ApiError> e = parse_request(body, chat, kLimits, r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

TEST(ApiParse, CompletionFieldsAreRead) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"model":"m","prompt":"hi","max_tokens":7,"temperature":0.5,
      "top_p":0.9,"top_k":40,"seed":11,"n":2,"stop":["a","bc"],"stream":true,
      "stream_options":{"include_usage":true},"user":"ignored"})", false, kLimits, r));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_EQ(r.params.sampling.seed, 11u);
  EXPECT_EQ(r.params.n, 2);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(ApiParse, TokenIdPromptAndStopStringAreAccepted) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"prompt":[1,2,255],"stop":"END"})", false, kLimits, r));
  EXPECT_FALSE(r.prompt.has_value());
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 255}));
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"END"}));
}

TEST(ApiParse, ChatMessagesWithStringOrTextParts) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"messages":[{"role":"developer","content":"s"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]})",
                             true, kLimits, r));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
}

TEST(ApiParse, BadInputIsA400NamingTheField) {
  EXPECT_EQ(expect_error("{not json", false).param, "");
  EXPECT_EQ(expect_error("{not json", false).code, "invalid_json");
  EXPECT_EQ(expect_error("[1,2]", false).status, 400);
  EXPECT_EQ(expect_error("\"x\xFFy\"", false).code, "invalid_json");  // invalid UTF-8
  EXPECT_EQ(expect_error(R"({"prompt":"\u00e9\xff"})", false).code, "invalid_json");
  EXPECT_EQ(expect_error(R"({})", false).param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":""})", false).param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":[]})", false).param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":[1,256]})", false).param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":[1,-1]})", false).param, "prompt");
  EXPECT_EQ(expect_error(R"({"prompt":"a","max_tokens":0})", false).param, "max_tokens");
  EXPECT_EQ(expect_error(R"({"prompt":"a","max_tokens":257})", false).param, "max_tokens");
  EXPECT_EQ(expect_error(R"({"prompt":"a","max_tokens":"5"})", false).param, "max_tokens");
  EXPECT_EQ(expect_error(R"({"prompt":"a","max_tokens":1.5})", false).param, "max_tokens");
  EXPECT_EQ(expect_error(R"({"prompt":"a","n":5})", false).param, "n");
  EXPECT_EQ(expect_error(R"({"prompt":"a","temperature":-1})", false).param, "temperature");
  EXPECT_EQ(expect_error(R"({"prompt":"a","top_p":0})", false).param, "top_p");
  EXPECT_EQ(expect_error(R"({"prompt":"a","seed":-3})", false).param, "seed");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stream":"yes"})", false).param, "stream");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stop":[""]})", false).param, "stop");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stop":5})", false).param, "stop");
  EXPECT_EQ(expect_error(R"({"prompt":"a","model":3})", false).param, "model");
  EXPECT_EQ(expect_error(R"({"prompt":"a","stream_options":{"include_usage":1}})", false).param,
            "stream_options.include_usage");
  EXPECT_EQ(expect_error(R"({"messages":[]})", true).param, "messages");
  EXPECT_EQ(expect_error(R"({"messages":"hi"})", true).param, "messages");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"robot","content":"x"}]})", true).param,
            "messages[0].role");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user"}]})", true).param, "messages[0].content");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user","content":5}]})", true).param,
            "messages[0].content");
  EXPECT_EQ(expect_error(R"({"prompt":"a","presence_penalty":"high"})", false).param,
            "presence_penalty");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logprobs":"yes"})", false).param, "logprobs");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user","content":"x"}],"user":5})", true).param,
            "user");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logit_bias":[1]})", false).message,
            "'logit_bias' is array, expected an object");
  const ApiError e = expect_error(R"({"prompt":"a","max_tokens":0})", false);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "'max_tokens' = 0, expected a value in [1, 256]");
}

TEST(ApiParse, NoFieldIsSilentlyIgnored) {
  // Fields the server does not implement: 400 naming them, code unsupported_parameter.
  for (const char* body : {R"({"prompt":"a","tools":[{"type":"function"}]})",
                           R"({"prompt":"a","tool_choice":5})",
                           R"({"prompt":"a","best_of":3})", R"({"prompt":"a","suffix":"z"})",
                           R"({"prompt":"a","echo":true})", R"({"prompt":"a","top_logprobs":3})"}) {
    const ApiError e = expect_error(body, false);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.code, "unsupported_parameter") << body;
    EXPECT_NE(std::string(body).find("\"" + e.param + "\""), std::string::npos) << body;
  }
  EXPECT_EQ(expect_error(R"({"prompt":"a","echo":true})", false).message,
            "'echo' = true is not supported by this server (docs/server.md lists the request "
            "fields)");
  // Message fields too: role and content are read, name is accepted and ignored, tool_calls
  // belong to assistant messages and tool_call_id to tool messages.
  const ApiError tc = expect_error(R"({"messages":[{"role":"user","content":"x"},
      {"role":"user","content":"y","tool_calls":[]}]})", true);
  EXPECT_EQ(tc.param, "messages[1].tool_calls");
  EXPECT_EQ(tc.code, "unsupported_parameter");
  ApiRequest named;
  EXPECT_FALSE(parse_request(R"({"messages":[{"role":"user","content":"x","name":"ann"}]})", true,
                             kLimits, named));
  // Outside the API: unknown_parameter.
  const ApiError u = expect_error(R"({"prompt":"a","max_token":5})", false);
  EXPECT_EQ(u.param, "max_token");
  EXPECT_EQ(u.code, "unknown_parameter");
  EXPECT_EQ(u.message, "unrecognized request field 'max_token'");
  EXPECT_EQ(expect_error(R"({"prompt":"a","messages":[]})", false).param, "messages");
  EXPECT_EQ(expect_error(R"({"messages":[{"role":"user","content":"x"}],"prompt":"a"})", true).param,
            "prompt");
  // Accepted and ignored (type-checked), and API fields at values that ask for nothing.
  ApiRequest r;
  EXPECT_FALSE(parse_request(R"({"prompt":"a","user":"u","metadata":{"k":"v"},
      "echo":false,"best_of":1,"tools":[],"tool_choice":"none","store":false,"suffix":null,
      "parallel_tool_calls":false})", false, kLimits, r));
  EXPECT_EQ(expect_error(R"({"prompt":"a","metadata":"x"})", false).param, "metadata");
  // A caller's own fields (/v1/cache/save's "name") pass when it says so.
  EXPECT_EQ(expect_error(R"({"prompt":"a","name":"p"})", false).param, "name");
  EXPECT_FALSE(parse_request(R"({"prompt":"a","name":"p"})", false, kLimits, r, {"name"}));
}

TEST(ApiParse, LogprobsAreReadInEachEndpointsShape) {
  const char* kChat = R"("messages":[{"role":"user","content":"x"}])";
  auto chat = [&](const std::string& rest) {
    std::string b = "{";
    b += kChat;
    b += rest;
    b += "}";
    return b;
  };
  ApiRequest r;
  ASSERT_FALSE(parse_request(chat(""), true, kLimits, r));
  EXPECT_EQ(r.params.logprobs, -1);
  ASSERT_FALSE(parse_request(chat(R"(,"logprobs":true)"), true, kLimits, r));
  EXPECT_EQ(r.params.logprobs, 0);
  ASSERT_FALSE(parse_request(chat(R"(,"logprobs":true,"top_logprobs":20)"), true, kLimits, r));
  EXPECT_EQ(r.params.logprobs, 20);
  ASSERT_FALSE(parse_request(chat(R"(,"logprobs":false)"), true, kLimits, r));
  EXPECT_EQ(r.params.logprobs, -1);
  EXPECT_EQ(expect_error(chat(R"(,"top_logprobs":3)"), true).message,
            "'top_logprobs' needs 'logprobs': true");
  EXPECT_EQ(expect_error(chat(R"(,"logprobs":true,"top_logprobs":21)"), true).message,
            "'top_logprobs' = 21, expected a value in [0, 20]");
  EXPECT_EQ(expect_error(chat(R"(,"logprobs":3)"), true).param, "logprobs");
  // Completions: the number of alternatives, 0..5.
  ASSERT_FALSE(parse_request(R"({"prompt":"a","logprobs":2})", false, kLimits, r));
  EXPECT_EQ(r.params.logprobs, 2);
  ASSERT_FALSE(parse_request(R"({"prompt":"a","logprobs":0})", false, kLimits, r));
  EXPECT_EQ(r.params.logprobs, 0);
  EXPECT_EQ(expect_error(R"({"prompt":"a","logprobs":6})", false).message,
            "'logprobs' = 6, expected a value in [0, 5]");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logprobs":true})", false).param, "logprobs");
}

TEST(ApiResponse, LogprobsTakeTheOpenAiShapes) {
  std::vector<engine::TokenLogprob> lps(2);
  lps[0] = {65, -0.5f, {{65, -0.5f}, {66, -1.25f}}};
  lps[1] = {10, -std::numeric_limits<float>::infinity(), {}};
  ResponseMeta m;
  m.chat = true;
  m.logprobs = true;
  m.token_bytes = [](int32_t id) { return std::string(1, static_cast<char>(id)); };
  const nlohmann::json c = logprobs_json(m, lps);
  EXPECT_EQ(c.dump(),
            R"({"content":[{"bytes":[65],"logprob":-0.5,"token":"A","top_logprobs":[)"
            R"({"bytes":[65],"logprob":-0.5,"token":"A"},{"bytes":[66],"logprob":-1.25,"token":"B"}]},)"
            R"({"bytes":[10],"logprob":-9999.0,"token":"\n","top_logprobs":[]}],"refusal":null})");
  m.chat = false;
  EXPECT_EQ(logprobs_json(m, lps, 7).dump(),
            R"({"text_offset":[7,8],"token_logprobs":[-0.5,-9999.0],)"
            R"("tokens":["A","\n"],"top_logprobs":[{"A":-0.5,"B":-1.25},{}]})");
  // Without logprobs asked for, a chunk's logprobs is null; with them, the chunk's tokens.
  m.chat = true;
  EXPECT_TRUE(chunk_json(m, 0, "A", false, std::nullopt, false, std::span(lps).first(1))["choices"][0]
                  ["logprobs"]["content"].size() == 1);
  m.logprobs = false;
  EXPECT_TRUE(chunk_json(m, 0, "A", false, std::nullopt)["choices"][0]["logprobs"].is_null());
}

TEST(ApiParse, PenaltiesAndLogitBiasAreRead) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"prompt":"a","presence_penalty":0.5,"frequency_penalty":-1,
      "logit_bias":{"7":-100,"255":2.5}})", false, kLimits, r));
  EXPECT_FLOAT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.frequency_penalty, -1.0f);
  ASSERT_EQ(r.params.logit_bias.size(), 2u);
  EXPECT_EQ(r.params.logit_bias[0], (std::pair<int32_t, float>{255, 2.5f}));  // keys sort as text
  EXPECT_EQ(r.params.logit_bias[1], (std::pair<int32_t, float>{7, -100.0f}));
  EXPECT_EQ(expect_error(R"({"prompt":"a","presence_penalty":99})", false).message,
            "'presence_penalty' = 99, expected a value in [-2, 2]");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logit_bias":{"256":1}})", false).message,
            "'logit_bias' has key \"256\", expected token ids in [0, 256)");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logit_bias":{"x":1}})", false).param, "logit_bias");
  EXPECT_EQ(expect_error(R"({"prompt":"a","logit_bias":{"3":-101}})", false).message,
            "'logit_bias' of 3 = -101, expected a number in [-100, 100]");
}

TEST(ApiParse, ResponseFormatSelectsAGrammar) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"prompt":"a","response_format":{"type":"text"}})", false, kLimits, r));
  EXPECT_EQ(r.params.grammar, nullptr);
  ASSERT_FALSE(parse_request(R"({"prompt":"a","response_format":{"type":"json_object"}})", false,
                             kLimits, r));
  EXPECT_NE(r.params.grammar, nullptr);
  ASSERT_FALSE(parse_request(R"({"messages":[{"role":"user","content":"x"}],"response_format":
      {"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object",
      "properties":{"z":{"type":"integer"},"a":{"type":"string"}},"required":["z","a"],
      "additionalProperties":false}}}})", true, kLimits, r));
  ASSERT_NE(r.params.grammar, nullptr);
  // Properties in the client's order: "z" before "a".
  text::GrammarMatcher m(r.params.grammar);
  EXPECT_NE(m.advance(m.start(), std::string_view(R"({"z":1,"a":"")")), text::kDeadState);
  EXPECT_EQ(m.advance(m.start(), std::string_view(R"({"a")")), text::kDeadState);
}

TEST(ApiParse, BadResponseFormatsAreA400NamingTheField) {
  const ApiError bogus = expect_error(R"({"prompt":"a","response_format":{"type":"bogus"}})", false);
  EXPECT_EQ(bogus.status, 400);
  EXPECT_EQ(bogus.param, "response_format.type");
  EXPECT_EQ(bogus.message, "'response_format.type' = \"bogus\", expected text, json_object or "
                           "json_schema");
  EXPECT_EQ(expect_error(R"({"prompt":"a","response_format":"json"})", false).param,
            "response_format");
  EXPECT_EQ(expect_error(R"({"prompt":"a","response_format":{"type":"json_schema"}})", false).param,
            "response_format.json_schema");
  EXPECT_EQ(expect_error(R"({"prompt":"a","response_format":{"type":"json_schema",
      "json_schema":{"name":"x"}}})", false).param, "response_format.json_schema.schema");
  EXPECT_EQ(expect_error(R"({"prompt":"a","response_format":{"type":"json_object","x":1}})",
                         false).param, "response_format.x");
  const ApiError kw = expect_error(R"({"prompt":"a","response_format":{"type":"json_schema",
      "json_schema":{"name":"t","schema":{"type":"object","properties":{"tags":{"type":"array",
      "uniqueItems":true}}}}}})", false);
  EXPECT_EQ(kw.status, 400);
  EXPECT_EQ(kw.code, "unsupported_schema");
  EXPECT_EQ(kw.param, "response_format.json_schema.schema");
  EXPECT_EQ(kw.message, "unsupported JSON Schema keyword 'uniqueItems' at /properties/tags");
}

TEST(ApiParse, MaxTokensResolvesAgainstTheSessionBudget) {
  ApiRequest r;
  ASSERT_FALSE(parse_request(R"({"prompt":"a"})", false, kLimits, r));
  ASSERT_FALSE(resolve_max_tokens(r, 10, kLimits));
  EXPECT_EQ(r.params.max_new_tokens, kDefaultCompletionTokens);
  ASSERT_FALSE(parse_request(R"({"messages":[{"role":"user","content":"a"}]})", true, kLimits, r));
  ASSERT_FALSE(resolve_max_tokens(r, 56, kLimits));
  EXPECT_EQ(r.params.max_new_tokens, 200);  // the rest of the 256-token budget
  ASSERT_FALSE(parse_request(R"({"prompt":"a","max_tokens":200})", false, kLimits, r));
  std::optional<ApiError> e = resolve_max_tokens(r, 57, kLimits);  // 57 + 200 > 256
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_EQ(e->code, "context_length_exceeded");
  e = resolve_max_tokens(r, 256, kLimits);  // no room for even one token
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 413);
  EXPECT_EQ(e->param, "prompt");
  // The body names the server's option, not a command-line flag.
  EXPECT_EQ(e->message, "'prompt' is 256 tokens; the session budget max_session_tokens is 256");
}

TEST(ApiResponse, ShapesFollowTheOpenAiObjects) {
  serve::RequestResult r;
  r.prompt_tokens = 5;
  r.cached_prompt_tokens = 3;
  r.completions.resize(2);
  r.completions[0].tokens = {1, 2};
  r.completions[0].finish = serve::Finish::kStop;
  r.completions[1].tokens = {3, 4, 5};
  r.completions[1].finish = serve::Finish::kLength;
  const ResponseMeta chat{"chatcmpl-1", 100, "tiny", true};
  const json j = response_json(chat, r, {"ab", "cde"});
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][1]["message"]["content"], "cde");
  EXPECT_EQ(j["choices"][1]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 10);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  const ResponseMeta text{"cmpl-1", 100, "tiny", false};
  EXPECT_EQ(response_json(text, r, {"ab", "cde"})["choices"][0]["text"], "ab");
  EXPECT_EQ(response_json(text, r, {"ab", "cde"})["object"], "text_completion");

  const json first = chunk_json(chat, 0, "", true, std::nullopt);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = chunk_json(chat, 1, "x", false, serve::Finish::kLength);
  EXPECT_EQ(last["choices"][0]["index"], 1);
  EXPECT_EQ(last["choices"][0]["delta"]["content"], "x");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  const json usage = usage_chunk_json(chat, r);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 10);
}

TEST(ApiResponse, ErrorBodyHasTheFourFields) {
  const json e = json::parse(error_body(bad_field("n", "'n' = 9, expected a value in [1, 4]")));
  EXPECT_EQ(e["error"]["message"], "'n' = 9, expected a value in [1, 4]");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "n");
  EXPECT_EQ(e["error"]["code"], "invalid_value");
  const json n = json::parse(error_body(ApiError{404, "no route", "invalid_request_error", "", ""}));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_TRUE(n["error"]["code"].is_null());
  EXPECT_EQ(finish_reason(serve::Finish::kCancelled), "stop");
  EXPECT_EQ(finish_reason(serve::Finish::kCacheFull), "length");
}

}  // namespace
}  // namespace kvcache::server
