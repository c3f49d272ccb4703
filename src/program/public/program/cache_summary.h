// The cache summary of SPEC §8, shared by `kvcache inspect` and `kvcache run`: per cache layer
// heads, widths, policy and bytes per cell; layers grouped by policy; bytes at capacity; and
// what sliding windows save. Layer: program. Pure computation over a geometry and a config;
// it allocates no cache and reads no file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/geometry.h"
#include "program/model_geometry.h"

namespace kvcache {

struct SummaryOptions {
  CacheConfig config;          // capacity 0 = sessions * session_tokens
  int64_t sessions = 1;        // sessions sharing the pool (reporting; see config.max_seqs)
  int64_t session_tokens = 0;  // tokens per session; 0 = capacity / sessions
  std::string kind = "cell";   // the layout bytes_at_capacity is for: "cell" or "sequence"
  // The K/V memory budget (bytes) the capacity was sized from, when one was: reported as
  // "kv_memory": {"budget", "bytes" (= bytes_at_capacity), "capacity", "sessions"}.
  std::optional<int64_t> kv_memory;
};

// The pool size the summary reports: config.capacity when > 0, else sessions*session_tokens.
int64_t summary_capacity(const SummaryOptions& options);

// JSON object with (stable names) "layers": [{"kv_heads","head_dim","value_dim","window",
// "bytes_per_cell","slots","model_layers"}], "layer_cache", "kv_dtype", "capacity",
// "bytes_per_cell", "bytes_at_capacity", plus "k_dtype", "v_dtype" (kv_dtype is their common
// name, or "k=<type>,v=<type>" when they differ), "bytes_per_cell_f16" (the same cells in f16),
// "kind", "n_layers", "n_caches", "groups",
// "sessions", "session_tokens", "bytes_per_session", "all_positions_bytes_at_capacity",
// "sequence_bytes_at_capacity", "sliding_saving_bytes", "checkpoint_bytes", and for the cell
// layout "max_seqs" and "pools": [{"window","layers","cells","bytes"}] (core cell_pools()).
//   bytes_at_capacity: the most K/V the layout asked for allocates (core kv_bytes_at_capacity,
//     also what a K/V memory budget is filled with) — the cell layout: the sum
//     of its pools (a Sliding(W) pool holds min(capacity, max_seqs * (W - 1) + M) cells);
//     the sequence layout: sequence_bytes_at_capacity.
//   all_positions_bytes_at_capacity: capacity cells in every cache layer (no window savings).
//   sequence_bytes_at_capacity: one sequence of `capacity` tokens in the sequence layout, where
//     a Sliding(W) layer keeps a ring of min(W + max_write - 1, capacity) slots.
//   sliding_saving_bytes = all_positions_bytes_at_capacity - sequence_bytes_at_capacity.
//   checkpoint_bytes: what one undo checkpoint copies in the sequence layout (W - 1 cells of
//     every sliding layer), saved at the start of each interactive turn.
// When the geometry or config is invalid, the kind unknown, or a size overflows, the object
// is {"error": "<reason>"}.
nlohmann::json cache_summary_json(const ModelGeometry& geometry, const SummaryOptions& options);

// The same facts as human-readable text: a header line, a per-cache-layer table and totals
// in human units (KiB/MiB/GiB). Ends with a newline.
std::string cache_summary_text(const ModelGeometry& geometry, const SummaryOptions& options);

// "26 layers: 4 full + 22 sliding(512)" (counts model layers by the policy of the cache read).
std::string policy_groups(const ModelGeometry& geometry);

// "1.50 MiB", "512 B".
std::string human_bytes(int64_t bytes);

}  // namespace kvcache
