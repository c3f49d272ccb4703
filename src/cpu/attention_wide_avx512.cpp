// The AVX-512 chunk worker for many query heads per kv head: the virtual tokens of
// attention_shared.cpp, where a group of prefill tokens stacks its heads (16 tokens x 3..4
// heads = 48..64 heads on one kv head). Heads lie across the lanes (16 per vector): each key
// block is widened to f32 once, then logits are key x head-vector tiles of FMAs with the key
// element broadcast (no horizontal sums), the online softmax runs lane-wise per head, and
// values accumulate into a [value_dim][heads] state. Entered only through attend()'s run-time
// dispatch; more than 64 heads or a soft-cap go to chunk_avx512.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 headers, not this code
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/attention_chunk.h"
#include "cpu/simd_target.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx512f,avx512bw,avx512vl,avx2,fma,f16c")

namespace kvcache::cpu::detail {
namespace {

constexpr int kMaxVecs = kWideMaxHeads / 16;  // head vectors

#include "cpu/exp_avx512.inc"

// Row `row` (n elements of dtype) widened to f32 into out.
inline void widen(DType dtype, const std::byte* row, int32_t n, float* out) {
  for (int32_t d = 0; d < n; d += 16) {
    const __mmask16 m = lanes(n - d);
    __m512 v;
    if (dtype == DType::kF32) {
      v = _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + d);
    } else {
      const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * d);
      v = dtype == DType::kF16
              ? _mm512_cvtph_ps(h)
              : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    _mm512_mask_storeu_ps(out + d, m, v);
  }
}

// Asks for every line of kv head g's K and V rows at `row`.
inline void prefetch_rows(const AttentionProblem& p, int32_t g, int64_t row) {
  const auto* k = reinterpret_cast<const char*>(p.kv.k_row(g, row));
  const auto* v = reinterpret_cast<const char*>(p.kv.v_row(g, row));
  for (int64_t o = 0; o < p.kv.k_bytes; o += 64) __builtin_prefetch(k + o, 0, 3);
  for (int64_t o = 0; o < p.kv.v_bytes; o += 64) __builtin_prefetch(v + o, 0, 3);
}

// Per-thread state of one call: qt[d][kV * 16] (query transposed, times scale), the block's
// keys and values widened (kf[b][dk], vf[b][dv]), logits then weights s[b][kV * 16] and the
// value sums at[d][kV * 16].
struct Wide {
  std::vector<float> qt, kf, vf, s, at;
};

// Logits of keys [b0, b0 + kK) x kV head vectors: s[b][v] = sum_d kf[b][d] qt[d][v].
template <int kV, int kK>
inline void logits_tile(const Wide& w, int32_t dk, int64_t b0, float* s) {
  constexpr int kW = kV * 16;
  __m512 acc[kK][kV];
  for (int b = 0; b < kK; ++b)
    for (int v = 0; v < kV; ++v) acc[b][v] = _mm512_setzero_ps();
  const float* kf = w.kf.data() + b0 * dk;
  for (int32_t d = 0; d < dk; ++d) {
    __m512 q[kV];
    for (int v = 0; v < kV; ++v) q[v] = _mm512_loadu_ps(w.qt.data() + int64_t{d} * kW + 16 * v);
    for (int b = 0; b < kK; ++b) {
      const __m512 k = _mm512_set1_ps(kf[int64_t{b} * dk + d]);
      for (int v = 0; v < kV; ++v) acc[b][v] = _mm512_fmadd_ps(k, q[v], acc[b][v]);
    }
  }
  for (int b = 0; b < kK; ++b)
    for (int v = 0; v < kV; ++v) _mm512_storeu_ps(s + (b0 + b) * kW + 16 * v, acc[b][v]);
}

// at[d][v] += sum_b vf[b][d] s[b][v] for dims [d0, d0 + kD) and kV head vectors, b < nb;
// at is first scaled by the block's rescale factors.
template <int kV, int kD>
inline void values_tile(Wide& w, int32_t dv, int64_t nb, int32_t d0, const __m512* alpha) {
  constexpr int kW = kV * 16;
  __m512 acc[kD][kV];
  float* at = w.at.data() + int64_t{d0} * kW;
  for (int d = 0; d < kD; ++d)
    for (int v = 0; v < kV; ++v)
      acc[d][v] = _mm512_mul_ps(_mm512_loadu_ps(at + d * kW + 16 * v), alpha[v]);
  for (int64_t b = 0; b < nb; ++b) {
    __m512 p[kV];
    for (int v = 0; v < kV; ++v) p[v] = _mm512_loadu_ps(w.s.data() + b * kW + 16 * v);
    const float* vf = w.vf.data() + b * dv + d0;
    for (int d = 0; d < kD; ++d) {
      const __m512 x = _mm512_set1_ps(vf[d]);
      for (int v = 0; v < kV; ++v) acc[d][v] = _mm512_fmadd_ps(x, p[v], acc[d][v]);
    }
  }
  for (int d = 0; d < kD; ++d)
    for (int v = 0; v < kV; ++v) _mm512_storeu_ps(at + d * kW + 16 * v, acc[d][v]);
}

template <int kV>
void wide_chunk(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                float* m_out, float* l_out, float* acc_out) {
  constexpr int kW = kV * 16;
  constexpr int kK = kV <= 2 ? 6 : 4;  // keys per logits tile (kK x kV accumulators)
  constexpr int kD = kV <= 2 ? 6 : 4;  // dims per values tile
  const int32_t group = p.q_heads / p.kv.kv_heads, dk = p.kv.head_dim, dv = p.kv.value_dim;
  const KeySet& keys = p.keys[t];
  const float* q = p.q + (int64_t{t} * p.q_heads + int64_t{g} * group) * dk;
  thread_local Wide w;
  w.qt.assign(static_cast<size_t>(dk) * kW, 0.0f);
  for (int32_t h = 0; h < group; ++h)
    for (int32_t d = 0; d < dk; ++d) w.qt[int64_t{d} * kW + h] = q[int64_t{h} * dk + d] * p.scale;
  w.kf.assign(static_cast<size_t>(kKeyBlock + kK) * dk, 0.0f);  // tiles may pass the block end
  w.vf.resize(static_cast<size_t>(kKeyBlock) * dv);
  w.s.resize(static_cast<size_t>(kKeyBlock + kK) * kW);
  w.at.assign(static_cast<size_t>(dv) * kW, 0.0f);
  __m512 m[kV], l[kV];
  for (int v = 0; v < kV; ++v) m[v] = _mm512_set1_ps(-INFINITY), l[v] = _mm512_setzero_ps();
  for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, j1 - jb);
    // The next block's rows are asked for now: widening waited on memory without it.
    for (int64_t b = jb + kKeyBlock; b < std::min(j1, jb + 2 * kKeyBlock); ++b)
      prefetch_rows(p, g, keys.row(b));
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t row = keys.row(jb + b);
      widen(p.kv.k_dtype, p.kv.k_row(g, row), dk, w.kf.data() + b * dk);
      widen(p.kv.k_dtype, p.kv.v_row(g, row), dv, w.vf.data() + b * dv);
    }
    for (int64_t b = 0; b < nb; b += kK) logits_tile<kV, kK>(w, dk, b, w.s.data());
    // Online softmax per head lane: the block's max, the rescale of the running state, the
    // weights exp(s - m) in place and their sum.
    __m512 alpha[kV];
    for (int v = 0; v < kV; ++v) {
      __m512 mx = m[v];
      for (int64_t b = 0; b < nb; ++b)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(&w.s[b * kW + 16 * v]));
      alpha[v] = exp16(_mm512_sub_ps(m[v], mx));  // m = -inf: exp16 clamps, gives ~0
      __m512 sum = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        float* sb = &w.s[b * kW + 16 * v];
        const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sb), mx));
        _mm512_storeu_ps(sb, e);
        sum = _mm512_add_ps(sum, e);
      }
      l[v] = _mm512_fmadd_ps(l[v], alpha[v], sum);
      m[v] = mx;
    }
    int32_t d = 0;
    for (; d + kD <= dv; d += kD) values_tile<kV, kD>(w, dv, nb, d, alpha);
    for (; d < dv; ++d) values_tile<kV, 1>(w, dv, nb, d, alpha);
  }
  alignas(64) float mb[kW], lb[kW];
  for (int v = 0; v < kV; ++v) {
    _mm512_store_ps(mb + 16 * v, m[v]);
    _mm512_store_ps(lb + 16 * v, l[v]);
  }
  for (int32_t h = 0; h < group; ++h) {
    m_out[h] = mb[h];
    l_out[h] = lb[h];
    for (int32_t d = 0; d < dv; ++d) acc_out[int64_t{h} * dv + d] = w.at[int64_t{d} * kW + h];
  }
}

}  // namespace

void chunk_avx512_wide(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                       float* m, float* l, float* acc, float* scratch) {
  const int32_t group = p.q_heads / p.kv.kv_heads;
  if (p.softcap > 0.0f || group > 16 * kMaxVecs || j1 <= j0)
    return chunk_avx512(p, t, g, j0, j1, m, l, acc, scratch);
  switch ((group + 15) / 16) {
    case 1: return wide_chunk<1>(p, t, g, j0, j1, m, l, acc);
    case 2: return wide_chunk<2>(p, t, g, j0, j1, m, l, acc);
    case 3: return wide_chunk<3>(p, t, g, j0, j1, m, l, acc);
    default: return wide_chunk<4>(p, t, g, j0, j1, m, l, acc);
  }
}

}  // namespace kvcache::cpu::detail

KVCACHE_SIMD_END()

#else  // not x86: never selected; forwards to the portable worker.

namespace kvcache::cpu::detail {
void chunk_avx512_wide(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                       float* m, float* l, float* acc, float* scratch) {
  chunk_scalar(p, t, g, j0, j1, m, l, acc, scratch);
}
}  // namespace kvcache::cpu::detail
#endif
