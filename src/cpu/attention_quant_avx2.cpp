// The AVX2 quantized-K/V chunk worker (attention_quant.h), entered only through attend()'s
// run-time dispatch. Key logits one 32-value block per 256-bit vector: vpmaddubsw multiplies
// unsigned by signed bytes, so a q8_0 key block is taken as |k| and the query codes get k's
// signs (vpsignb; the products are unchanged and stay below the int16 saturation: 2 x 128 x
// 127), while q4_0 nibbles (0..15) are unsigned already and the offset of 8 comes off as
// 8 x the query block's code sum; vpmaddwd sums pairs to int32, then one f32 FMA per block
// applies both scales. Values: each block of 32 widened to four f32 vectors and added into
// two heads at a time. Headers first: nothing shared is compiled for the wider set.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/attention_quant.h"
#include "cpu/simd_target.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx2,fma,f16c")

namespace kvcache::cpu::detail {
namespace {

// A block's f16 scale with the F16C instruction (block_scale() converts in software).
inline float fast_scale(const std::byte* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return _cvtsh_ss(h);
}

constexpr int32_t kMaxBlocks = 16;  // key rows up to 512 values in vectors; wider ones go scalar

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A q4_0 block's 32 nibbles in value order: low nibbles (values 0..15), then high (16..31).
inline __m256i q4_nibbles(const std::byte* block) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
}

struct Avx2Ops {
  static void prepare(const QueryBlocks&, const KvView&, int32_t) {}

  static void logits(const KvView& kv, const std::byte* k, QueryBlocks& qb, const float* q,
                     int32_t group, float scale, float* s) {
    const int32_t nblk = qb.nblk;
    if (!is_block_type(kv.k_dtype) || nblk > kMaxBlocks)
      return logits_key_scalar(kv, k, qb, q, group, scale, s);
    const bool q8 = kv.k_dtype == DType::kQ8_0;
    const int64_t bb = block_bytes(kv.k_dtype);
    __m256i kb[kMaxBlocks];  // q8_0: the signed bytes; q4_0: the nibbles
    __m256i ka[kMaxBlocks];  // q8_0: |k| (what vpmaddubsw takes unsigned)
    float kd[kMaxBlocks];
    for (int32_t b = 0; b < nblk; ++b) {
      const std::byte* blk = k + b * bb;
      kd[b] = fast_scale(blk);
      if (q8) {
        kb[b] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        ka[b] = _mm256_sign_epi8(kb[b], kb[b]);
      } else {
        kb[b] = q4_nibbles(blk);
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const int32_t dk = kv.head_dim;
    for (int32_t h = 0; h < group; ++h) {
      const int8_t* qs = qb.qs.data() + int64_t{h} * dk;
      const float* qd = qb.d.data() + int64_t{h} * nblk;
      const int32_t* qsum = qb.sum.data() + int64_t{h} * nblk;
      __m256 acc = _mm256_setzero_ps();
      for (int32_t b = 0; b < nblk; ++b) {
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * b));
        __m256i p;
        if (q8) {
          p = _mm256_madd_epi16(_mm256_maddubs_epi16(ka[b], _mm256_sign_epi8(qv, kb[b])), ones);
        } else {
          p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(kb[b], qv), ones),
                               _mm256_set1_epi32(-qsum[b]));  // 8 lanes x -sum = -8 x sum
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(kd[b] * qd[b]), acc);
      }
      s[h * kKeyBlock] = hsum8(acc) * scale;
    }
  }

  static void logits_block(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t jb,
                           int64_t nb, int64_t j1, QueryBlocks& qb, const float* q, float* s,
                           const std::byte** rows) {
    logits_by_key<Avx2Ops>(p, keys, g, jb, nb, j1, qb, q, s, rows);
  }
  static void softmax(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
    softmax_block_avx2(s, nb, dv, m, l, acc);
  }

  // A block type's 32 values from d0 as four f32 vectors.
  static void widen32(DType dtype, const std::byte* row, int32_t d0, __m256 v[4]) {
    if (dtype == DType::kQ8_0) {
      const std::byte* blk = row + int64_t{d0 / kBlockValues} * kQ8_0BlockBytes;
      const __m256 d = _mm256_set1_ps(fast_scale(blk));
      for (int i = 0; i < 4; ++i) {
        const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * i));
        v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)));
      }
      return;
    }
    const std::byte* blk = row + int64_t{d0 / kBlockValues} * kQ4_0BlockBytes;
    const __m256 d = _mm256_set1_ps(fast_scale(blk));
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(x, m), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    const __m256i eight = _mm256_set1_epi32(8);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i)
      v[i] = _mm256_mul_ps(
          d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(parts[i]), eight)));
  }

  template <int kNh>
  static void values_heads(const KvView& kv, const std::byte* const* rows, int64_t nb,
                           const float* w, float* acc) {
    const int32_t dv = kv.value_dim;
    for (int32_t d0 = 0; d0 < dv; d0 += 32) {
      __m256 a[kNh][4];
      for (int i = 0; i < kNh; ++i)
        for (int c = 0; c < 4; ++c) a[i][c] = _mm256_loadu_ps(acc + int64_t{i} * dv + d0 + 8 * c);
      for (int64_t b = 0; b < nb; ++b) {
        __m256 v[4];
        widen32(kv.v_dtype, rows[b], d0, v);
        for (int i = 0; i < kNh; ++i) {
          const __m256 wb = _mm256_set1_ps(w[i * kKeyBlock + b]);
          for (int c = 0; c < 4; ++c) a[i][c] = _mm256_fmadd_ps(wb, v[c], a[i][c]);
        }
      }
      for (int i = 0; i < kNh; ++i)
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(acc + int64_t{i} * dv + d0 + 8 * c, a[i][c]);
    }
  }

  static void values(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                     const float* w, float* acc) {
    const int32_t dv = kv.value_dim;
    if (!is_block_type(kv.v_dtype)) {  // float values with block keys: row by row
      thread_local std::vector<float> vf;
      vf.resize(static_cast<size_t>(dv));
      for (int64_t b = 0; b < nb; ++b) {
        load_row(kv.v_dtype, rows[b], vf.data(), dv);
        for (int32_t h = 0; h < group; ++h) {
          const float wb = w[h * kKeyBlock + b];
          float* a = acc + int64_t{h} * dv;
          for (int32_t d = 0; d < dv; ++d) a[d] += wb * vf[d];
        }
      }
      return;
    }
    for (int32_t h = 0; h < group;) {
      const int32_t n = std::min(2, group - h);
      if (n == 2) values_heads<2>(kv, rows, nb, w + h * kKeyBlock, acc + int64_t{h} * dv);
      else values_heads<1>(kv, rows, nb, w + h * kKeyBlock, acc + int64_t{h} * dv);
      h += n;
    }
  }
};

}  // namespace

void chunk_quant_avx2(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                      float* m, float* l, float* acc, float* scratch) {
  quant_chunk<Avx2Ops>(p, t, g, j0, j1, m, l, acc, scratch);
}

}  // namespace kvcache::cpu::detail

KVCACHE_SIMD_END()

#else  // not x86: never selected by resolve_isa(); forwards to the portable worker.

namespace kvcache::cpu::detail {
void chunk_quant_avx2(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                      float* m, float* l, float* acc, float* scratch) {
  chunk_quant_scalar(p, t, g, j0, j1, m, l, acc, scratch);
}
}  // namespace kvcache::cpu::detail
#endif
