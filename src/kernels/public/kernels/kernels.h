// The engine's dense kernels: f32 matrix products (OpenBLAS sgemm/sgemv; products with a
// typed Weight are in weight.h), RMSNorm, RoPE (both pairings, optional per-pair frequency
// factors), SwiGLU (plain and gpt-oss's clamped form), GELU-tanh gating and the logit
// soft-cap. Layer: kernels. matmul_reference is the readable double-accumulating form the fast
// paths are tested against. Attention goes through the cache.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/weight.h"  // Weight and its type-dispatching matmul
#include "core/half.h"

namespace kvcache::kernels {

// y[T, out] = x[T, in] * W[out, in]^T (+ y when accumulate). Row-major. Uses cblas_sgemv
// when T == 1, cblas_sgemm otherwise.
void matmul(std::span<const float> x, std::span<const float> w, std::span<float> y, int64_t t,
            int64_t in, int64_t out, bool accumulate = false);
// Output columns [r0, r1) of that product for every token, on the calling thread (BLAS): the
// piece matmul shares out, and matmul_rows (weight.h) for F32 weights.
void matmul_f32_rows(const float* x, const float* w, float* y, int64_t t, int64_t in,
                     int64_t out, int64_t r0, int64_t r1, bool accumulate);
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

// g[i] = silu(g[i]) * u[i]. AVX-512 where cpu::isa_supported says so on this call (a
// polynomial exp: within a few ulp of swiglu_reference), else swiglu_reference itself; shared
// over the pool for a prefill chunk.
void swiglu(std::span<float> g, std::span<const float> u);
// The scalar form with std::exp (readable; what the AVX-512 path is tested against).
void swiglu_reference(std::span<float> g, std::span<const float> u);
namespace detail {
void swiglu_avx512(float* g, const float* u, int64_t n);  // kernels_avx512.cpp
}  // namespace detail

// gpt-oss's gated activation: with g' = min(g, limit) and u' = clamp(u, -limit, limit),
// g[i] = g' * sigmoid(alpha * g') * (u' + 1). Published constants: alpha 1.702, limit 7.
void swiglu_oai(std::span<float> g, std::span<const float> u, float alpha = 1.702f,
                float limit = 7.0f);

// The tanh approximation of GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float gelu_tanh(float x);
// g[i] = gelu_tanh(g[i]) * u[i] (Gemma's gated MLP).
void gelu_tanh_gated(std::span<float> g, std::span<const float> u);

// x[i] = cap * tanh(x[i] / cap) for cap > 0; cap <= 0 leaves x unchanged.
void softcap(std::span<float> x, float cap);

}  // namespace kvcache::kernels
