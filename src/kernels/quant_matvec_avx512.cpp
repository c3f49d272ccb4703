// The AVX-512 VNNI build of the matrix-vector row kernels (quant_matvec_simd.inc): each integer
// dot product is one vpdpbusd on 256-bit vectors (AVX-512 VL), where AVX2 needs maddubs + madd
// (the Q4_K / Q6_K kernels sum maddubs pairs in 16-bit lanes and run the same in both builds);
// F16/BF16 rows use 512-bit vectors over tiles of weight rows x activation rows, and MXFP4 rows
// four blocks per 512-bit vector (below).
// Entered only through matvec's run-time dispatch, which checks avx512vnni. All headers are
// included before the target pragma so nothing shared is compiled for AVX-512.
// GCC 12's AVX-512 headers build _mm512_undefined_* from a self-initialized variable, which
// -Wuninitialized reports at every use; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/simd_target.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"
#include "core/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

namespace kvcache::kernels {
namespace {

inline __m256i dot4(__m256i u8, __m256i s8) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8);
}

inline __m256i dot4_sum(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u0, s0), u1, s1);
}

// Lane k (0..7): block k's sum of u * x over four pairs (pair_dot's operands w[j][h] against
// x + 64 j + 32 h, q_pairs' order; blocks j and j + 4), times lane k of sc32 when kScaled.
template <bool kScaled>
inline __m256i nibble_pair_sums(const __m256i (&w)[4][2], const int8_t* x, __m256i sc32) {
  __m256i p[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const auto* xj = reinterpret_cast<const __m256i*>(x + 64 * j);
    p[j] = dot4_sum(w[j][0], _mm256_loadu_si256(xj), w[j][1], _mm256_loadu_si256(xj + 1));
  }
  // per 128 bits: [p0 01, p0 23, p1 01, p1 23], then [p0, p1, p2, p3]: blocks 0-3 | 4-7
  const __m256i s =
      _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
  return kScaled ? _mm256_mullo_epi32(s, sc32) : s;
}

#include "kernels/quant_matvec_simd.inc"

// F16 / BF16 with 512-bit vectors. One accumulator of 16 lanes holds, in its low and high
// halves, exactly the a0 / a1 pair of the 256-bit half_tile (each lane sums the same columns
// in the same order with the same fused multiply-adds), and it is reduced the same way, so
// every sum is bitwise what half_tile gives. What changes is the scheduling: kRows weight rows
// are widened once per 16 columns and applied to kActs activation rows held in registers.
template <bool kBf16>
inline __m512 widen16(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (kBf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  else return _mm512_cvtph_ps(h);
}

// half_tile's reduction of a0 + a1, then its scalar tail over columns [body, cols).
template <bool kBf16>
inline float half_finish(__m512 acc, const uint8_t* row, const float* x, int64_t body,
                         int64_t cols) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  return half_tail<kBf16>(hsum(_mm256_add_ps(_mm512_castps512_ps256(acc), hi)), row, x, body,
                          cols);
}

