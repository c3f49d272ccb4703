// The AVX2 + FMA + F16C chunk worker, entered only through attend()'s run-time dispatch.
// K/V rows are converted in registers (f16 by vcvtph2ps, bf16 by a 16-bit shift), each row
// is read once for all q heads of its group, logits come from tiles of keys x heads folded by
// one hadd tree, the rows of keys further on are prefetched a line at a time, and the softmax
// is updated once per key block with a vector exp. All headers are included before the target
// pragma so nothing shared with other translation units is compiled for AVX2.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/attention_chunk.h"
#include "cpu/simd_target.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx2,fma,f16c")

namespace kvcache::cpu::detail {
namespace {

// 8 elements of a stored row starting at element d, as floats.
template <DType kDtype>
inline __m256 load8(const std::byte* row, int32_t d) {
  if constexpr (kDtype == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  } else if constexpr (kDtype == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d)));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType kDtype>
inline float load1(const std::byte* row, int32_t d) {
  if constexpr (kDtype == DType::kF32) {
    float f;
    std::memcpy(&f, row + 4 * d, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * d, 2);
    if constexpr (kDtype == DType::kF16) {
      return _cvtsh_ss(h);
    } else {
      const uint32_t u = uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
  }
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x) for x <= 0 (logit minus running max): 2^n * P(r), |r| <= ln2/2, rel. error ~2e-7.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.0f / 720);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 120));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 24));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f / 6));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(0.5f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// Eight partial-sum vectors -> one vector of their eight sums, in order.
inline __m256 fold8(const __m256* a) {
  const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 lo = _mm256_hadd_ps(h01, h23), hi = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

// Logits of a tile of kKeys keys (rows k[0..kKeys)) x kNh <= 8 / kKeys query heads (rows q,
// q + dim, ...): 8 accumulators of per-lane partial dot products (those past kKeys * kNh stay
// zero) folded by one hadd tree instead of a horizontal sum per (key, head); dims past the
// last multiple of 8 go scalar. Writes s[h * kKeyBlock + j] for the tile's valid keys j, and
// asks for the rows TileRows names ahead when `prefetch`.
template <DType kDtype, int kKeys, int kNh>
inline void logits_tile(const float* q, const TileRows<kKeys>& rows, bool prefetch,
                        int32_t dim, float scale, float* s) {
  const std::byte* const* k = rows.k;
  constexpr int64_t kEsize = kDtype == DType::kF32 ? 4 : 2;
  __m256 acc[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
  int32_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    if (const int64_t o = d * kEsize; prefetch && o % 64 == 0) rows.prefetch_line(o);
    __m256 kx[kKeys];
#pragma GCC unroll 8
    for (int j = 0; j < kKeys; ++j) kx[j] = load8<kDtype>(k[j], d);
#pragma GCC unroll 4
    for (int h = 0; h < kNh; ++h) {
      const __m256 qx = _mm256_loadu_ps(q + int64_t{h} * dim + d);
#pragma GCC unroll 8
      for (int j = 0; j < kKeys; ++j)
        acc[h * kKeys + j] = _mm256_fmadd_ps(qx, kx[j], acc[h * kKeys + j]);
    }
  }
  if (prefetch) {  // lines past the vector loop, and value rows wider than key rows
    const int64_t rest = std::max(rows.k_bytes, rows.v_bytes);
    for (int64_t o = (d * kEsize + 63) / 64 * 64; o < rest; o += 64) rows.prefetch_line(o);
  }
  alignas(32) float out[8] = {};
  for (int32_t e = d; e < dim; ++e)
    for (int h = 0; h < kNh; ++h)
      for (int j = 0; j < kKeys; ++j)
        out[h * kKeys + j] += q[int64_t{h} * dim + e] * load1<kDtype>(k[j], e);
  const __m256 r = _mm256_add_ps(fold8(acc), _mm256_load_ps(out));
  _mm256_store_ps(out, _mm256_mul_ps(r, _mm256_set1_ps(scale)));
  for (int h = 0; h < kNh; ++h)
    for (int j = 0; j < rows.valid; ++j) s[h * kKeyBlock + j] = out[h * kKeys + j];
}

// acc[h] += sum_b w[h][b] * v_b for kNh heads: a 16-wide slice of the kNh accumulators stays
// in registers (2 * kNh independent FMA chains) while the block's value rows stream through.
template <DType kDtype, int kNh>
inline void values_heads(const std::byte* const* rows, int64_t nb, int32_t dv, const float* w,
                         float* acc) {
  int32_t d = 0;
  for (; d + 16 <= dv; d += 16) {
    __m256 a[kNh][2];
    for (int i = 0; i < kNh; ++i) {
      a[i][0] = _mm256_loadu_ps(acc + int64_t{i} * dv + d);
      a[i][1] = _mm256_loadu_ps(acc + int64_t{i} * dv + d + 8);
    }
    for (int64_t b = 0; b < nb; ++b) {
      const __m256 v0 = load8<kDtype>(rows[b], d), v1 = load8<kDtype>(rows[b], d + 8);
      for (int i = 0; i < kNh; ++i) {
        const __m256 wb = _mm256_broadcast_ss(w + i * kKeyBlock + b);
        a[i][0] = _mm256_fmadd_ps(wb, v0, a[i][0]);
        a[i][1] = _mm256_fmadd_ps(wb, v1, a[i][1]);
      }
    }
    for (int i = 0; i < kNh; ++i) {
      _mm256_storeu_ps(acc + int64_t{i} * dv + d, a[i][0]);
      _mm256_storeu_ps(acc + int64_t{i} * dv + d + 8, a[i][1]);
    }
  }
  for (; d + 8 <= dv; d += 8) {
    __m256 a[kNh];
    for (int i = 0; i < kNh; ++i) a[i] = _mm256_loadu_ps(acc + int64_t{i} * dv + d);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256 vx = load8<kDtype>(rows[b], d);
      for (int i = 0; i < kNh; ++i)
        a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + i * kKeyBlock + b), vx, a[i]);
    }
    for (int i = 0; i < kNh; ++i) _mm256_storeu_ps(acc + int64_t{i} * dv + d, a[i]);
  }
  for (; d < dv; ++d)
    for (int64_t b = 0; b < nb; ++b) {
      const float vx = load1<kDtype>(rows[b], d);
      for (int i = 0; i < kNh; ++i) acc[int64_t{i} * dv + d] += w[i * kKeyBlock + b] * vx;
    }
}

