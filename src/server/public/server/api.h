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
  // With logprobs asked for (GenerateParams::logprobs >= 0): a token id's bytes, for the
  // entries' "token" and "bytes".
  bool logprobs = false;
  std::function<std::string(int32_t)> token_bytes;
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
// The whole response; texts[i] is completion i's text, already valid UTF-8.
nlohmann::json response_json(const ResponseMeta& m, const serve::RequestResult& r,
                             const std::vector<std::string>& texts);
// One stream chunk for choice `index`: text (delta.content for chat; with role on the first
// chat chunk) and a finish reason on the last one.
// With m.logprobs, the chunk's "logprobs" holds `lps` (the tokens it carries; completions'
// text_offset counted from `offset`), else null.
nlohmann::json chunk_json(const ResponseMeta& m, int32_t index, std::string_view text,
                          bool first, std::optional<serve::Finish> finish,
                          std::span<const engine::TokenLogprob> lps = {}, int64_t offset = 0);
// The usage chunk sent last when stream_options.include_usage: empty choices.
nlohmann::json usage_chunk_json(const ResponseMeta& m, const serve::RequestResult& r);

}  // namespace kvcache::server