// The sixteen sums of a 4 x 4 tile, a[i][j] -> lane 4 * j + i, each formed by exactly the
// additions half_finish makes (upper 256 + lower 256 bits, then 128 + 128, then the two pairs,
// then the last pair: IEEE addition is commutative, so the sums are bitwise the same) but for
// all sixteen at once: 30 shuffles and 15 adds where one at a time took ~9 operations each.
inline __m512 fold_tile4x4(const __m512 (&a)[4][4]) {
  __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {  // a pair of sums per vector, 8 lanes each: lane k + lane k + 8
    const __m512 u = a[(2 * p) / 4][(2 * p) % 4], v = a[(2 * p + 1) / 4][(2 * p + 1) % 4];
    b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(u, v, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(u, v, _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q)  // four sums per vector, 4 lanes each: lane k + lane k + 4
    c[q] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
  for (int e = 0; e < 2; ++e) {  // lanes 0, 1 + lanes 2, 3 of every 128-bit block
    const __m512d u = _mm512_castps_pd(c[2 * e]), v = _mm512_castps_pd(c[2 * e + 1]);
    d[e] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(u, v)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(u, v)));
  }
  // lane 0 + lane 1 of each pair: block j of c[q] held a[q][j], so lane 4 * j + q is a[q][j]
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Weight rows r, r + dr, ..., r + (kRows - 1) dr against activation rows x_j = x + j *
// x_stride (j < kActs): y[j * y_stride + i * dr] for row r + i dr. With `next` (kRows rows),
// asks for their lines into L2 a line per two steps, ahead of their use.
template <bool kBf16, int kRows, int kActs>
inline void half_tile(const Weight& w, int64_t r, int64_t dr, const float* x, int64_t x_stride,
                      float* y, int64_t y_stride, bool accumulate, const uint8_t* const* next) {
  const int64_t body = w.cols & ~int64_t{15};
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w.row_data(r + i * dr);
  __m512 acc[kRows][kActs];
#pragma GCC unroll 4
  for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < kActs; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < body; c += 16) {
    if (next != nullptr && c % 32 == 0)
      for (int i = 0; i < kRows; ++i) __builtin_prefetch(next[i] + 2 * c, 0, 1);
    __m512 wv[kRows];
#pragma GCC unroll 4
    for (int i = 0; i < kRows; ++i) wv[i] = widen16<kBf16>(rows[i] + 2 * c);
#pragma GCC unroll 4
    for (int j = 0; j < kActs; ++j) {
      const __m512 xv = _mm512_loadu_ps(x + j * x_stride + c);
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if constexpr (kRows == 4 && kActs == 4) {
    alignas(64) float sums[16];
    _mm512_store_ps(sums, fold_tile4x4(acc));
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) {
        const float v = half_tail<kBf16>(sums[4 * j + i], rows[i], x + j * x_stride, body, w.cols);
        float& out = y[j * y_stride + i * dr];
        out = accumulate ? out + v : v;
      }
    return;
  }
  for (int j = 0; j < kActs; ++j)
    for (int i = 0; i < kRows; ++i) {
      const float v = half_finish<kBf16>(acc[i][j], rows[i], x + j * x_stride, body, w.cols);
      float& out = y[j * y_stride + i * dr];
      out = accumulate ? out + v : v;
    }
}

// Weight rows r, r + dr, ... (kRows of them) against t activation rows in even groups of at
// most four (5 = 3 + 2, never 4 + 1: a lone activation's one chain of multiply-adds leaves
// them waiting): the weight rows stay in L1 while every group passes; the first group asks
// for `next`.
template <bool kBf16, int kRows>
inline void half_tile_all(const Weight& w, int64_t r, int64_t dr, const float* x, int64_t t,
                          float* y, int64_t y_stride, bool accumulate,
                          const uint8_t* const* next) {
  const int64_t groups = (t + 3) / 4;
  for (int64_t g = 0, t0 = 0; g < groups; ++g) {
    const int64_t size = (t - t0) / (groups - g);  // the rest, shared evenly
    const float* xg = x + t0 * w.cols;
    float* yg = y + t0 * y_stride;
    const uint8_t* const* n = t0 == 0 ? next : nullptr;
    t0 += size;
    switch (size) {
      case 4: half_tile<kBf16, kRows, 4>(w, r, dr, xg, w.cols, yg, y_stride, accumulate, n); break;
      case 3: half_tile<kBf16, kRows, 3>(w, r, dr, xg, w.cols, yg, y_stride, accumulate, n); break;
      case 2: half_tile<kBf16, kRows, 2>(w, r, dr, xg, w.cols, yg, y_stride, accumulate, n); break;
      default: half_tile<kBf16, kRows, 1>(w, r, dr, xg, w.cols, yg, y_stride, accumulate, n); break;
    }
  }
}

// Rows from r on of [r0, r1) (y holds row r0's column first) in tiles of kRows rows that are
// kRows streams: with n = (r1 - r) / kRows, tile i takes rows r + i, r + i + n, ..., each
// stream's row after next asked into L2. Returns the first row not taken (fewer than kRows
// left).
template <bool kBf16, int kRows>
int64_t half_tiles(const Weight& w, int64_t r, int64_t r0, int64_t r1, const float* x, int64_t t,
                   float* y, int64_t y_stride, bool accumulate) {
  const int64_t n = (r1 - r) / kRows;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* next[kRows];
    const bool ahead = kRows > 1 && i + 2 < n;
    for (int k = 0; ahead && k < kRows; ++k) next[k] = w.row_data(r + i + 2 + k * n);
    half_tile_all<kBf16, kRows>(w, r + i, n, x, t, y + (r + i - r0), y_stride, accumulate,
                                ahead ? next : nullptr);
  }
  return r + kRows * n;
}

// Rows [r0, r1) against t activation rows: two weight rows at a time, each widened once for
// every group of activations, and from 8 on (bound by the multiply-adds) four — rows far
// apart, each a sequential stream of its own. At t = 1 one row's single chain of
// multiply-adds bound it by latency (F16 decode of the benchmark model 0.71-0.75 of the read
// probe; 0.76-0.82 with two rows). Neighbouring rows read in step (one 4 KiB page,
// interleaved) ran 2-2.5x slower than one stream at t = 1..4 even with an L2 prefetch of the
// next tile, so 2 and 3 rows used to go one weight row at a time (1.2-1.3x a 1-row product at
// AVX2 and AVX-512); as separate streams 2 rows take 1.0-1.1x (BM_BatchedHalfProduct).
// Earlier figures, adjacent rows: a 5-row verify step of the benchmark model at 1K 15.0 ->
// 10.5 ms with two rows; 8 sessions x 1K 69.7 -> 64.8 CPU-ms per step with four.
template <bool kBf16>
void half_rows_batch_512(const Weight& w, int64_t r0, int64_t r1, const float* x, int64_t t,
                         float* y, int64_t y_stride, bool accumulate) {
  int64_t r = r0;
  if (t >= 8) r = half_tiles<kBf16, 4>(w, r, r0, r1, x, t, y, y_stride, accumulate);
  r = half_tiles<kBf16, 2>(w, r, r0, r1, x, t, y, y_stride, accumulate);
  half_tiles<kBf16, 1>(w, r, r0, r1, x, t, y, y_stride, accumulate);
}

