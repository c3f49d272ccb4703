// `kvcache run`'s session files: a conversation saved as a snapshot (engine/snapshot.h,
// docs/snapshot.md) and restored into a fresh cache of either layout. Layer: tools. Writes a
// progress line on stderr when it is a terminal and the file is large; knows nothing of flags.
#pragma once

#include <string>

#include "core/cache.h"
#include "core/status.h"
#include "engine/model.h"
#include "engine/session.h"

namespace kvcache::tools {

// Writes the session's sequence (K/V and the conversation's ids) to `path`, whole or not at
// all. Prints "saved session: ..." on stderr.
Status save_session_file(const std::string& path, const engine::Model& model,
                         const CacheControl& cache, const engine::Session& session);

// Reads `path`, checks it against the model and cache, writes it into the session's sequence
// (which must be empty) and adopts its ids. Refusals name the file and what differs and
// leave the cache as it was. Prints "loaded session: ..." on stderr.
Status load_session_file(const std::string& path, const engine::Model& model,
                         CacheControl& cache, engine::Session& session);

}  // namespace kvcache::tools
