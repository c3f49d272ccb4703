// The AVX-512 VNNI kernel of the Q8_0 and MXFP4 integer GEMM (quant_gemm.h). Weight rows are
// packed 16 to a vector, four columns to a 32-bit lane ("VNNI layout"), so one vpdpbusd
// multiplies four columns of 16 rows by four broadcast activation bytes and eight of them
// finish a block's int32 dot for 16 rows at once: the f32 scaling (convert, scale, fma) is
// paid once per block and 16 rows, not once per row. Entered only through q8_gemm's dispatch
// (avx512vnni checked).
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 headers, not this code
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "cpu/simd_target.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

namespace kvcache::kernels {
namespace {

using detail::Q8GemmActs;

constexpr int64_t kQ8Bytes = 34, kMxfp4Bytes = 17;
constexpr int kLanes = 16;  // weight rows per vector
constexpr int kTokens = 6;  // activation rows per micro-tile

#include "kernels/int_panel_simd.inc"

// The signed sum of 32 int8: the unsigned sum of their bytes + 128, less 32 x 128.
int32_t byte_sum(__m256i v) {
  const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(v, _mm256_set1_epi8(-128)),
                                    _mm256_setzero_si256());
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h)))) -
         32 * 128;
}

// Rows tile r0 .. r0 + 16 (fewer at the end: zero rows) of a Q8_0 or MXFP4 weight, per block
// b: q[b][k][i] = the 4 int8 of columns 32 b + 4 k .. + 3 of row r0 + i (as one int32; MXFP4
// in IntBlock form: the doubled E2M1 values), d[b][i] its scale, corr[b][i] = -128 x the sum
// of its 32 values (undoes the activations' +128). A block's rows are decoded side by side and
// transposed in registers, 8 rows at a time.
struct Panel {
  std::vector<int32_t> q, corr;
  std::vector<float> d;
  void pack(const Weight& w, int64_t r0, int64_t n, int64_t blocks) {
    q.resize(static_cast<size_t>(blocks * 8 * kLanes));
    corr.assign(static_cast<size_t>(blocks * kLanes), 0);
    d.assign(static_cast<size_t>(blocks * kLanes), 0.0f);
    const bool q8 = w.type == gguf::TensorType::kQ8_0;
    const int64_t bytes = q8 ? kQ8Bytes : kMxfp4Bytes;
    const uint8_t* row[kLanes];
    for (int64_t i = 0; i < n; ++i) row[i] = w.row_data(r0 + i);
    __m256i v[kLanes];
    for (__m256i& x : v) x = _mm256_setzero_si256();  // rows past n stay zero
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = b * kLanes;
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* blk = row[i] + b * bytes;
        if (q8) {
          d[at + i] = _cvtsh_ss(static_cast<uint16_t>(blk[0] | blk[1] << 8));
          v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        } else {
          d[at + i] = gguf::mxfp4_half_scale(blk[0]);
          v[i] = panel_nibbles(blk + 1, _mm256_setzero_si256(), gguf::kMxfp4Doubled);
        }
        corr[at + i] = -128 * byte_sum(v[i]);
      }
      __m256i t[kLanes];
      std::copy(v, v + kLanes, t);
      panel_transpose8(t);
      panel_transpose8(t + 8);
      for (int k = 0; k < 8; ++k) {
        int32_t* out = q.data() + (b * 8 + k) * kLanes;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), t[k]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), t[8 + k]);
      }
    }
  }
};

