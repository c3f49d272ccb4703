// The OpenAI wire format: parsing and checking /v1/completions and /v1/chat/completions
// bodies, and building responses, stream chunks, usage and error objects. Layer: server.
// Pure functions over JSON values: no sockets, no threads, no model (limits come in).
// No field is silently ignored: a field this server does not act on is a 400 naming it
// (code "unsupported_parameter", or "unknown_parameter" outside the API), except user and
// metadata (accepted, type-checked, ignored) and API fields at values that ask for nothing
// ("echo": false, "tools": [], ...). logprobs: chat "logprobs": true with "top_logprobs"
// 0..20; completions "logprobs" 0..5 (the number of alternatives). Fields of the wrong type or range are a 400 too.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/executor.h"
#include "text/chat_template.h"
#include "text/tool_calls.h"
#include "text/tokenizer.h"

namespace kvcache::server {

// {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty = null
  std::string code;   // empty = null
};
std::string error_body(const ApiError& e);
ApiError bad_field(std::string param, std::string message);

struct ApiLimits {
  int64_t vocab = 0;               // token ids are in [0, vocab)
  int32_t max_sessions = 1;        // n is in [1, max_sessions]
  int64_t max_session_tokens = 0;  // prompt + max_tokens
};

inline constexpr int32_t kDefaultCompletionTokens = 16;  // /v1/completions without max_tokens

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// Chat's tools, tool_choice and parallel_tool_calls (api_tools.cpp).
struct ToolsRequest {
  std::vector<std::string> json;              // each tool as the client wrote it (key order)
  std::vector<text::ToolGrammarSpec> specs;   // name and compiled parameters, same order
  ToolChoice choice = ToolChoice::kNone;      // absent: auto with tools, else none
  std::string named;                          // kNamed: the function's name
  bool parallel = true;
  bool active() const { return choice != ToolChoice::kNone; }
};

struct ApiRequest {
  bool chat = false;
  std::string model;                     // echoed back; any value is accepted
  std::optional<std::string> prompt;     // completions: text prompt
  std::vector<int32_t> prompt_ids;       // completions: token-id prompt
  std::vector<text::ChatMessage> messages;     // chat
  std::optional<int32_t> max_tokens;     // nullopt = default (see resolve_max_tokens)
  serve::GenerateParams params;          // sampling, n, stop, ignore_eos
  bool stream = false;
  bool include_usage = false;            // stream_options.include_usage
  ToolsRequest tools;                    // chat
  std::string forced_prefix;             // tool_choice required/named: what the prompt ends
                                         // with (the answer is parsed after it)
  std::string reasoning_effort;          // chat: low, medium or high; empty = not asked
  bool effort_ignorable = false;         // a template without reasoning ignores the effort
                                         // (Anthropic's thinking), else it is a 400
  bool thinking = false;                 // Anthropic thinking enabled: reasoning is sent
};

// Parses a request body. A 400 names the field: malformed JSON (param null), a field of the
// wrong type or out of range, an empty prompt or messages, n above max_sessions, a token id
// outside the vocabulary, max_tokens < 1 or above max_session_tokens.
// `also_allowed`: more top-level fields the caller reads itself (e.g. "name" of
// /v1/cache/save).
std::optional<ApiError> parse_request(std::string_view body, bool chat, const ApiLimits& limits,
                                      ApiRequest& out,
                                      const std::vector<std::string>& also_allowed = {});

// response_format: {"type": "text"} (or null), {"type": "json_object"} (any JSON object) or
// {"type": "json_schema", "json_schema": {"name", "description", "schema", "strict"}}: sets
// p.grammar. A schema the compiler refuses is a 400 with its message (naming the keyword and
// JSON pointer), param "response_format.json_schema.schema", code "unsupported_schema"; an
// unknown type is a 400 naming response_format.type. Ordered JSON: properties keep the
// client's order.
std::optional<ApiError> parse_response_format(const nlohmann::ordered_json& rf,
                                              serve::GenerateParams& p);

// tools (a list of {"type": "function", "function": {"name", "description", "parameters",
// "strict"}}), tool_choice ("none", "auto", "required" or {"type": "function", "function":
// {"name"}}) and parallel_tool_calls (a boolean). A 400 names the field: a tool or choice of
// the wrong shape, a name outside [A-Za-z0-9_-]{1,64}, a duplicate name, a named function that
// is not among the tools, a choice other than none without tools, a parameters schema the
// compiler refuses (code "unsupported_schema", its message naming keyword and JSON pointer).
// Ordered JSON: tools keep the client's key order.
std::optional<ApiError> parse_tools(const nlohmann::ordered_json& body, ToolsRequest& out);

// For an active tool choice on a model of family `t`: the call grammar (lazy, triggered by the
// family's marker, for auto; from the first token, after r.forced_prefix, for required and
// named) into r.params, and r.forced_prefix. The marker's token when it is one control token
// that prints nothing (Mistral's [TOOL_CALLS]) becomes a trigger token. 400 naming
// response_format when it asks for JSON too (one grammar per completion). The same tools,
// choice and family (one of the last 16) give the same grammar object, so requests share its
// matcher and masks.
std::optional<ApiError> plan_tools(ApiRequest& r, text::ChatTemplate t,
                                   const text::Tokenizer& tokenizer);

// A new call id: "call_" and 24 letters or digits; for Mistral, whose template takes 9
// characters, 9 letters and digits.
std::string new_tool_call_id(text::ToolSyntax s);

