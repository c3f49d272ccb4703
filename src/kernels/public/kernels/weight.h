// A weight matrix as the engine reads it: a view of (type, rows, cols, bytes) over memory it
// shares ownership of — the memory-mapped model file (no widening copy at load) or a buffer of
// its own — the matrix product that dispatches on the type, and its row-range piece for callers
// that schedule several products at once. Layer: kernels. The per-type matrix-vector kernels
// live in quant_matvec.h; this header does not load files (model.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cpu/attention.h"
#include "program/gguf.h"

namespace kvcache::kernels {

// [rows = out, cols = in], row-major; each row is row_bytes() bytes of `type` blocks.
// Copies share the bytes (cheap). F32 data is 4-byte aligned and F16/BF16 2-byte aligned
// (the loader copies misaligned data). Thread-safety: immutable; concurrent reads are safe.
struct Weight {
  gguf::TensorType type = gguf::TensorType::kF32;
  int64_t rows = 0, cols = 0;
  std::span<const uint8_t> bytes;      // rows * row_bytes()
  std::shared_ptr<const void> owner;   // keeps `bytes` alive: the mapping or an owned buffer

  // A Weight owning `values` (rows * cols floats).
  static Weight from_f32(int64_t rows, int64_t cols, std::vector<float> values);
  // A Weight owning `data`, which holds rows * row_bytes(type, cols) bytes of a computable type.
  static Weight from_bytes(gguf::TensorType type, int64_t rows, int64_t cols,
                           std::vector<uint8_t> data);

  bool empty() const { return rows == 0; }
  bool is_f16() const { return type == gguf::TensorType::kF16; }
  int64_t n_elements() const { return rows * cols; }
  int64_t row_bytes() const { return rows == 0 ? 0 : static_cast<int64_t>(bytes.size()) / rows; }
  const uint8_t* row_data(int64_t r) const { return bytes.data() + r * row_bytes(); }
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }  // F32 only
  // Element (r, c) as f32; decodes its whole block (slow: references and tests only).
  float at(int64_t r, int64_t c) const;
  void row(int64_t r, std::span<float> out) const;  // row r decoded to f32 (cols values)
};

// Up to this many rows of x (a batched decode step), products of non-F32 weights read each
// chunk of weight rows once for all of them and give every row bitwise what it gets alone.
inline constexpr int64_t kSmallBatch = 16;

// y[T, w.rows] = x[T, w.cols] * W^T (+ y when accumulate), for every computable type. T == 1:
// the type's matrix-vector kernel (quant_matvec.h; F32 via BLAS sgemv); T <= kSmallBatch: the
// same kernel over chunks of rows shared by every row of x; larger T: the integer GEMM of
// quant_gemm.h where it has a kernel (block types at AVX2, Q8_0 at AVX-512 VNNI), everything
// else tiles of rows decoded to f32 once per call, then sgemm. Rows are shared over
// cpu::global_pool().
void matmul(std::span<const float> x, const Weight& w, std::span<float> y, int64_t t,
            bool accumulate = false);

// One product of matmul_shared: y[T, w->rows] = x W^T (+ y when accumulate).
struct SharedProduct {
  const Weight* w = nullptr;
  std::span<float> y;
  bool accumulate = false;
};

// The products of several weights that read the same x[t, cols] (a layer's q, k and v; its
// gate and up), each bitwise what matmul gives it. For 1 <= t <= kSmallBatch and no F32
// weight: x quantized once for all of them and every product's rows shared out in one pool
// dispatch, so a decode step pays one hand-off for the group instead of one per weight (a
// chunk of rows is split by the same rule as matmul's, so a thread that finishes one weight
// goes on to the next). Otherwise matmul for each in turn.
void matmul_shared(std::span<const float> x, int64_t t, std::span<const SharedProduct> products);

struct Q8Activations;  // quant_matvec.h: a row of x as int8 blocks

// The input side of a product split into row ranges: x's t rows [t, cols] borrowed as f32 and,
// for block-type weights, quantized once to int8 blocks, so the ranges of a product (or the
// products of several weights of one width, e.g. the experts of a layer) do not each
// quantize it again. Buffers grow to the largest input seen. Thread-safety: set() on one
// thread; then any number of concurrent matmul_rows readers until the next set().
struct ProductInput {
  const float* x = nullptr;  // borrowed [t, cols]; the caller keeps it alive until the next set
  int64_t t = 0, cols = 0;
  bool quantized = false;      // q[0, t) hold x's rows as int8 blocks (cols a multiple of 32)
  std::vector<Q8Activations> q;

  ProductInput();
  ~ProductInput();
  ProductInput(ProductInput&&) noexcept;
  ProductInput& operator=(ProductInput&&) noexcept;
  void set(const float* x_rows, int64_t rows, int64_t width, bool quantize);
};
// Whether products with weights of `type` read the input quantized (the block types).
bool product_quantizes(gguf::TensorType type);

// Rows [r0, r1) of y[x.t, w.rows] = x W^T (+ y when accumulate), on the calling thread; y is
// the whole output (row j of x lands at y + j * w.rows). x must be set with cols = w.cols and,
// when product_quantizes(w.type), quantized. Each chunk of weight rows is read once for every
// row of x (the small-batch kernel: meant for x.t <= kSmallBatch). Non-F32 types: a row's
// value does not depend on the range it is computed in, so every split is bitwise what matmul
// gives (matmul is this function over ranges shared on the pool). F32: BLAS on the range.
void matmul_rows(const Weight& w, const ProductInput& x, int64_t r0, int64_t r1, float* y,
                 bool accumulate = false);
// Rows per work item for a caller that splits products into row ranges itself (the
// mixture-of-experts layer): about 256 KiB of w's rows, a multiple of 4, at least 4. Depends on
// the shape alone, so a split by it never depends on the thread count.
int64_t row_chunk(const Weight& w);

// Single-threaded scalar f16 gemv (reference of the dispatched kernel; exposed for tests).
void gemv_f16_scalar(const uint16_t* w, const float* x, float* y, int64_t rows, int64_t cols,
                     bool accumulate);

}  // namespace kvcache::kernels
