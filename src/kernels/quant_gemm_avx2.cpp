// The AVX2 kernel of the Q8_0 integer GEMM (quant_gemm.h). Weight rows are packed 8 to a
// vector, four columns to a 32-bit lane, as the AVX-512 kernel packs 16: one step multiplies
// four columns of 8 rows by four broadcast activation bytes, and eight steps finish a block's
// int32 dot for 8 rows, so the f32 scaling is paid once per block and 8 rows. AVX2 has no
// vpdpbusd: a step is vpsignb (the activation takes the weight's sign), vpmaddubsw (|w| times
// that, pairs summed to int16) and vpmaddwd with ones (pairs to int32). Entered only through
// q8_gemm's dispatch (AVX2+FMA+F16C checked).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/simd_target.h"
#include "kernels/quant_gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx2,fma,f16c")

namespace kvcache::engine {
namespace {

using quant_detail::Q8GemmActs;

constexpr int64_t kBlockBytes = 34;
constexpr int kLanes = 8;   // weight rows per vector
constexpr int kTokens = 6;  // activation rows per micro-tile: 6 int32 sums + 6 = 12 ymm

// Rows r0 .. r0 + 8 (fewer at the end: zero rows) of a Q8_0 weight, per block b:
// q[b][k][i] = the 4 bytes of columns 32 b + 4 k .. + 3 of row r0 + i (as one int32),
// u[b][k][i] the same bytes' magnitudes (|-128| = 128 as an unsigned byte), d[b][i] the scale.
struct Panel {
  std::vector<int32_t> q, u;
  std::vector<float> d;
  void pack(const Weight& w, int64_t r0, int64_t n, int64_t blocks) {
    q.assign(static_cast<size_t>(blocks * 8 * kLanes), 0);
    u.assign(q.size(), 0);
    d.assign(static_cast<size_t>(blocks * kLanes), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = w.row_data(r0 + i);
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * kBlockBytes;
        d[b * kLanes + i] = _cvtsh_ss(static_cast<uint16_t>(blk[0] | blk[1] << 8));
        for (int k = 0; k < 8; ++k) std::memcpy(&q[(b * 8 + k) * kLanes + i], blk + 2 + 4 * k, 4);
      }
    }
    for (size_t v = 0; v < q.size(); v += kLanes) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&q[v]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&u[v]), _mm256_abs_epi8(qv));
    }
  }
};

// Activation rows j .. j + kT against a packed panel of n rows: y[(j + t) * y_stride + i],
// i < n. Per block, the int32 dot of each (row, token) is exact: vpmaddubsw multiplies |w|
// (0..128, unsigned) by sign(w) * x (|x| <= 127: quantize_activations rounds x / (amax / 127),
// which never reaches 128), so each int16 pair sum is at most 2 * 128 * 127 = 32512 < 32767
// and never saturates; vpmaddwd with ones widens the pairs to int32 exactly. Then
// acc = fma(float(dot), d_w * d_x, acc) as q8_gemm_reference does. (One row vector by 6
// tokens measured ~1.3x two vectors by 4 on Zen 4: GCC keeps fewer values in registers.)
template <int kT>
void micro_tile(const Panel& panel, int64_t n, const Q8GemmActs& a, int64_t j, float* y,
                int64_t y_stride, bool accumulate) {
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* xq[kT];
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) {
    xq[t] = a.xu.data() + (j + t) * a.cols;
    dx[t] = a.d.data() + (j + t) * a.blocks;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < a.blocks; ++b) {
    __m256i dot[kT];
    for (int t = 0; t < kT; ++t) dot[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int k = 0; k < 8; ++k) {
      const size_t at = static_cast<size_t>((b * 8 + k) * kLanes);
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel.q.data() + at));
      const __m256i wu = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel.u.data() + at));
      for (int t = 0; t < kT; ++t) {
        int32_t bytes;
        std::memcpy(&bytes, xq[t] + 32 * b + 4 * k, 4);
        const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(bytes), wq);
        const __m256i pairs = _mm256_maddubs_epi16(wu, xs);
        dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 dw = _mm256_loadu_ps(panel.d.data() + b * kLanes);
    for (int t = 0; t < kT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]),
                               _mm256_mul_ps(dw, _mm256_set1_ps(dx[t][b])), acc[t]);
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  for (int t = 0; t < kT; ++t) {
    float* out = y + (j + t) * y_stride;
    __m256 v = acc[t];
    if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(out, mask), v);
    _mm256_maskstore_ps(out, mask, v);
  }
}

// Rows [r0, r1), 8 at a time, against every activation row.
void gemm_rows(const Weight& w, int64_t r0, int64_t r1, const Q8GemmActs& a, float* y,
               bool accumulate) {
  thread_local Panel panel;
  for (int64_t r = r0; r < r1; r += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, r1 - r);
    panel.pack(w, r, n, a.blocks);
    float* yr = y + r;
    int64_t j = 0;
    for (; j + kTokens <= a.t; j += kTokens)
      micro_tile<kTokens>(panel, n, a, j, yr, w.rows, accumulate);
    switch (a.t - j) {
      case 5: micro_tile<5>(panel, n, a, j, yr, w.rows, accumulate); break;
      case 4: micro_tile<4>(panel, n, a, j, yr, w.rows, accumulate); break;
      case 3: micro_tile<3>(panel, n, a, j, yr, w.rows, accumulate); break;
      case 2: micro_tile<2>(panel, n, a, j, yr, w.rows, accumulate); break;
      case 1: micro_tile<1>(panel, n, a, j, yr, w.rows, accumulate); break;
      default: break;
    }
  }
}

// The largest |x| of 8 lanes, in every lane.
__m256 lane_max(__m256 v) {
  v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
  v = _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

// quantize_activations' q and d, 32 values a step: d = amax / 127, q = round-to-even(x / d)
// (x times 1 / d, as there), stored as q's byte: the int32's low byte, as the scalar cast
// keeps it (masked to 0..255, the unsigned packs cannot saturate).
void quantize_rows(const float* x, int64_t j0, int64_t j1, Q8GemmActs& a) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i low = _mm256_set1_epi32(0xff);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t b = 0; b < a.blocks; ++b) {
      const float* xb = x + j * a.cols + 32 * b;
      __m256 v[4];
      __m256 m = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);  // a NaN x is skipped, as std::max does
      }
      const float amax = _mm256_cvtss_f32(lane_max(m));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      const __m256 vi = _mm256_set1_ps(inv);
      __m256i q[4];
      for (int i = 0; i < 4; ++i)
        q[i] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], vi)), low);
      // Packs interleave 128-bit lanes: bytes come out as q0[0..3] q1[0..3] q2[0..3] q3[0..3]
      // q0[4..7] ..., which the permute puts back in column order.
      const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]),
                                            _mm256_packus_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.xu.data() + j * a.cols + 32 * b),
                          _mm256_permutevar8x32_epi32(p, order));
      a.d[static_cast<size_t>(j * a.blocks + b)] = d;
    }
}

}  // namespace

quant_detail::Q8QuantizeFn quant_detail::avx2_q8_quantize() { return quantize_rows; }
quant_detail::Q8GemmRowsFn quant_detail::avx2_q8_gemm_rows() { return gemm_rows; }

}  // namespace kvcache::engine

KVCACHE_SIMD_END()

#else
namespace kvcache::engine {
quant_detail::Q8QuantizeFn quant_detail::avx2_q8_quantize() { return nullptr; }
quant_detail::Q8GemmRowsFn quant_detail::avx2_q8_gemm_rows() { return nullptr; }
}  // namespace kvcache::engine
#endif
