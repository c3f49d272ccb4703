// Cache geometry (published by the model) and cache config (chosen at run time), with the
// validation every construction path runs. Layer: core. Integers only; no K/V bytes here.
// See SPEC §2. Sizes that reach memory are computed with overflow checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvcache {

// Storage type of K and V. Serialized by name; append only.
enum class DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

std::string_view to_string(DType dtype);                    // "f32", "f16", "bf16"
std::optional<DType> parse_dtype(std::string_view name);    // nullopt when unknown
inline int64_t dtype_size(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }  // per element

// One cache layer: an attention layer that owns K/V storage.
struct LayerGeometry {
  int32_t kv_heads = 0;   // > 0
  int32_t head_dim = 0;   // key width, > 0
  int32_t value_dim = 0;  // value width, > 0 (equals head_dim unless the model says otherwise)
  int32_t window = 0;     // 0 = Full; W > 0 = Sliding(W): position p sees (p - W, p]

  bool sliding() const { return window > 0; }
  friend bool operator==(const LayerGeometry&, const LayerGeometry&) = default;
};

struct CacheGeometry {
  std::vector<LayerGeometry> layers;  // one per cache layer; at least one
  friend bool operator==(const CacheGeometry&, const CacheGeometry&) = default;
};

struct CacheConfig {
  int64_t capacity = 0;                 // cells (> 0): longest length / pool size
  DType kv_dtype = DType::kF32;
  int64_t initial_capacity = 0;         // cells allocated up front (>= 0; clamped to capacity)
  std::optional<int32_t> max_write;     // > 0 when set: most tokens one step may write
  // Cell layout only: most live sequences (ids), >= 1 when set; unset = kDefaultCellSeqs.
  // With max_write it sizes the sliding-window pools (see cell_pools()).
  std::optional<int32_t> max_seqs;
  friend bool operator==(const CacheConfig&, const CacheConfig&) = default;
};

// Why a geometry or config is invalid: the field, the cache layer (-1 when not per layer),
// the offending value and the expectation. Rendered by message().
struct Invalid {
  std::string field;     // "kv_heads", "capacity", "layers", ...
  int32_t layer = -1;    // cache layer index, -1 = not per layer
  int64_t value = 0;
  std::string expected;  // "> 0", ">= 0", "at least one layer", ...
  std::string message() const;  // "layers[2].head_dim = -1, expected > 0"
};

// Explaining forms: nullopt when valid.
std::optional<Invalid> why_invalid(const CacheGeometry& geometry);
std::optional<Invalid> why_invalid(const CacheConfig& config);
std::optional<Invalid> why_invalid(const CacheGeometry& geometry, const CacheConfig& config);

inline bool valid(const CacheGeometry& g) { return !why_invalid(g).has_value(); }
inline bool valid(const CacheConfig& c) { return !why_invalid(c).has_value(); }
inline bool valid(const CacheGeometry& g, const CacheConfig& c) {
  return !why_invalid(g, c).has_value();
}
// The same check as a Status: InvalidArgument "<what>: <reason>" or ok.
Status validate(const CacheGeometry& g, const CacheConfig& c, std::string_view what);

// Overflow-checked arithmetic for sizes; nullopt on overflow or a negative operand.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
std::optional<int64_t> checked_add(int64_t a, int64_t b);

// Bytes one cell takes in one layer: kv_heads * (head_dim + value_dim) * dtype_size.
// nullopt on overflow. Geometry must be valid.
std::optional<int64_t> bytes_per_cell(const LayerGeometry& layer, DType dtype);
// Sum over layers; nullopt on overflow.
std::optional<int64_t> bytes_per_cell(const CacheGeometry& geometry, DType dtype);

// ---- the window rule: its one home (SPEC §2) ----
// The lowest position a query at `pos` sees on a layer of `window` (0 = Full: 0; Sliding(W):
// max(0, pos - W + 1), the current token plus W - 1 before it). Also the lowest position a
// layer must still hold for a sequence whose next position is `pos`.
inline int64_t first_visible(int32_t window, int64_t pos) {
  return window > 0 ? (pos - window + 1 > 0 ? pos - window + 1 : 0) : 0;
}
inline int64_t first_visible(const LayerGeometry& layer, int64_t pos) {
  return first_visible(layer.window, pos);
}
// The most tokens one step writes into a layer of `window` under `config`: max_write when set,
// else W on a sliding layer and capacity on a full one.
int64_t step_rows(int32_t window, const CacheConfig& config);

// Largest step a sequence-layout cache accepts: min over sliding layers of (max_write or W),
// else max_write, else capacity.
int64_t step_limit(const CacheGeometry& geometry, const CacheConfig& config);

// Whether some layer's window looks back at earlier positions (W > 1): only then can a ring or
// a sliding pool lose what a return to an earlier position needs (CacheControl::save_point).
bool looks_back(const CacheGeometry& geometry);

// ---- the cell layout's pools (SPEC §4, §15) ----
inline constexpr int32_t kDefaultCellSeqs = 256;
int32_t cell_max_seqs(const CacheConfig& config);  // max_seqs or kDefaultCellSeqs

// Layers with the same window share one cell pool with its own cell numbering. The full pool
// (window 0) holds `capacity` cells. A Sliding(W) pool keeps, per live sequence, only the
// positions a future query can see — its last W - 1 — plus the open step's tokens, so it holds
// min(capacity, max_seqs * (W - 1) + M) cells, M = max_write or W (the most tokens one step
// writes): exactly enough that max_seqs sequences and any step of at most M tokens are never
// refused by it. (No sliding pool needs more than capacity: its cells map one-to-one onto
// full-pool cells of the same tokens.)
struct CellPool {
  int32_t window = 0;           // 0 = full
  std::vector<int32_t> layers;  // cache layers, ascending
  int64_t cells = 0;            // the pool's maximum
  friend bool operator==(const CellPool&, const CellPool&) = default;
};
// Full pool first (when any layer is full), then sliding pools by ascending window.
// Geometry and config must be valid.
std::vector<CellPool> cell_pools(const CacheGeometry& geometry, const CacheConfig& config);
// K/V bytes of every pool at its maximum; nullopt on overflow.
std::optional<int64_t> cell_bytes_at_capacity(const CacheGeometry& geometry,
                                              const CacheConfig& config);

// Ring slots a sliding layer keeps in the sequence layout: min(W + M - 1, capacity) where
// M = max_write or W. Full layers: capacity.
int64_t sequence_slots(const LayerGeometry& layer, const CacheConfig& config);

}  // namespace kvcache