// Activation rows j .. j + kT against kG packed row vectors: y[(j + t) * y_stride + i] for the
// first n[g] lanes of vector g. Per block: eight vpdpbusd from the correction, then
// acc = fma(float(dot), d_w * d_x, acc) as q8_gemm_reference does.
template <int kG, int kT>
void micro_tile(const Panel* const* panels, const int64_t* n, const Q8GemmActs& a, int64_t j,
                float* y, int64_t y_stride, bool accumulate) {
  __m512 acc[kG][kT];
  for (int g = 0; g < kG; ++g)
    for (int t = 0; t < kT; ++t) acc[g][t] = _mm512_setzero_ps();
  const uint8_t* xu[kT];
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) {
    xu[t] = a.xu.data() + (j + t) * a.cols;
    dx[t] = a.d.data() + (j + t) * a.blocks;
  }
  for (int64_t b = 0; b < a.blocks; ++b) {
    __m512i dot[kG][kT];
    for (int g = 0; g < kG; ++g) {
      const __m512i c = _mm512_loadu_si512(panels[g]->corr.data() + b * kLanes);
      for (int t = 0; t < kT; ++t) dot[g][t] = c;
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m512i wv[kG];
      for (int g = 0; g < kG; ++g)
        wv[g] = _mm512_loadu_si512(panels[g]->q.data() + (b * 8 + k) * kLanes);
      for (int t = 0; t < kT; ++t) {
        int32_t bytes;
        std::memcpy(&bytes, xu[t] + 32 * b + 4 * k, 4);
        const __m512i xv = _mm512_set1_epi32(bytes);
        for (int g = 0; g < kG; ++g) dot[g][t] = _mm512_dpbusd_epi32(dot[g][t], xv, wv[g]);
      }
    }
    for (int g = 0; g < kG; ++g) {
      const __m512 dw = _mm512_loadu_ps(panels[g]->d.data() + b * kLanes);
      for (int t = 0; t < kT; ++t)
        acc[g][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[g][t]),
                                    _mm512_mul_ps(dw, _mm512_set1_ps(dx[t][b])), acc[g][t]);
    }
  }
  for (int g = 0; g < kG; ++g) {
    const auto mask = static_cast<__mmask16>((1u << n[g]) - 1u);
    for (int t = 0; t < kT; ++t) {
      float* out = y + (j + t) * y_stride + g * kLanes;
      __m512 v = acc[g][t];
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), v);
      _mm512_mask_storeu_ps(out, mask, v);
    }
  }
}

template <int kG>
void all_tokens(const Panel* const* panels, const int64_t* n, const Q8GemmActs& a, float* y,
                int64_t y_stride, bool accumulate) {
  int64_t j = 0;
  for (; j + kTokens <= a.t; j += kTokens)
    micro_tile<kG, kTokens>(panels, n, a, j, y, y_stride, accumulate);
  switch (a.t - j) {
    case 5: return micro_tile<kG, 5>(panels, n, a, j, y, y_stride, accumulate);
    case 4: return micro_tile<kG, 4>(panels, n, a, j, y, y_stride, accumulate);
    case 3: return micro_tile<kG, 3>(panels, n, a, j, y, y_stride, accumulate);
    case 2: return micro_tile<kG, 2>(panels, n, a, j, y, y_stride, accumulate);
    case 1: return micro_tile<kG, 1>(panels, n, a, j, y, y_stride, accumulate);
    default: return;
  }
}

// Rows [r0, r1), two vectors (32 rows) at a time while there are more than 16 left.
void gemm_rows(const Weight& w, int64_t r0, int64_t r1, const Q8GemmActs& a, float* y,
               bool accumulate) {
  thread_local Panel panel[2];
  const Panel* panels[2] = {&panel[0], &panel[1]};
  for (int64_t r = r0; r < r1;) {
    const int64_t n0 = std::min<int64_t>(kLanes, r1 - r);
    const int64_t n1 = std::min<int64_t>(kLanes, r1 - r - n0);
    const int64_t n[2] = {n0, n1};
    panel[0].pack(w, r, n0, a.blocks);
    if (n1 > 0) {
      panel[1].pack(w, r + n0, n1, a.blocks);
      all_tokens<2>(panels, n, a, y + r, w.rows, accumulate);
    } else {
      all_tokens<1>(panels, n, a, y + r, w.rows, accumulate);
    }
    r += n0 + n1;
  }
}

// quantize_activations' q and d, 32 values a step: d = amax / 127, q = round-to-even(x / d)
// (x times 1 / d, as there), stored as q + 128.
void quantize_rows(const float* x, int64_t j0, int64_t j1, Q8GemmActs& a) {
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t b = 0; b < a.blocks; ++b) {
      const float* xb = x + j * a.cols + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      const __m512 vi = _mm512_set1_ps(inv);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vi));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vi));
      const __m128i bias = _mm_set1_epi8(static_cast<char>(0x80));
      uint8_t* out = a.xu.data() + j * a.cols + 32 * b;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                       _mm_xor_si128(_mm512_cvtepi32_epi8(q0), bias));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16),
                       _mm_xor_si128(_mm512_cvtepi32_epi8(q1), bias));
      a.d[static_cast<size_t>(j * a.blocks + b)] = d;
    }
}

}  // namespace

detail::Q8QuantizeFn detail::avx512_q8_quantize() { return quantize_rows; }
detail::Q8GemmRowsFn detail::avx512_q8_gemm_rows() { return gemm_rows; }

}  // namespace kvcache::kernels

KVCACHE_SIMD_END()

#else
namespace kvcache::kernels {
detail::Q8QuantizeFn detail::avx512_q8_quantize() { return nullptr; }
detail::Q8GemmRowsFn detail::avx512_q8_gemm_rows() { return nullptr; }
}  // namespace kvcache::kernels
#endif
