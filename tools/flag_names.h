// Library errors name option fields ("cache options: capacity = 0, expected > 0"); the CLI
// names flags. Layer: tools. The tables here say which flag sets which field; flag_message
// puts the flag before a message that names one. It parses nothing and prints nothing.
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvcache::tools {

struct FieldFlag {
  std::string_view field;  // as the library names it: engine::CacheOptions::max_step_tokens
  std::string_view flag;   // as the user types it: --max-step-tokens
};

// engine::CacheOptions (run, inspect).
inline constexpr FieldFlag kCacheFieldFlags[] = {
    {"kv_memory", "--kv-memory"},
    {"kind", "--cache"},
    {"capacity", "--capacity"},
    {"initial_capacity", "--initial-capacity"},
    {"max_step_tokens", "--max-step-tokens"},
    {"windows", "--windows"},
};
// engine::SamplerConfig (run, batch).
inline constexpr FieldFlag kSamplerFieldFlags[] = {
    {"temperature", "--temperature"}, {"top_k", "--top-k"}, {"top_p", "--top-p"}};
// serve::ExecutorOptions (batch, serve).
inline constexpr FieldFlag kExecutorFieldFlags[] = {
    {"kv_memory", "--kv-memory"},
    {"max_sessions", "--max-sessions"},
    {"max_session_tokens", "--max-session-tokens"},
    {"pool_cells", "--pool-tokens"},
    {"step_tokens", "--step-tokens"},
    {"block_tokens", "--kv-block-tokens"},
    {"initial_capacity", "--initial-capacity"},
    {"kv_store", "--kv-store"},
    {"prefix_checkpoints", "--prefix-checkpoints"},
    {"draft_max", "--draft-max"},
};
// text::choose_chat_template's problem (run --chat, serve).
inline constexpr FieldFlag kChatFieldFlags[] = {{"chat_template", "--chat-template"}};

// "--flag: <message>" for the first table entry whose field the message names (the field
// after the start or a space, followed by " =", "[" or ":"); else the message unchanged.
std::string flag_message(const Status& s, std::initializer_list<std::span<const FieldFlag>> tables);

}  // namespace kvcache::tools