struct ApiToolCall {
  std::string id, name, arguments;  // arguments: JSON object text
};
// The answer of a completion with tools: parsed after r.forced_prefix; calls get new ids.
// Harmony answers are always split (reasoning from the analysis channel, content from the
// final one); their calls only with `calls` (an active tool choice), else a call stays
// content as written.
struct ChoiceOutput {
  std::string content;
  std::vector<ApiToolCall> calls;
  std::string reasoning;  // harmony's analysis text; empty for the other families
};
ChoiceOutput tool_output(text::ToolSyntax s, std::string_view forced_prefix,
                         std::string_view text, bool calls = true);

// The streamed answer with tools: content goes out as it comes up to where the family's marker
// may begin; the calls are parsed when the completion ends (malformed: the rest is content).
// Harmony: content and reasoning go out as their messages grow (text::HarmonyStream: each token
// reads only the open message).
class ToolCallStream {
 public:
  ToolCallStream(text::ToolSyntax s, std::string forced_prefix, bool calls = true);
  // Content that can be shown now.
  std::string push(std::string_view text);
  // Harmony: reasoning that can be shown now (since the last call); "" for the others.
  std::string take_reasoning();
  // At the end: content and reasoning left to show and the calls (ids made here).
  ChoiceOutput finish();

 private:
  std::string push_harmony(bool partial, ChoiceOutput* whole);

  text::ToolSyntax syntax_;
  std::string buf_;
  size_t sent_ = 0;        // buf_[0, sent_) went out as content (harmony: content's bytes)
  bool in_calls_ = false;  // buf_[sent_, ...) starts with the marker
  bool free_ = false;      // the marker can no longer appear
  text::HarmonyStream harmony_;  // harmony: the reply read so far (calls parsed or not)
  size_t reasoning_read_ = 0;    // harmony: reasoning bytes read
  std::string reasoning_;        // harmony: reasoning read, not taken yet
};

// Sets params.max_new_tokens once the prompt length is known: max_tokens, else 16 for
// completions and the rest of the session budget for chat. 413 (code
// "context_length_exceeded") when prompt + max_tokens exceed max_session_tokens.
std::optional<ApiError> resolve_max_tokens(ApiRequest& r, int64_t prompt_tokens,
                                           const ApiLimits& limits);

// "stop" or "length"; a cancelled completion reports "stop", a full cache "length".
std::string_view finish_reason(serve::Finish f);

struct ResponseMeta {
  std::string id;       // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;
  bool chat = false;
  bool anthropic = false;  // /v1/messages: the Anthropic shapes (anthropic_api.h)
  bool thinking = false;   // /v1/messages: harmony's reasoning goes out as thinking blocks
  // With logprobs asked for (GenerateParams::logprobs >= 0): a token id's bytes, for the
  // entries' "token" and "bytes".
  bool logprobs = false;
  std::function<std::string(int32_t)> token_bytes{};
  bool tools = false;                      // answers are parsed for tool calls
  bool channels = false;                   // harmony: answers are split into reasoning and
                                           // content (with tools or not)
  text::ToolSyntax syntax = text::ToolSyntax::kHermes;
  std::string forced_prefix{};             // ApiRequest::forced_prefix
};

// The logprobs object of one choice for `lps` (the completion's tokens, or a stream chunk's):
// chat {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null};
// completions {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
// with offsets counted from `offset` bytes. A log-probability below -9999 is written as -9999
// (JSON has no infinity).
nlohmann::json logprobs_json(const ResponseMeta& m, std::span<const engine::TokenLogprob> lps,
                             int64_t offset = 0);

// usage: prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details.cached_tokens.
nlohmann::json usage_json(const serve::RequestResult& r);
// The whole response; texts[i] is completion i's text, already valid UTF-8. With `calls`
// (per completion, may be empty): message.tool_calls, content null when empty, and
// finish_reason "tool_calls". `reasoning` (per completion): message.reasoning_content when
// not empty (harmony's analysis channel).
nlohmann::json response_json(const ResponseMeta& m, const serve::RequestResult& r,
                             const std::vector<std::string>& texts,
                             const std::vector<std::vector<ApiToolCall>>& calls = {},
                             const std::vector<std::string>& reasoning = {});
// One stream chunk for choice `index`: text (delta.content for chat; with role on the first
// chat chunk) and a finish reason on the last one.
// With m.logprobs, the chunk's "logprobs" holds `lps` (the tokens it carries; completions'
// text_offset counted from `offset`), else null.
nlohmann::json chunk_json(const ResponseMeta& m, int32_t index, std::string_view text,
                          bool first, std::optional<serve::Finish> finish,
                          bool tool_calls = false,
                          std::span<const engine::TokenLogprob> lps = {}, int64_t offset = 0);
// Stream chunks of one call: the first with id, type and name (arguments ""), then the
// arguments in fragments of at most `fragment` bytes (whole UTF-8 characters).
std::vector<nlohmann::json> tool_call_chunks(const ResponseMeta& m, int32_t index,
                                             int32_t call_index, const ApiToolCall& call,
                                             size_t fragment = 32);
// A chunk of reasoning for choice `index`: delta.reasoning_content.
nlohmann::json reasoning_chunk_json(const ResponseMeta& m, int32_t index,
                                    std::string_view reasoning);
// The usage chunk sent last when stream_options.include_usage: empty choices.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const serve::RequestResult& r);

}  // namespace kvcache::server
