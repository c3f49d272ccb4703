// The Anthropic Messages wire format: POST /v1/messages and /v1/messages/count_tokens bodies
// read into the ApiRequest the OpenAI routes use, and the message, its stream events and the
// error object built back. Layer: server. Pure functions over JSON values, like api.h: no
// sockets, no model. Text and tool use (tools, tool_choice, tool_use / tool_result blocks: read
// as the OpenAI tool fields they mean, so one tool-call machinery serves both); image and
// document blocks, server tools and the rest are a 400 naming them (docs/server.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/executor.h"
#include "server/api.h"

namespace kvcache::server {

// A /v1/messages body (count_only: a /v1/messages/count_tokens body, which has no max_tokens
// and no sampling fields). A 400 names the field: model and max_tokens are required, system is
// a string or a list of text blocks, messages alternate freely between user and assistant but
// must end with a user turn; stop_sequences, temperature (0..1), top_p, top_k, stream,
// metadata (ignored) are read; anything else is refused.
std::optional<ApiError> parse_messages_body(std::string_view body, bool count_only,
                                            const ApiLimits& limits, ApiRequest& out);

// {"type": "error", "error": {"type", "message"}}: the type follows the HTTP status
// (invalid_request_error, authentication_error, not_found_error, request_too_large,
// rate_limit_error, api_error, overloaded_error).
std::string anthropic_error_body(const ApiError& e);

// tool_use (the answer holds calls), end_turn (the model's end or a finished structured
// answer), stop_sequence, max_tokens.
std::string_view stop_reason(const serve::Completion& c, bool tool_use = false);

// The whole message: id "msg_…", content [{"type": "text", "text"} (omitted when empty and
// there are calls), {"type": "tool_use", "id", "name", "input"}...], stop_reason,
// stop_sequence, usage {input_tokens (not taken from the prefix cache),
// cache_read_input_tokens, cache_creation_input_tokens: 0, output_tokens}.
nlohmann::json message_json(const ResponseMeta& m, const serve::RequestResult& r,
                            const std::string& text, const std::vector<ApiToolCall>& calls = {});
// Stream events, in order: message_start (usage with the prompt's tokens), content_block_start,
// content_block_delta per piece of text, content_block_stop, message_delta (stop reason and
// output tokens), message_stop. `event` frames one as "event: NAME\ndata: JSON\n\n".
nlohmann::json message_start_json(const ResponseMeta& m, int64_t prompt_tokens);
nlohmann::json text_delta_json(std::string_view text);
nlohmann::json message_delta_json(const serve::RequestResult& r, bool tool_use = false);
// A call streamed as content block `index`: content_block_start (tool_use with input {}), one
// input_json_delta with the arguments, content_block_stop.
std::string tool_use_events(int32_t index, const ApiToolCall& call);
std::string event(const nlohmann::json& data);

}  // namespace kvcache::server
