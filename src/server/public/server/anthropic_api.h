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
// metadata (ignored) and thinking (both routes: read_thinking in anthropic_api.cpp) are read;
// anything else is refused. An assistant's thinking blocks become its reasoning (their
// signatures are not checked), redacted_thinking blocks are dropped.
std::optional<ApiError> parse_messages_body(std::string_view body, bool count_only,
                                            const ApiLimits& limits, ApiRequest& out);

// thinking.budget_tokens: at least this, and less than max_tokens.
inline constexpr int32_t kMinThinkingBudget = 1024;
// The harmony reasoning effort thinking {"type": "enabled", "budget_tokens": N} asks for:
// low below 4096, medium below 16384, else high ({"type": "disabled"}: low).
std::string_view thinking_effort(int64_t budget_tokens);
// A thinking block's signature: opaque, the same for the same text while the server runs
// (a keyed hash; the key is made at start), so a client has one to send back.
std::string thinking_signature(std::string_view thinking);

// {"type": "error", "error": {"type", "message"}}: the type follows the HTTP status
// (invalid_request_error, authentication_error, not_found_error, request_too_large,
// rate_limit_error, api_error, overloaded_error).
std::string anthropic_error_body(const ApiError& e);

// tool_use (the answer holds calls), end_turn (the model's end or a finished structured
// answer), stop_sequence, max_tokens.
std::string_view stop_reason(const serve::Completion& c, bool tool_use = false);

// The whole message: id "msg_…", content [{"type": "thinking", "thinking", "signature"} (when
// `reasoning` is not empty), {"type": "text", "text"} (omitted when empty and there are
// calls), {"type": "tool_use", "id", "name", "input"}...], stop_reason, stop_sequence, usage
// {input_tokens (not taken from the prefix cache), cache_read_input_tokens,
// cache_creation_input_tokens: 0, output_tokens}.
nlohmann::json message_json(const ResponseMeta& m, const serve::RequestResult& r,
                            const std::string& text, const std::vector<ApiToolCall>& calls = {},
                            const std::string& reasoning = "");
// Stream events, in order: message_start (usage with the prompt's tokens), content_block_start,
// content_block_delta per piece of text, content_block_stop, message_delta (stop reason and
// output tokens), message_stop. `event` frames one as "event: NAME\ndata: JSON\n\n".
nlohmann::json message_start_json(const ResponseMeta& m, int64_t prompt_tokens);
nlohmann::json text_delta_json(std::string_view text, int32_t index = 0);
nlohmann::json message_delta_json(const serve::RequestResult& r, bool tool_use = false);
// A call streamed as content block `index`: content_block_start (tool_use with input {}), one
// input_json_delta with the arguments, content_block_stop.
std::string tool_use_events(int32_t index, const ApiToolCall& call);
std::string event(const nlohmann::json& data);

// A streamed message's thinking and text blocks, each opened (content_block_start) by its
// first piece at the next index; a piece of the other kind stops the open block first, a
// thinking block after a signature_delta with thinking_signature of its text.
class BlockStream {
 public:
  std::string thinking(std::string_view piece);  // thinking_delta ("" sends nothing)
  std::string text(std::string_view piece);      // text_delta ("" only opens a text block)
  // Stops the open block; with `text_if_none`, an empty text block first when none was sent.
  std::string close(bool text_if_none);
  int32_t next_index() const { return index_ + 1; }

 private:
  enum class Kind { kNone, kThinking, kText };
  std::string start(Kind k);
  std::string stop();

  Kind open_ = Kind::kNone;
  int32_t index_ = -1;  // the open or last block's
  bool texted_ = false;  // a text block was opened
  std::string thought_;  // the open thinking block's text
};

// One streamed answer's events for its next text and, with `fin`, its end: with `ts` (tools,
// or a harmony reply) the content it shows and, with `thinking`, its reasoning as thinking
// blocks; at the end the last block's stop (an empty text block first when there is no text
// and no call) and a tool_use block per call (`called`: there were calls).
std::string answer_events(BlockStream& blocks, ToolCallStream* ts, bool thinking,
                          std::string_view text, bool fin, bool& called);

}  // namespace kvcache::server
