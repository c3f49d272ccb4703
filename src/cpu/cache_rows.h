// Internal to the cpu caches: the checks and row copies read_rows/write_rows share in both
// layouts — the range and append checks, which positions each layer must be given, matching
// the caller's LayerRows to cache layers (sizes checked), and copying one position's row
// between a pool cell and a LayerRows. Layer: cpu. Claims no cell itself.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/cache.h"
#include "cpu/kv_pool.h"

namespace kvcache::cpu::detail {

// read_rows' range check: InvalidArgument for from < 0 or from > to; OutOfRange for to > end.
Status check_read_range(int32_t seq, int64_t from, int64_t to, int64_t end);
// write_rows' append check: InvalidArgument unless from == end (the sequence's pos) and to >= from.
Status check_append(int32_t seq, int64_t from, int64_t to, int64_t end);

// Per cache layer, the first position write_rows must be given: from on a full layer,
// max(from, to - (W - 1)) on a Sliding(W) one (what it still holds after the append).
std::vector<int64_t> needed_from(const CacheGeometry& g, int64_t from, int64_t to);

// Per cache layer, the caller's rows for it: exactly one LayerRows per layer, covering
// [need[layer], to), with k and v sized n x kv_heads x row_bytes(k_dtype, head_dim) (v_dtype,
// value_dim): blocks move as they are stored.
// InvalidArgument naming the layer and what is missing or mis-sized.
Result<std::vector<const LayerRows*>> match_rows(const CacheGeometry& g, DType k_dtype,
                                                 DType v_dtype,
                                                 std::span<const LayerRows> rows,
                                                 std::span<const int64_t> need, int64_t to);

// An empty LayerRows for positions [first, first + n) of `layer`, buffers sized.
LayerRows make_rows(const CacheGeometry& g, DType k_dtype, DType v_dtype, int32_t layer,
                    int64_t first, int64_t n);

// Copies the row of position p (first <= p < first + n) between a pool cell and `rows`.
inline void row_out(const LayerPool& pool, int64_t cell, LayerRows& rows, int64_t p) {
  const auto i = static_cast<size_t>(p - rows.first);
  const size_t kb = rows.k.size() / static_cast<size_t>(rows.n);
  const size_t vb = rows.v.size() / static_cast<size_t>(rows.n);
  pool.copy_out(cell, reinterpret_cast<std::byte*>(rows.k.data() + i * kb),
                reinterpret_cast<std::byte*>(rows.v.data() + i * vb));
}
inline void row_in(LayerPool& pool, int64_t cell, const LayerRows& rows, int64_t p) {
  const auto i = static_cast<size_t>(p - rows.first);
  const size_t kb = rows.k.size() / static_cast<size_t>(rows.n);
  const size_t vb = rows.v.size() / static_cast<size_t>(rows.n);
  pool.copy_in(cell, reinterpret_cast<const std::byte*>(rows.k.data() + i * kb),
               reinterpret_cast<const std::byte*>(rows.v.data() + i * vb));
}

}  // namespace kvcache::cpu::detail
