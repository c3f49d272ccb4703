// The engine's dense kernels: matrix products (OpenBLAS sgemm/sgemv for f32 weights; for f16
// weights a threaded gemv with AVX2/F16C runtime dispatch and a block-converting sgemm),
// RMSNorm, RoPE (both pairings, optional per-pair frequency factors), SwiGLU, GELU-tanh gating
// and the logit soft-cap. Layer: engine. matmul_reference is the readable
// double-accumulating form the fast paths are tested against. Attention goes through the cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "program/half.h"

namespace kvcache::engine {

// A weight matrix [rows = out, cols = in], row-major, stored as f32 or as IEEE half (f16 files
// keep their bytes: half the memory traffic per decode token). Move-only in spirit (big).
struct Weight {
  int64_t rows = 0, cols = 0;
  std::vector<float> f32;     // rows * cols, or empty when f16 holds the data
  std::vector<uint16_t> f16;  // rows * cols IEEE half, or empty

  bool empty() const { return rows == 0; }
  bool is_f16() const { return !f16.empty(); }
  float at(int64_t r, int64_t c) const {
    const size_t i = static_cast<size_t>(r * cols + c);
    return is_f16() ? program_detail::f16_to_f32(f16[i]) : f32[i];
  }
  void row(int64_t r, std::span<float> out) const;  // row r as f32 (cols values)
  int64_t n_elements() const { return rows * cols; }
};

// Up to this many rows, f16 products read each weight row once for all rows and give every
// row exactly what it gets alone (a batched decode step); above it, converted tiles + sgemm.
inline constexpr int64_t kSmallBatch = 16;

// y[T, w.rows] = x[T, w.cols] * W^T (+ y when accumulate), for either storage.
void matmul(std::span<const float> x, const Weight& w, std::span<float> y, int64_t t,
            bool accumulate = false);
// Single-threaded scalar f16 gemv (reference of the dispatched kernel; exposed for tests).
void gemv_f16_scalar(const uint16_t* w, const float* x, float* y, int64_t rows, int64_t cols,
                     bool accumulate);

// y[T, out] = x[T, in] * W[out, in]^T (+ y when accumulate). Row-major. Uses cblas_sgemv
// when T == 1, cblas_sgemm otherwise.
void matmul(std::span<const float> x, std::span<const float> w, std::span<float> y, int64_t t,
            int64_t in, int64_t out, bool accumulate = false);
void matmul_reference(std::span<const float> x, std::span<const float> w, std::span<float> y,
                      int64_t t, int64_t in, int64_t out, bool accumulate = false);


// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, for rows of width d.
// out may alias x.
void rmsnorm_rows(std::span<const float> x, std::span<const float> weight, std::span<float> out,
                  int64_t rows, int64_t d, float eps);

struct RopeParams {
  int32_t head_dim = 0;
  int32_t rope_dim = 0;       // first rope_dim dims of each head rotate (even)
  float base = 10000.0f;
  float linear = 1.0f;        // position divisor
  bool interleaved = true;    // (2j, 2j+1) vs (j, j + rope_dim/2)
  // rope_dim/2 divisors of the pair frequencies (Llama 3.1 rope_freqs.weight); empty = none.
  std::span<const float> freq_factors = {};
};
// Rotates x[T, heads, head_dim] in place; token t at positions[t]. Pair j turns by
// (pos / linear) * base^(-2j / rope_dim) / freq_factors[j].
void rope(std::span<float> x, std::span<const int64_t> positions, int32_t heads,
          const RopeParams& p);

// g[i] = silu(g[i]) * u[i].
void swiglu(std::span<float> g, std::span<const float> u);

// The tanh approximation of GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float gelu_tanh(float x);
// g[i] = gelu_tanh(g[i]) * u[i] (Gemma's gated MLP).
void gelu_tanh_gated(std::span<float> g, std::span<const float> u);

// x[i] = cap * tanh(x[i] / cap) for cap > 0; cap <= 0 leaves x unchanged.
void softcap(std::span<float> x, float cap);

}  // namespace kvcache::engine
