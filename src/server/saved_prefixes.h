// Saved prefixes over HTTP: POST /v1/cache/save writes the K/V of a prompt's prefix to
// <snapshot-dir>/<name>.kvs (a session snapshot, docs/snapshot.md); POST /v1/cache/restore
// loads one back as a retained prefix, so the next request extending it is a prefix hit.
// Layer: server. Tokens in (the HTTP front encodes prompts), JSON replies out; the executor
// is reached only through EngineLoop::run_on_engine and requests. See docs/server.md.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/engine_loop.h"

namespace kvcache::server {

// 1..64 characters of [A-Za-z0-9._-], not starting with '.': no path can escape the folder.
bool valid_prefix_name(std::string_view name);

// A reply: the HTTP status and either the result object or an error.
struct PrefixReply {
  int status = 200;
  nlohmann::json body;           // the result (status 200)
  std::optional<ApiError> error; // otherwise
};

// Prefills `prompt` (a request of zero new tokens), exports what the pool then holds of it
// and writes dir/name.kvs atomically. 200 {"object": "cache.prefix", "name", "tokens",
// "bytes"}; 503 when the engine is busy or the prefix was evicted before it was saved;
// 500 when the file cannot be written.
PrefixReply save_prefix(EngineLoop& loop, const std::string& dir, const std::string& name,
                        std::vector<int32_t> prompt);

// Reads dir/name.kvs and imports it. 200 {"object": "cache.prefix", "name", "tokens"};
// 404 no such saved prefix; 400 a corrupt file or one for another model, geometry or dtype
// (the message names it); 503 no room.
PrefixReply restore_prefix(EngineLoop& loop, const std::string& dir, const std::string& name);

}  // namespace kvcache::server
