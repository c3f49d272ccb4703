// The AVX2+FMA+F16C build of the matrix-vector row kernels (quant_matvec_simd.inc): integer dot
// products by maddubs/madd; and the activation quantizer every SIMD level uses (quantize_simd).
// Entered only through matvec's run-time dispatch. All headers are included before the target
// pragma so nothing shared is compiled for AVX2.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/simd_target.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "core/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx2,fma,f16c")

namespace kvcache::kernels {
namespace {

// u8 x s8 products summed in groups of four bytes into int32 lanes (|sum| < 2^16, no overflow).
inline __m256i dot4(__m256i u8, __m256i s8) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
}

// dot4(u0, s0) + dot4(u1, s1) for bytes u0, u1 <= 63 (nibbles, Q5_K's 5-bit values, MXFP4's
// table + 12): the two products' 16-bit pair sums (|.| <= 2 * 63 * 127 = 16002 each) are added
// before the one widening.
inline __m256i dot4_sum(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
  return _mm256_madd_epi16(
      _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1)),
      _mm256_set1_epi16(1));
}

// Lane k (0..7): block k's sum of u * x over four pairs (pair_dot's operands w[j][h] against
// x + 64 j + 32 h, q_pairs' order; blocks j and j + 4), times lane k of sc32 when kScaled. For
// nibbles (u <= 15) the 16-bit sums stay <= 2 * 2 * 15 * 127 = 7620 per pair and <= 30480
// after two horizontal adds, so one widening (madd, against the scales) serves eight blocks.
template <bool kScaled>
inline __m256i nibble_pair_sums(const __m256i (&w)[4][2], const int8_t* x, __m256i sc32) {
  __m256i m[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const auto* xj = reinterpret_cast<const __m256i*>(x + 64 * j);
    m[j] = _mm256_add_epi16(_mm256_maddubs_epi16(w[j][0], _mm256_loadu_si256(xj)),
                            _mm256_maddubs_epi16(w[j][1], _mm256_loadu_si256(xj + 1)));
  }
  // per 128 bits: int16 lanes 2 k, 2 k + 1 hold halves of block k (blocks 0-3 | 4-7)
  const __m256i h =
      _mm256_hadd_epi16(_mm256_hadd_epi16(m[0], m[1]), _mm256_hadd_epi16(m[2], m[3]));
  const __m256i sc16 = kScaled ? _mm256_or_si256(sc32, _mm256_slli_epi32(sc32, 16))
                               : _mm256_set1_epi16(1);
  return _mm256_madd_epi16(h, sc16);
}

#include "kernels/quant_matvec_simd.inc"

// quantize_activations_scalar 32 values a step, bit for bit: amax over |x| (a NaN skipped, as
// std::max does), d = amax / 127, q = round-to-even(x * (1 / d)) kept as the int's low byte
// (what the scalar cast keeps), then the sums from those bytes.
void quantize_simd(const float* x, int64_t cols, Q8Activations& out) {
  out.blocks = cols / 32;
  out.q.resize(static_cast<size_t>(cols));
  out.d.resize(static_cast<size_t>(out.blocks));
  out.sum16.resize(static_cast<size_t>(2 * out.blocks));
  out.dsum16.resize(static_cast<size_t>(2 * out.blocks));
  out.dsum.resize(static_cast<size_t>(out.blocks));
  out.sum4.resize(static_cast<size_t>(8 * out.blocks));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i low = _mm256_set1_epi32(0xff), ones8 = _mm256_set1_epi8(1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < out.blocks; ++b) {
    const float* xb = x + 32 * b;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);
    }
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
    const float d = _mm256_cvtss_f32(m) / 127.0f;
    const __m256 inv = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv)), low);
    // The packs interleave 128-bit lanes; the permute puts the bytes back in column order.
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3])),
        order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + 32 * b), bytes);
    // int32 lane k: the signed sum of bytes 4k..4k+3 (ones as the unsigned operand).
    const __m256i s4 = dot4(ones8, bytes);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.sum4.data() + 8 * b), s4);
    const int32_t* k = out.sum4.data() + 8 * b;
    const int32_t s0 = k[0] + k[1] + k[2] + k[3], s1 = k[4] + k[5] + k[6] + k[7];
    out.d[b] = d;
    out.sum16[2 * b] = s0;
    out.sum16[2 * b + 1] = s1;
    out.dsum16[2 * b] = d * static_cast<float>(s0);
    out.dsum16[2 * b + 1] = d * static_cast<float>(s1);
    out.dsum[b] = d * static_cast<float>(s0 + s1);
  }
  detail::pair_activations(out);
}

}  // namespace

detail::QuantizeFn detail::avx2_quantize() { return quantize_simd; }

detail::RowKernel detail::avx2_kernel(gguf::TensorType type) { return pick(type); }
detail::RowGroupKernel detail::avx2_group_kernel(gguf::TensorType type, int n) {
  return pick_group(type, n);
}
detail::HalfBatchKernel detail::avx2_half_batch(gguf::TensorType type) {
  if (type == gguf::TensorType::kF16) return half_rows_batch<false>;
  if (type == gguf::TensorType::kBF16) return half_rows_batch<true>;
  return nullptr;
}

}  // namespace kvcache::kernels

KVCACHE_SIMD_END()

#else
namespace kvcache::kernels {
detail::RowKernel detail::avx2_kernel(gguf::TensorType) { return nullptr; }
detail::RowGroupKernel detail::avx2_group_kernel(gguf::TensorType, int) { return nullptr; }
detail::QuantizeFn detail::avx2_quantize() { return nullptr; }
detail::HalfBatchKernel detail::avx2_half_batch(gguf::TensorType) { return nullptr; }
}  // namespace kvcache::kernels
#endif
