// The AVX-512 build of the engine's element-wise kernels (kernels.h): SwiGLU with the
// polynomial exp the attention workers use (cpu/exp_avx512.inc), 16 lanes a step, the tail
// masked. Entered only through swiglu's run-time dispatch; swiglu_reference is its readable
// form. All headers are included before the target pragma.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 headers, not this code
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

#include "cpu/simd_target.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx512f,avx512bw,avx512vl,avx2,fma")

namespace kvcache::kernels::detail {
namespace {
#include "cpu/exp_avx512.inc"
}  // namespace

// g = g / (1 + exp(-g)) * u. exp's argument is capped at 88 (exp16 stays finite; the scalar
// form's exp overflows to inf there, and both quotients are then within 1e-36 of zero).
void swiglu_avx512(float* g, const float* u, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), cap = _mm512_set1_ps(88.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 e = exp16(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), v), cap));
    const __m512 silu = _mm512_div_ps(v, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

}  // namespace kvcache::kernels::detail

KVCACHE_SIMD_END()

#else
namespace kvcache::kernels::detail {
void swiglu_avx512(float*, const float*, int64_t) {}  // never selected off x86
}  // namespace kvcache::kernels::detail
#endif
