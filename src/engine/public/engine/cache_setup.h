// Turns a model's published geometry plus the run-time choices (layout kind, capacity or a K/V
// memory budget, dtype, step size, window override) into a cache geometry + config, and builds
// the cpu cache. Also the one sizing rule of a cell pool shared by sessions (the executor's,
// which `inspect` reports too). Layer: engine. The window override changes only the policies.
// A step may be wider than a sliding window: such a layer's ring holds W + step - 1 rows (SPEC
// §2), so a model with a 128-token window still prefills 512 tokens a step. Byte counts come from core
// (kv_bytes_at_capacity); nothing here allocates K/V.
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
#include "program/model_geometry.h"

namespace kvcache::engine {

inline constexpr int64_t kDefaultCapacity = 4096;    // cap on the default capacity
inline constexpr int64_t kDefaultStepTokens = 512;   // when the model names none
inline constexpr int64_t kMaxCapacity = 2147483647;  // core's bound on cells (2^31 - 1)

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
  // A K/V memory budget in bytes (> 0) sizing the capacity, instead of `capacity` (setting both
  // is refused): the largest capacity whose kv_bytes_at_capacity fits in it, at most the
  // model's context (kMaxCapacity when unknown). Granularity one cell: neither layout rounds.
  std::optional<int64_t> kv_memory;
};

struct CacheSetup {
  std::string kind;
  CacheGeometry geometry;   // the model's, with the override's windows
  CacheConfig config;       // max_write = step_tokens
  int64_t step_tokens = 0;  // the prefill chunk
  std::optional<int64_t> kv_memory;  // the K/V budget (bytes) the capacity was sized from
};

// InvalidArgument naming the CacheOptions field ("cache options: capacity = 0, ...") and
// value for an unknown kind, capacity <= 0, step <= 0, a bad window list, max_seqs < 1 or set
// for the sequence kind, kv_memory <= 0 or set with capacity, or a geometry/config the core
// validation refuses. ResourceExhausted naming kv_memory, the budget and the bytes capacity 1
// needs when the budget cannot hold even that.
Result<CacheSetup> plan_cache(const Model& model, const CacheOptions& options);
// The same from a published geometry alone (inspect): `context` is the model's context as
// model_context() gives it, 0 = unknown.
Result<CacheSetup> plan_cache(const ModelGeometry& geometry, int64_t context,
                              const CacheOptions& options);

// K/V bytes the planned cache allocates at capacity (core kv_bytes_at_capacity; fits: the plan
// validated capacity * bytes per cell).
int64_t kv_bytes(const CacheSetup& setup);

// The one default capacity of a sequence (run's cache, each executor session):
// min(the model's context, kDefaultCapacity), where the context is the geometry's max_context
// or else the hyperparameters' context_length; kDefaultCapacity when both are unknown.
int64_t default_capacity(const Model& model);
int64_t default_capacity(int64_t context);  // the same for a known context (0 = unknown)
// The model's context as above; 0 = unknown.
int64_t model_context(const Model& model);

// ---- the cell pool of sessions: its one sizing rule (the executor's; inspect's sessions) ----
inline constexpr int32_t kMaxPoolSessions = kDefaultCellSeqs / 2;  // 2 sequence ids each

struct SessionPool {
  int32_t max_sessions = 8;           // 1..kMaxPoolSessions; with kv_memory: ignored (derived)
  int64_t max_session_tokens = 0;     // 0 = default_capacity; at most the model's context
  std::optional<int64_t> pool_cells;  // the full pool; unset = max_sessions * max_session_tokens;
                                      // in [max_session_tokens, kMaxCapacity]
  int32_t retained_seqs = 0;          // sequence ids beyond two per session (checkpoints), >= 0
  // A K/V memory budget in bytes (> 0; not with pool_cells): max_sessions becomes the most
  // sessions (at most kMaxPoolSessions) whose pool's kv_bytes_at_capacity fits in it.
  std::optional<int64_t> kv_memory;
};

struct SessionPlan {
  CacheSetup setup;                // kind cell
  int32_t max_sessions = 0;        // as given, or what kv_memory bought
  int64_t max_session_tokens = 0;  // resolved default
};

// The cell pool for sessions: capacity = pool_cells or max_sessions * max_session_tokens;
// max_seqs = min(2 * max_sessions + retained_seqs, kDefaultCellSeqs) (each session, one
// retained prefix per session, the checkpoints), which with the step sizes the sliding pools
// (core cell_pools()). `options` gives dtypes, step, windows and initial capacity; its kind,
// capacity, max_seqs and kv_memory are replaced. InvalidArgument naming the SessionPool field
// ("session pool: max_sessions = 0, expected 1..128") or what plan_cache refuses;
// ResourceExhausted naming kv_memory, the budget and one session's bytes when not even one
// session fits.
Result<SessionPlan> plan_session_pool(const Model& model, const CacheOptions& options,
                                      const SessionPool& pool);
Result<SessionPlan> plan_session_pool(const ModelGeometry& geometry, int64_t context,
                                      const CacheOptions& options, const SessionPool& pool);

// Registers the cpu builders (idempotent) and builds the cache for the setup.
Result<std::shared_ptr<Cache>> build_cache(const CacheSetup& setup);

}  // namespace kvcache::engine
