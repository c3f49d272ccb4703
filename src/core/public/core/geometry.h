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

// Storage type of K and V. Serialized by name and by number; append only.
// kQ8_0 / kQ4_0 are the GGUF block layouts (32 values per block; an f16 scale d, then 32 int8
// (value = q * d; 34 bytes) or 16 bytes of nibbles (value = (nibble - 8) * d; 18 bytes)).
// core knows only their sizes; the block rule itself lives in cpu/block_quant.h, shared with
// the weights code.
enum class DType : int { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ4_0 = 4 };

// "f32", "f16", "bf16", "q8_0", "q4_0"
std::string_view to_string(DType dtype);
std::optional<DType> parse_dtype(std::string_view name);    // nullopt when unknown
inline constexpr std::string_view kDTypeNames = "f32, f16, bf16, q8_0 or q4_0";
// Whether `dtype` is one of the five above (a number read from disk may be anything).
bool known_dtype(DType dtype);
inline bool is_block_type(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_0; }
// Values per block (32 for block types, 1 otherwise) and bytes per block.
inline int64_t block_elements(DType dtype) { return is_block_type(dtype) ? 32 : 1; }
inline int64_t block_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    default: return 2;
  }
}
// Per element, for the float types only (f32 4, f16/bf16 2). Block types have no element size:
// use row_bytes.
inline int64_t dtype_size(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }
// Bytes of one row of `width` values: width * element size, or width / 32 blocks. nullopt when
// width < 0, width is not a whole number of blocks, or on overflow.
std::optional<int64_t> row_bytes(DType dtype, int64_t width);

// One cache layer: an attention layer that owns K/V storage.
struct LayerGeometry {
  int32_t kv_heads = 0;   // > 0
  int32_t head_dim = 0;   // key width, > 0
  int32_t value_dim = 0;  // value width, > 0 (equals head_dim unless the model says otherwise)
  int32_t window = 0;     // 0 = Full; W > 0 = Sliding(W): position p sees (p - W, p]
  // Learned attention sinks (gpt-oss): every attend call on this layer brings one logit per
  // query head (AttendArgs::sinks) that joins the softmax denominator with no value vector.
  bool sinks = false;

  bool sliding() const { return window > 0; }
  friend bool operator==(const LayerGeometry&, const LayerGeometry&) = default;
};

struct CacheGeometry {
  std::vector<LayerGeometry> layers;  // one per cache layer; at least one
  friend bool operator==(const CacheGeometry&, const CacheGeometry&) = default;
};

struct CacheConfig {
  int64_t capacity = 0;                 // cells (> 0): longest length / pool size
  DType kv_dtype = DType::kF32;         // K and V storage type unless overridden below
  std::optional<DType> k_dtype;         // key storage type; unset = kv_dtype
  std::optional<DType> v_dtype;         // value storage type; unset = kv_dtype
  // Orthonormal Hadamard rotation of K, V and q per head (cpu/hadamard.h): unset = on when K
  // or V is a block type (q8_0 / q4_0 spread an outlier over the block), off otherwise.
  std::optional<bool> kv_rotate;
  int64_t initial_capacity = 0;         // cells allocated up front (>= 0; clamped to capacity)
  std::optional<int32_t> max_write;     // > 0 when set: most tokens one step may write
  // Cell layout only: most live sequences (ids), >= 1 when set; unset = kDefaultCellSeqs.
  // With max_write it sizes the sliding-window pools (see cell_pools()).
  std::optional<int32_t> max_seqs;
  DType key_type() const { return k_dtype.value_or(kv_dtype); }
  DType value_type() const { return v_dtype.value_or(kv_dtype); }
  bool rotated() const {
    return kv_rotate.value_or(is_block_type(key_type()) || is_block_type(value_type()));
  }
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

// Bytes one cell takes in one layer: kv_heads * (row_bytes(k, head_dim) + row_bytes(v,
// value_dim)). nullopt on overflow or a width a block type cannot hold. Geometry must be valid.
std::optional<int64_t> bytes_per_cell(const LayerGeometry& layer, DType k, DType v);
inline std::optional<int64_t> bytes_per_cell(const LayerGeometry& layer, DType dtype) {
  return bytes_per_cell(layer, dtype, dtype);
}
// Sum over layers; nullopt on overflow.
std::optional<int64_t> bytes_per_cell(const CacheGeometry& geometry, DType k, DType v);
inline std::optional<int64_t> bytes_per_cell(const CacheGeometry& geometry, DType dtype) {
  return bytes_per_cell(geometry, dtype, dtype);
}
// With the config's key and value types.
inline std::optional<int64_t> bytes_per_cell(const LayerGeometry& l, const CacheConfig& c) {
  return bytes_per_cell(l, c.key_type(), c.value_type());
}
inline std::optional<int64_t> bytes_per_cell(const CacheGeometry& g, const CacheConfig& c) {
  return bytes_per_cell(g, c.key_type(), c.value_type());
}

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
// K/V bytes of the sequence layout at capacity: every layer's bytes per cell times its slots.
// nullopt on overflow.
std::optional<int64_t> sequence_bytes_at_capacity(const CacheGeometry& geometry,
                                                  const CacheConfig& config);

// ---- K/V bytes of a cache: the one count the summary reports and a memory budget fills ----
// The most K/V bytes a cache of `kind` ("cell": cell_bytes_at_capacity; "sequence":
// sequence_bytes_at_capacity) allocates. nullopt on overflow or an unknown kind.
std::optional<int64_t> kv_bytes_at_capacity(std::string_view kind, const CacheGeometry& geometry,
                                            const CacheConfig& config);

}  // namespace kvcache
