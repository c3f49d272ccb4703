// The AVX-512 (F + BW) chunk worker: the AVX2 worker's algorithm at 16 floats per register,
// entered only through attend()'s run-time dispatch when the CPU has avx512f and avx512bw.
// Same structure, same blocked online softmax; tails narrower than 16 go scalar. All headers
// are included before the target pragma so nothing shared is compiled for AVX-512.
// GCC 12's AVX-512 headers build _mm512_undefined_* from a self-initialized variable, which
// -Wuninitialized reports at every use; the warning is about the header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/attention_chunk.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")

namespace kvcache::cpu::detail {
namespace {

// 8 elements of a stored row starting at element d, as floats.
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

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

// exp(x) for x <= 0 (logit minus running max): 2^n * P(r), |r| <= ln2/2, rel. error ~2e-7.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.0f / 720);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 120));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 24));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f / 6));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.5f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

// Logits of kNh query heads (rows q, q + dim, ...) against one key row. Two accumulators per
// head keep enough independent FMA chains in flight to hide the FMA latency.
template <DType kDtype, int kNh>
inline void dots(const float* q, const std::byte* k, int32_t dim, float scale, float* out,
                 int64_t stride) {
  __m512 acc[kNh][2];
  for (int i = 0; i < kNh; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  int32_t d = 0;
  for (; d + 32 <= dim; d += 32) {
    const __m512 k0 = load16<kDtype>(k, d), k1 = load16<kDtype>(k, d + 16);
    for (int i = 0; i < kNh; ++i) {
      acc[i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * dim + d), k0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * dim + d + 16), k1, acc[i][1]);
    }
  }
  for (; d + 16 <= dim; d += 16) {
    const __m512 kx = load16<kDtype>(k, d);
    for (int i = 0; i < kNh; ++i)
      acc[i][0] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * dim + d), kx, acc[i][0]);
  }
  float tail[kNh] = {};
  for (; d < dim; ++d) {
    const float kx = load1<kDtype>(k, d);
    for (int i = 0; i < kNh; ++i) tail[i] += q[i * dim + d] * kx;
  }
  for (int i = 0; i < kNh; ++i)
    out[i * stride] = (hsum(_mm512_add_ps(acc[i][0], acc[i][1])) + tail[i]) * scale;
}

template <DType kDtype>
void logits_block(const AttentionProblem& p, const KeySet& keys, int32_t g, const float* q,
                  int32_t group, int64_t jb, int64_t nb, float* s) {
  const int32_t dim = p.kv.head_dim;
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* k = p.kv.k_row(g, keys.row(jb + b));
    int32_t h = 0;
    for (; h + 4 <= group; h += 4)
      dots<kDtype, 4>(q + int64_t{h} * dim, k, dim, p.scale, s + h * kKeyBlock + b, kKeyBlock);
    for (; h < group; ++h)
      dots<kDtype, 1>(q + int64_t{h} * dim, k, dim, p.scale, s + h * kKeyBlock + b, kKeyBlock);
  }
  if (p.softcap > 0.0f) {
    for (int32_t h = 0; h < group; ++h)
      for (int64_t b = 0; b < nb; ++b) {
        float& x = s[h * kKeyBlock + b];
        x = p.softcap * std::tanh(x / p.softcap);
      }
  }
}