template <DType kDtype>
void values_block(const AttentionProblem& p, const KeySet& keys, int32_t g, int32_t group,
                  int64_t jb, int64_t nb, const float* w, float* acc) {
  const int32_t dv = p.kv.value_dim;
  const std::byte* rows[kKeyBlock];
  for (int64_t b = 0; b < nb; ++b) rows[b] = p.kv.v_row(g, keys.row(jb + b));
  int32_t h = 0;
  for (; h + 4 <= group; h += 4)
    values_heads<kDtype, 4>(rows, nb, dv, w + h * kKeyBlock, acc + int64_t{h} * dv);
  for (; h < group; ++h)
    values_heads<kDtype, 1>(rows, nb, dv, w + h * kKeyBlock, acc + int64_t{h} * dv);
}

// Turns a block's logits of head h into weights and rescales the running state.
void softmax_block(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
  float block_max = -INFINITY;
  for (int64_t b = 0; b < nb; ++b) block_max = std::max(block_max, s[b]);
  const float m_new = std::max(m, block_max);
  const float corr = std::exp(m - m_new);
  if (corr != 1.0f) {
    const __m256 c = _mm256_set1_ps(corr);
    int32_t d = 0;
    for (; d + 8 <= dv; d += 8)
      _mm256_storeu_ps(acc + d, _mm256_mul_ps(c, _mm256_loadu_ps(acc + d)));
    for (; d < dv; ++d) acc[d] *= corr;
  }
  const __m256 mv = _mm256_set1_ps(m_new);
  __m256 sum = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + b), mv));
    _mm256_storeu_ps(s + b, e);
    sum = _mm256_add_ps(sum, e);
  }
  float tail = 0.0f;
  for (; b < nb; ++b) tail += (s[b] = std::exp(s[b] - m_new));
  l = l * corr + hsum(sum) + tail;
  m = m_new;
}

}  // namespace

KVCACHE_ATTENTION_SIMD_ENTRY(chunk_avx2, 8)

void softmax_block_avx2(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
  softmax_block(s, nb, dv, m, l, acc);
}

}  // namespace kvcache::cpu::detail

KVCACHE_SIMD_END()

#else  // not x86: never selected by resolve_isa(); forwards to the portable worker.

namespace kvcache::cpu::detail {
KVCACHE_ATTENTION_SCALAR_ENTRY(chunk_avx2)
void softmax_block_avx2(float*, int64_t, int32_t, float&, float&, float*) {}  // never called
}  // namespace kvcache::cpu::detail
#endif
