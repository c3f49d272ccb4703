// The OpenAI wire format: request parsing and its 400s naming the field, max_tokens against the
// session budget (413), and the shapes of responses, chunks, usage and errors.
#include "server/api.h"

#include <gtest/gtest.h>

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
  ApiRequest ignored;
  EXPECT_FALSE(parse_request(R"({"prompt":"a","presence_penalty":0.5,"logprobs":2,"user":"u",
      "logit_bias":{},"unknown":[1,{"x":2}]})", false, kLimits, ignored));
  const ApiError e = expect_error(R"({"prompt":"a","max_tokens":0})", false);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "'max_tokens' = 0, expected a value in [1, 256]");
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