template <bool kBf16>
void half_rows_512(const Weight& w, int64_t r0, int64_t r1, const Q8Activations&, const float* x,
                   float* y, bool accumulate) {
  half_rows_batch_512<kBf16>(w, r0, r1, x, 1, y, 1, accumulate);
}

// MXFP4 with 512-bit vectors: four blocks' codes in one vector (16 bytes each), so one byte
// shuffle per nibble half looks up 64 values and two vpdpbusd take four blocks, where the
// 256-bit kernel (mxfp4_codes) takes two; the activation's 16-value halves are regrouped to
// match by one 128-bit shuffle each. The same integer sums, finished by mxfp4_add.
inline __m512i mxfp4_quad(const uint8_t* row, const Q8Activations& a, int64_t xb,
                          __m512i table) {
  auto codes = [&](int k) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 17 * (xb + k) + 1));
  };
  __m512i q = _mm512_castsi128_si512(codes(0));
  q = _mm512_inserti32x4(q, codes(1), 1);
  q = _mm512_inserti32x4(q, codes(2), 2);
  q = _mm512_inserti32x4(q, codes(3), 3);
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i w0 = _mm512_shuffle_epi8(table, _mm512_and_si512(q, mask));
  const __m512i w1 = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), mask));
  // x of blocks 0, 1 and 2, 3: [0 lo, 0 hi, 1 lo, 1 hi] -> [0 lo, 1 lo, 2 lo, 3 lo] and his
  const __m512i x01 = _mm512_loadu_si512(a.q.data() + 32 * xb);
  const __m512i x23 = _mm512_loadu_si512(a.q.data() + 32 * xb + 64);
  const __m512i xlo = _mm512_shuffle_i64x2(x01, x23, _MM_SHUFFLE(2, 0, 2, 0));
  const __m512i xhi = _mm512_shuffle_i64x2(x01, x23, _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w0, xlo), w1, xhi);
}

// Int32 lane k of the result: the sum of 128-bit block k % 4 of z[k / 4] (blocks 0..7).
inline __m256i mxfp4_block_sums(__m512i z0, __m512i z1) {
  // per 128 bits: [z0 0+2, z1 0+2, z0 1+3, z1 1+3], then + its 64-bit swap: z0's, z1's total
  __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(z0, z1), _mm512_unpackhi_epi32(z0, z1));
  t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, t));
}

void mxfp4_rows_512(const Weight& w, int64_t r0, int64_t r1, const Q8Activations& a,
                    const float*, float* y, bool accumulate) {
  const int64_t stride = w.row_bytes();
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Plus16)));
  const uint8_t* row = w.row_data(r0);
  for (int64_t r = r0; r < r1; ++r, row += stride) {
    __m256 acc = _mm256_setzero_ps();
    int64_t xb = 0;
    for (; xb + 8 <= a.blocks; xb += 8) {
      const __m256i sums =
          mxfp4_block_sums(mxfp4_quad(row, a, xb, table), mxfp4_quad(row, a, xb + 4, table));
      acc = mxfp4_add(a, xb, sums, mxfp4_scales8(row, xb), acc);
    }
    if (xb < a.blocks) acc = mxfp4_tail(row, a, xb, static_cast<int>(a.blocks - xb), acc);
    const float v = hsum(acc);
    y[r - r0] = accumulate ? y[r - r0] + v : v;
  }
}

}  // namespace

detail::RowKernel detail::avx512_kernel(gguf::TensorType type) {
  if (type == gguf::TensorType::kF16) return half_rows_512<false>;
  if (type == gguf::TensorType::kBF16) return half_rows_512<true>;
  if (type == gguf::TensorType::kMXFP4) return mxfp4_rows_512;
  return pick(type);
}
detail::HalfBatchKernel detail::avx512_half_batch(gguf::TensorType type) {
  if (type == gguf::TensorType::kF16) return half_rows_batch_512<false>;
  if (type == gguf::TensorType::kBF16) return half_rows_batch_512<true>;
  return nullptr;
}
detail::RowGroupKernel detail::avx512_group_kernel(gguf::TensorType type, int n) {
  return pick_group(type, n);
}

}  // namespace kvcache::kernels

KVCACHE_SIMD_END()

#else
namespace kvcache::kernels {
detail::RowKernel detail::avx512_kernel(gguf::TensorType) { return nullptr; }
detail::HalfBatchKernel detail::avx512_half_batch(gguf::TensorType) { return nullptr; }
detail::RowGroupKernel detail::avx512_group_kernel(gguf::TensorType, int) { return nullptr; }
}  // namespace kvcache::kernels
#endif
