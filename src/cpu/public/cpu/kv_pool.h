// LayerPool: one cache layer's K and V storage, K in its key type and V in its value type
// (f32/f16/bf16 elements or q8_0/q4_0 blocks of 32, a row = head_dim or value_dim values).
// Layer: cpu.
// Head-major: per kv head a contiguous array of rows [cell][dim], so the q heads of one GQA
// group stream one contiguous region per head. Rows grow lazily by doubling up to a maximum;
// growth copies each head's rows to the same cell indices (cells are never renumbered).
// Buffers are 64-byte aligned. Move-only (big buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/geometry.h"
#include "core/status.h"

namespace kvcache::cpu {

struct AlignedFree {
  void operator()(std::byte* p) const;
};
using AlignedBytes = std::unique_ptr<std::byte[], AlignedFree>;
// 64-byte aligned, zeroed; nullptr on failure or n == 0.
AlignedBytes aligned_alloc_bytes(int64_t n);

// Read-only view of one layer's K/V rows for the kernels.
struct KvView {
  DType k_dtype = DType::kF32, v_dtype = DType::kF32;
  int32_t kv_heads = 0, head_dim = 0, value_dim = 0;
  int64_t rows = 0;  // rows allocated per head
  const std::byte* k = nullptr;  // k + (h * rows + cell) * k_bytes
  const std::byte* v = nullptr;  // v + (h * rows + cell) * v_bytes
  int64_t k_bytes = 0;  // bytes of one key row: row_bytes(k_dtype, head_dim)
  int64_t v_bytes = 0;  // bytes of one value row: row_bytes(v_dtype, value_dim)
  const std::byte* k_row(int32_t h, int64_t cell) const { return k + (h * rows + cell) * k_bytes; }
  const std::byte* v_row(int32_t h, int64_t cell) const { return v + (h * rows + cell) * v_bytes; }
};

// Thread-safety: not thread-safe; kernels read through view() while nobody writes.
class LayerPool {
 public:
  // The layer's widths must be whole blocks of a block type (valid(geometry, config) checks).
  LayerPool(const LayerGeometry& layer, DType k_dtype, DType v_dtype, int64_t max_rows);
  LayerPool(const LayerGeometry& layer, DType dtype, int64_t max_rows)
      : LayerPool(layer, dtype, dtype, max_rows) {}
  LayerPool(LayerPool&&) = default;
  LayerPool& operator=(LayerPool&&) = default;

  int64_t rows() const { return rows_; }
  int64_t max_rows() const { return max_rows_; }
  int64_t bytes() const;  // allocated now
  // Makes at least `needed` rows exist (doubling, clamped to max_rows). InvalidArgument when
  // needed > max_rows; ResourceExhausted when the allocation fails. Keeps every byte.
  Status reserve(int64_t needed);
  // Converts (quantizes) one token's K [kv_heads, head_dim] and V [kv_heads, value_dim] into
  // `cell`.
  // The cell must be < rows().
  void write(int64_t cell, const float* k, const float* v);
  // Bytes of one cell in storage form (K of every head, then V of every head).
  int64_t cell_bytes() const;
  // Copies one cell's stored bytes out to / back in from `cell_bytes()` bytes. cell < rows().
  void copy_out(int64_t cell, std::byte* dst) const;
  void copy_in(int64_t cell, const std::byte* src);
  // The same with K (kv_heads rows of k_row_bytes()) and V (kv_heads of v_row_bytes()) apart.
  void copy_out(int64_t cell, std::byte* k_dst, std::byte* v_dst) const;
  void copy_in(int64_t cell, const std::byte* k_src, const std::byte* v_src);
  KvView view() const;
  int64_t k_row_bytes() const { return k_row_; }
  int64_t v_row_bytes() const { return v_row_; }

 private:
  LayerGeometry layer_;
  DType k_dtype_, v_dtype_;
  int64_t k_row_ = 0, v_row_ = 0;  // bytes of one head's key / value row
  int64_t max_rows_ = 0;
  int64_t rows_ = 0;
  AlignedBytes k_, v_;
};

}  // namespace kvcache::cpu