// acc[h] += sum_b w[h][b] * v_b for kNh heads: a 16-wide slice of the kNh accumulators stays
// in registers (2 * kNh independent FMA chains) while the block's value rows stream through.
template <DType kDtype, int kNh>
inline void values_heads(const std::byte* const* rows, int64_t nb, int32_t dv, const float* w,
                         float* acc) {
  int32_t d = 0;
  for (; d + 32 <= dv; d += 32) {
    __m512 a[kNh][2];
    for (int i = 0; i < kNh; ++i) {
      a[i][0] = _mm512_loadu_ps(acc + int64_t{i} * dv + d);
      a[i][1] = _mm512_loadu_ps(acc + int64_t{i} * dv + d + 16);
    }
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 v0 = load16<kDtype>(rows[b], d), v1 = load16<kDtype>(rows[b], d + 16);
      for (int i = 0; i < kNh; ++i) {
        const __m512 wb = _mm512_set1_ps(w[i * kKeyBlock + b]);
        a[i][0] = _mm512_fmadd_ps(wb, v0, a[i][0]);
        a[i][1] = _mm512_fmadd_ps(wb, v1, a[i][1]);
      }
    }
    for (int i = 0; i < kNh; ++i) {
      _mm512_storeu_ps(acc + int64_t{i} * dv + d, a[i][0]);
      _mm512_storeu_ps(acc + int64_t{i} * dv + d + 16, a[i][1]);
    }
  }
  for (; d + 16 <= dv; d += 16) {
    __m512 a[kNh];
    for (int i = 0; i < kNh; ++i) a[i] = _mm512_loadu_ps(acc + int64_t{i} * dv + d);
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 vx = load16<kDtype>(rows[b], d);
      for (int i = 0; i < kNh; ++i)
        a[i] = _mm512_fmadd_ps(_mm512_set1_ps(w[i * kKeyBlock + b]), vx, a[i]);
    }
    for (int i = 0; i < kNh; ++i) _mm512_storeu_ps(acc + int64_t{i} * dv + d, a[i]);
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
    const __m512 c = _mm512_set1_ps(corr);
    int32_t d = 0;
    for (; d + 16 <= dv; d += 16) _mm512_storeu_ps(acc + d, _mm512_mul_ps(c, _mm512_loadu_ps(acc + d)));
    for (; d < dv; ++d) acc[d] *= corr;
  }
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= nb; b += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + b), mv));
    _mm512_storeu_ps(s + b, e);
    sum = _mm512_add_ps(sum, e);
  }
  float tail = 0.0f;
  for (; b < nb; ++b) tail += (s[b] = std::exp(s[b] - m_new));
  l = l * corr + hsum(sum) + tail;
  m = m_new;
}

// Asks for the K and V rows of keys [j0, j1) ahead of use: scattered cells (many sequences
// in one pool) defeat the hardware prefetcher, which follows only runs within a page.
// Contiguous runs get it only when long (kPrefetchRunKeys): at 4K keys it measured slower
// (f16, 2 threads, AVX-512: 12.8-14.2 GB/s against 18.4-18.7 without), at 64K faster.
void prefetch_rows(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t j0,
                   int64_t j1) {
  const int64_t k_bytes = p.kv.head_dim * p.kv.esize(), v_bytes = p.kv.value_dim * p.kv.esize();
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t row = keys.row(j);
    const char* k = reinterpret_cast<const char*>(p.kv.k_row(g, row));
    const char* v = reinterpret_cast<const char*>(p.kv.v_row(g, row));
    for (int64_t o = 0; o < k_bytes; o += 64) _mm_prefetch(k + o, _MM_HINT_T0);
    for (int64_t o = 0; o < v_bytes; o += 64) _mm_prefetch(v + o, _MM_HINT_T0);
  }
}

template <DType kDtype>
void chunk(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1, float* m,
           float* l, float* acc, float* s) {
  const int32_t group = p.q_heads / p.kv.kv_heads, dv = p.kv.value_dim;
  const KeySet& keys = p.keys[t];
  const bool prefetch = keys.n_runs == 0 || keys.size() >= kPrefetchRunKeys;
  const float* q = p.q + (int64_t{t} * p.q_heads + int64_t{g} * group) * p.kv.head_dim;
  for (int32_t h = 0; h < group; ++h) m[h] = -INFINITY, l[h] = 0.0f;
  std::memset(acc, 0, sizeof(float) * static_cast<size_t>(group) * dv);
  for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, j1 - jb);
    if (prefetch) prefetch_rows(p, keys, g, jb + nb, std::min(j1, jb + nb + kKeyBlock));
    logits_block<kDtype>(p, keys, g, q, group, jb, nb, s);
    for (int32_t h = 0; h < group; ++h)
      softmax_block(s + h * kKeyBlock, nb, dv, m[h], l[h], acc + int64_t{h} * dv);
    values_block<kDtype>(p, keys, g, group, jb, nb, s, acc);
  }
}

}  // namespace

void chunk_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                float* m, float* l, float* acc, float* scratch) {
  switch (p.kv.dtype) {
    case DType::kF32: return chunk<DType::kF32>(p, t, g, j0, j1, m, l, acc, scratch);
    case DType::kF16: return chunk<DType::kF16>(p, t, g, j0, j1, m, l, acc, scratch);
    case DType::kBF16: return chunk<DType::kBF16>(p, t, g, j0, j1, m, l, acc, scratch);
  }
}

}  // namespace kvcache::cpu::detail

#pragma GCC pop_options

#else  // not x86: never selected by best_isa(); forwards to the portable worker.

namespace kvcache::cpu::detail {
void chunk_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                  float* m, float* l, float* acc, float* scratch) {
  chunk_scalar(p, t, g, j0, j1, m, l, acc, scratch);
}
}  // namespace kvcache::cpu::detail
#endif
