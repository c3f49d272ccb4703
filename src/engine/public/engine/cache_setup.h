// Turns a model's published geometry plus the run-time choices (layout kind, capacity, dtype,
// step size, window override) into a cache geometry + config, and builds the cpu cache.
// Layer: engine. The window override changes only the policies; the step size drops to the
// narrowest window when larger.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/cache.h"
#include "core/geometry.h"
#include "engine/model.h"

namespace kvcache::engine {

inline constexpr int64_t kDefaultCapacity = 4096;    // cap on the default capacity
inline constexpr int64_t kDefaultStepTokens = 512;   // when the model names none

struct CacheOptions {
  std::string kind = std::string(kSequenceKind);  // "sequence" | "cell"
  std::optional<int64_t> capacity;          // default: min(max_context, kDefaultCapacity)
  int64_t initial_capacity = 0;
  DType kv_dtype = DType::kF32;             // K and V, unless one is overridden below
  std::optional<DType> k_dtype;             // key storage type; unset = kv_dtype
  std::optional<DType> v_dtype;             // value storage type; unset = kv_dtype
  std::optional<bool> kv_rotate;            // Hadamard rotation; unset = on for block types
  std::optional<int64_t> max_step_tokens;   // default: the model's, else kDefaultStepTokens
  std::vector<int32_t> windows;             // override (program's with_windows); 0 = Full
  // Cell kind only: most live sequences (>= 1); with the step it sizes the sliding-window
  // pools. Default: the layout's (kDefaultCellSeqs).
  std::optional<int32_t> max_seqs;
};

struct CacheSetup {
  std::string kind;
  CacheGeometry geometry;   // the model's, with the override's windows
  CacheConfig config;       // max_write = step_tokens
  int64_t step_tokens = 0;  // the prefill chunk
};

// InvalidArgument naming the CacheOptions field ("cache options: capacity = 0, ...") and
// value for an unknown kind, capacity <= 0, step <= 0, a bad window list, max_seqs < 1 or set
// for the sequence kind, or a geometry/config the core validation refuses.
Result<CacheSetup> plan_cache(const Model& model, const CacheOptions& options);

// The one default capacity of a sequence (run's cache, each executor session):
// min(the model's context, kDefaultCapacity), where the context is the geometry's max_context
// or else the hyperparameters' context_length; kDefaultCapacity when both are unknown.
int64_t default_capacity(const Model& model);
// The model's context as above; 0 = unknown.
int64_t model_context(const Model& model);

// Registers the cpu builders (idempotent) and builds the cache for the setup.
Result<std::shared_ptr<Cache>> build_cache(const CacheSetup& setup);

}  // namespace kvcache::engine
