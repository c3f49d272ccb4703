// The AVX-512 (F + BW + VL) chunk worker, entered only through attend()'s run-time dispatch.
// The AVX2 worker's blocked online softmax, with the logits computed in tiles of keys x heads
// folded by one shuffle tree, dim and key tails handled by masks, and the rows of keys further
// on prefetched while a tile computes. All headers are included before the target pragma so
// nothing shared is compiled for AVX-512.
// GCC 12's AVX-512 headers build _mm512_undefined_* from a self-initialized variable, which
// -Wuninitialized reports at every use; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/attention_chunk.h"
#include "cpu/simd_target.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

namespace kvcache::cpu::detail {
namespace {

// 16 elements of a stored row starting at element d, as floats.
template <DType kDtype>
inline __m512 load16(const std::byte* row, int32_t d) {
  if constexpr (kDtype == DType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
  } else if constexpr (kDtype == DType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d)));
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

#include "cpu/exp_avx512.inc"

// 16 elements of a stored row from element d, lanes outside `m` read as zero (dim tails).
template <DType kDtype>
inline __m512 load16m(const std::byte* row, int32_t d, __mmask16 m) {
  if constexpr (kDtype == DType::kF32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + d);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * d);
    if constexpr (kDtype == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// Four partial-sum vectors a0..a3 -> one vector whose 128-bit block c holds, in lanes 0..3,
// the sums of a0..a3 over their block c.
inline __m512 fold4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 u = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 w = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  const __m512d ud = _mm512_castps_pd(u), wd = _mm512_castps_pd(w);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(ud, wd)),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(ud, wd)));
}

// Four fold4 results -> block i of the result holds the 4 complete sums of z_i.
inline __m512 fold_blocks(__m512 z0, __m512 z1, __m512 z2, __m512 z3) {
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, kEven),
                                   _mm512_shuffle_f32x4(z0, z1, kOdd));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(z2, z3, kEven),
                                   _mm512_shuffle_f32x4(z2, z3, kOdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, kEven),
                       _mm512_shuffle_f32x4(y01, y23, kOdd));
}

// One 16-wide step of dim for a tile: kKeys key slices against kNh query slices.
template <DType kDtype, int kKeys, int kNh, bool kMasked>
[[gnu::always_inline]] inline void tile_step(__m512* acc, const float* q, const std::byte* const* k,
                                             int32_t dim, int32_t d, __mmask16 m) {
  __m512 kx[kKeys];
#pragma GCC unroll 16
  for (int j = 0; j < kKeys; ++j)
    kx[j] = kMasked ? load16m<kDtype>(k[j], d, m) : load16<kDtype>(k[j], d);
#pragma GCC unroll 4
  for (int h = 0; h < kNh; ++h) {
    const float* qh = q + int64_t{h} * dim + d;
    const __m512 qx = kMasked ? _mm512_maskz_loadu_ps(m, qh) : _mm512_loadu_ps(qh);
#pragma GCC unroll 16
    for (int j = 0; j < kKeys; ++j)
      acc[h * kKeys + j] = _mm512_fmadd_ps(qx, kx[j], acc[h * kKeys + j]);
  }
}

// Logits of a tile of kKeys keys (rows k[0..kKeys)) x kNh <= 16 / kKeys query heads (rows q,
// q + dim, ...): 16 accumulators of per-lane partial dot products (those past kKeys * kNh stay
// zero), folded together by one shuffle tree instead of a horizontal sum per (key, head).
// Writes s[h * kKeyBlock + j] for the tile's valid keys j, and asks for the rows TileRows
// names ahead when `prefetch`.
template <DType kDtype, int kKeys, int kNh>
inline void logits_tile(const float* q, const TileRows<kKeys>& rows, bool prefetch,
                        int32_t dim, float scale, float* s) {
  const std::byte* const* k = rows.k;
  constexpr int64_t kEsize = kDtype == DType::kF32 ? 4 : 2;
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  int32_t d = 0;
  for (; d < dim; d += 16) {
    if (const int64_t o = d * kEsize; prefetch && o % 64 == 0) rows.prefetch_line(o);
    if (d + 16 > dim) break;
    tile_step<kDtype, kKeys, kNh, false>(acc, q, k, dim, d, 0xFFFF);
  }
  if (d < dim) tile_step<kDtype, kKeys, kNh, true>(acc, q, k, dim, d, lanes(dim - d));
  if (prefetch) {  // value rows wider than key rows
    for (int64_t o = (dim * kEsize + 63) / 64 * 64; o < rows.v_bytes; o += 64)
      rows.prefetch_line(o);
  }
  __m512 z[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    z[i] = fold4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
  const __m512 r = _mm512_mul_ps(fold_blocks(z[0], z[1], z[2], z[3]), _mm512_set1_ps(scale));
  // Block i holds keys 4 * (i % (kKeys / 4)) + 0..3 of head i / (kKeys / 4): one masked store
  // per block, addressed so that lane 4 * i + j lands on s[h * kKeyBlock + key].
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const int h = i / (kKeys / 4), key0 = 4 * (i % (kKeys / 4));
    if (h >= kNh) break;
    const int n = std::clamp(rows.valid - key0, 0, 4);
    const auto m = static_cast<__mmask16>(((1u << n) - 1) << (4 * i));
    _mm512_mask_storeu_ps(s + int64_t{h} * kKeyBlock + key0 - 4 * i, m, r);
  }
}

