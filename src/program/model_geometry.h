// The cache geometry a model file publishes: from the kvcache.* keys of SPEC §7 when present,
// else derived from llama.cpp's standard keys and per-architecture layer patterns.
// Layer: program. Reader and writer enforce the same invariants; errors name key, index, value.
#pragma once

#include <cstdint>
#include <vector>

#include "core/geometry.h"
#include "core/status.h"
#include "program/gguf.h"

namespace kvcache {

struct ModelGeometry {
  CacheGeometry cache;               // one entry per cache layer
  std::vector<int32_t> layer_cache;  // per model layer: the cache layer it reads
  int64_t max_context = 0;           // 0 = unknown
  int64_t max_step_tokens = 0;       // 0 = unset
  friend bool operator==(const ModelGeometry&, const ModelGeometry&) = default;
};

// InvalidArgument naming the field/index/value when inconsistent (also runs valid(cache)).
Status validate_model_geometry(const ModelGeometry& g);

// kvcache.* keys when present; else llama.cpp-style keys under general.architecture.
Result<ModelGeometry> read_model_geometry(const gguf::GgufFile& file);
// Writes the kvcache.* keys; refuses what the reader would refuse.
Status write_model_geometry(const ModelGeometry& g, gguf::GgufWriter& writer);

}  // namespace kvcache