// acc[h] += sum_b w[h][b] * v_b for kNh heads: 8 / kNh 16-wide slices of each of the kNh
// accumulators stay in registers (8 independent FMA chains, 6 for kNh = 3) while the
// block's value rows stream through; the last slices of dv are masked.
template <DType kDtype, int kNh>
inline void values_heads(const std::byte* const* rows, int64_t nb, int32_t dv, const float* w,
                         float* acc) {
  constexpr int kVecs = 8 / kNh;
  int32_t d = 0;
  for (; d + 16 * kVecs <= dv; d += 16 * kVecs) {
    __m512 a[kNh * kVecs];
#pragma GCC unroll 8
    for (int i = 0; i < kNh * kVecs; ++i)
      a[i] = _mm512_loadu_ps(acc + int64_t{i / kVecs} * dv + d + 16 * (i % kVecs));
    for (int64_t b = 0; b < nb; ++b) {
      __m512 vx[kVecs];
#pragma GCC unroll 8
      for (int c = 0; c < kVecs; ++c) vx[c] = load16<kDtype>(rows[b], d + 16 * c);
#pragma GCC unroll 8
      for (int i = 0; i < kNh; ++i) {
        const __m512 wb = _mm512_set1_ps(w[i * kKeyBlock + b]);
#pragma GCC unroll 8
        for (int c = 0; c < kVecs; ++c)
          a[i * kVecs + c] = _mm512_fmadd_ps(wb, vx[c], a[i * kVecs + c]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < kNh * kVecs; ++i)
      _mm512_storeu_ps(acc + int64_t{i / kVecs} * dv + d + 16 * (i % kVecs), a[i]);
  }
  for (; d < dv; d += 16) {
    const __mmask16 m = lanes(dv - d);
    __m512 a[kNh];
#pragma GCC unroll 8
    for (int i = 0; i < kNh; ++i) a[i] = _mm512_maskz_loadu_ps(m, acc + int64_t{i} * dv + d);
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 vx = load16m<kDtype>(rows[b], d, m);
#pragma GCC unroll 8
      for (int i = 0; i < kNh; ++i)
        a[i] = _mm512_fmadd_ps(_mm512_set1_ps(w[i * kKeyBlock + b]), vx, a[i]);
    }
#pragma GCC unroll 8
    for (int i = 0; i < kNh; ++i) _mm512_mask_storeu_ps(acc + int64_t{i} * dv + d, m, a[i]);
  }
}

template <DType kDtype>
void values_block(const AttentionProblem& p, const KeySet& keys, int32_t g, int32_t group,
                  int64_t jb, int64_t nb, const float* w, float* acc) {
  const int32_t dv = p.kv.value_dim;
  const std::byte* rows[kKeyBlock];
  for (int64_t b = 0; b < nb; ++b) rows[b] = p.kv.v_row(g, keys.row(jb + b));
  // Four heads at a time, then the 1..3 left: each value row is widened once per slice, so
  // twice for a group of 7 (4 + 3) where slices of one head widened it 7 times.
  for (int32_t h = 0; h < group;) {
    const int32_t n = std::min(4, group - h);
    const float* wh = w + h * kKeyBlock;
    float* ah = acc + int64_t{h} * dv;
    if (n == 4) {
      values_heads<kDtype, 4>(rows, nb, dv, wh, ah);
    } else if (n == 3) {  // 3 heads x 2 vectors of 16 dims in registers
      values_heads<kDtype, 3>(rows, nb, dv, wh, ah);
    } else if (n == 2) {
      values_heads<kDtype, 2>(rows, nb, dv, wh, ah);
    } else {
      values_heads<kDtype, 1>(rows, nb, dv, wh, ah);
    }
    h += n;
  }
}

// Turns a block's logits of head h into weights and rescales the running state.
void softmax_block(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int64_t b = 0; b < nb; b += 16)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, lanes(nb - b), s + b));
  const float m_new = std::max(m, _mm512_reduce_max_ps(mx));
  const float corr = std::exp(m - m_new);
  if (corr != 1.0f) {
    const __m512 c = _mm512_set1_ps(corr);
    for (int32_t d = 0; d < dv; d += 16) {
      const __mmask16 k = lanes(dv - d);
      _mm512_mask_storeu_ps(acc + d, k, _mm512_mul_ps(c, _mm512_maskz_loadu_ps(k, acc + d)));
    }
  }
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 16) {
    const __mmask16 k = lanes(nb - b);
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + b), mv);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(x));
    _mm512_mask_storeu_ps(s + b, k, e);
    sum = _mm512_add_ps(sum, e);
  }
  l = l * corr + hsum(sum);
  m = m_new;
}

}  // namespace

KVCACHE_ATTENTION_SIMD_ENTRY(chunk_avx512, 16)

void softmax_block_avx512(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
  softmax_block(s, nb, dv, m, l, acc);
}

}  // namespace kvcache::cpu::detail

KVCACHE_SIMD_END()

#else  // not x86: never selected by resolve_isa(); forwards to the portable worker.

namespace kvcache::cpu::detail {
KVCACHE_ATTENTION_SCALAR_ENTRY(chunk_avx512)
void softmax_block_avx512(float*, int64_t, int32_t, float&, float&, float*) {}  // never called
}  // namespace kvcache::cpu::detail
#endif
