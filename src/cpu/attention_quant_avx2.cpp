// The AVX2 quantized-K/V chunk worker (attention_quant.h), entered only through attend()'s
// run-time dispatch. Key logits in tiles of 8 keys, one 32-value block per 256-bit vector:
// vpmaddubsw multiplies unsigned by signed bytes, so a q8_0 key block is taken as |k| and the
// query codes get k's signs (vpsignb; the products are unchanged and stay below the int16
// saturation: 2 x 128 x 127), while q4_0 nibbles (0..15) are unsigned already and the offset
// of 8 comes off as 8 x the query block's code sum; vpmaddwd sums pairs to int32, one tree of
// horizontal adds folds the 8 keys' lanes, and one f32 FMA per block applies both scales to
// all 8. Block values: integer sums over the keys (value_int.inc; vpmaddubsw + vpmaddwd per
// 4 keys x 8 values, two heads at a time in the 16 registers); float values row by row.
// Measured (32 q / 8 kv heads of 128, 16K keys, BM_DecodeAttentionIsa at AVX2, this AMD
// EPYC): q8_0 from 0.92-0.95x to 1.04-1.11x the calls per second of f16, q4_0 from
// 0.76-0.83x to 1.22-1.27x; the integer values then took q8_0 from 195-201 to 218 calls/s
// (64K keys: 49.2-49.6 to 53.0-54.1), 1 thread, alternating runs.
// Headers first: nothing shared is compiled for the wider set.
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

constexpr int kTile = 8;  // keys a logit tile

// The lane sums of eight int32 vectors, in order: one tree of horizontal adds, then the two
// 128-bit halves added.
inline __m256i fold8(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

// A q4_0 block's 32 nibbles in value order: low nibbles (values 0..15), then high (16..31).
inline __m256i q4_nibbles(const std::byte* block) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
}

// vpmaddubsw adds two u x code products in int16 (below saturation: u <= 127), vpmaddwd
// the pairs into int32.
struct MaddDot {
  static __m256i add(__m256i acc, __m256i u, __m256i t) {
    const __m256i pairs = _mm256_maddubs_epi16(u, t);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

#include "cpu/value_int.inc"

// The largest of 8 lanes.
inline float max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// 32 int32 codes (-127..127) as 32 bytes in order.
inline __m256i pack_codes(const __m256i* i) {
  const __m256i w01 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i[0], i[1]), 0xD8);
  const __m256i w23 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i[2], i[3]), 0xD8);
  return _mm256_permute4x64_epi64(_mm256_packs_epi16(w01, w23), 0xD8);
}

struct Avx2Ops {
  static void prepare(const QueryBlocks&, const KvView&, int32_t) {}

  // One key at a time: only for float keys and rows wider than kMaxBlocks blocks, which
  // logits_block leaves to logits_by_key.
  static void logits(const KvView& kv, const std::byte* k, QueryBlocks& qb, const float* q,
                     int32_t group, float scale, float* s) {
    logits_key_scalar(kv, k, qb, q, group, scale, s);
  }

  // Tiles of 8 keys: per head and block, the 8 keys' int32 partial sums (vpmaddubsw,
  // vpmaddwd) are folded across lanes by one tree of horizontal adds into one vector of 8
  // block sums, converted once and scaled by the 8 keys' scales times the query's. Each key's
  // bytes are prepared once a tile (|k| for q8_0, nibbles for q4_0) for every head.
  static void logits_block(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t jb,
                           int64_t nb, int64_t j1, QueryBlocks& qb, const float* q, float* s,
                           const std::byte** rows) {
    const KvView& kv = p.kv;
    if (!is_block_type(kv.k_dtype) || qb.nblk > kMaxBlocks)
      return logits_by_key<Avx2Ops>(p, keys, g, jb, nb, j1, qb, q, s, rows);
    const int32_t group = p.q_heads / kv.kv_heads, nblk = qb.nblk, dk = kv.head_dim;
    const bool q8 = kv.k_dtype == DType::kQ8_0;
    const int64_t bb = block_bytes(kv.k_dtype);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b0 = 0; b0 < nb; b0 += kTile) {
      const std::byte* k[kTile];
      const int valid = gather_tile(kv, keys, g, jb, b0, nb, j1, kTile, k, rows);
      __m256i ku[kMaxBlocks][kTile];  // q8_0: |k|; q4_0: the nibbles in value order
      __m256 kd[kMaxBlocks];          // the 8 keys' scales of each block
      for (int32_t b = 0; b < nblk; ++b) {
        alignas(16) uint16_t h[kTile];
        for (int i = 0; i < kTile; ++i) {
          const std::byte* blk = k[i] + b * bb;
          std::memcpy(&h[i], blk, 2);
          if (q8) {
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
            ku[b][i] = _mm256_sign_epi8(x, x);
          } else {
            ku[b][i] = q4_nibbles(blk);
          }
        }
        kd[b] = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
      }
      for (int32_t hd = 0; hd < group; ++hd) {
        const int8_t* qs = qb.qs.data() + int64_t{hd} * dk;
        const float* qd = qb.d.data() + int64_t{hd} * nblk;
        const int32_t* qsum = qb.sum.data() + int64_t{hd} * nblk;
        __m256 acc = _mm256_setzero_ps();
        for (int32_t b = 0; b < nblk; ++b) {
          const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * b));
          __m256i part[kTile];
          for (int i = 0; i < kTile; ++i) {
            const __m256i sq = q8 ? _mm256_sign_epi8(qv, _mm256_loadu_si256(
                                                             reinterpret_cast<const __m256i*>(
                                                                 k[i] + b * bb + 2)))
                                  : qv;
            part[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(ku[b][i], sq), ones);
          }
          __m256i sums = fold8(part);
          if (!q8) sums = _mm256_sub_epi32(sums, _mm256_set1_epi32(8 * qsum[b]));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums),
                                _mm256_mul_ps(kd[b], _mm256_set1_ps(qd[b])), acc);
        }
        alignas(32) float out[kTile];
        _mm256_store_ps(out, _mm256_mul_ps(acc, _mm256_set1_ps(p.scale)));
        for (int i = 0; i < valid; ++i) s[hd * kKeyBlock + b0 + i] = out[i];
      }
    }
  }
  static void softmax(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
    softmax_block_avx2(s, nb, dv, m, l, acc);
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
    ValueCodes& vc = thread_value_codes();
    value_codes_avx2(kv, rows, nb, group, w, vc);
    values_int_avx2(kv, rows, nb, group, vc, acc);
  }
};

}  // namespace

void value_codes_avx2(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                      const float* w, ValueCodes& vc) {
  vc.size_for(group, kv.value_dim / kBlockValues);
  value_block_scales(kv, rows, nb, vc);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const bool q8 = kv.v_dtype == DType::kQ8_0;
  for (int32_t h = 0; h < group; ++h)
    for (int32_t c = 0; c < vc.nvb; ++c) {
      __m256 x[kKeyBlock / 8];
      __m256 top = _mm256_setzero_ps();
      for (int v = 0; v < kKeyBlock / 8; ++v) {
        const __m256i in = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(nb - 8 * v)),
                                              iota);
        const __m256 wv = _mm256_maskload_ps(w + h * kKeyBlock + 8 * v, in);
        x[v] = _mm256_mul_ps(wv, _mm256_maskload_ps(vc.dv.data() + c * kKeyBlock + 8 * v, in));
        if (q8) x[v] = _mm256_max_ps(x[v], _mm256_setzero_ps());
        top = _mm256_max_ps(top, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x[v]));
      }
      const float t = max8(top);
      const int64_t i = int64_t{h} * vc.nvb + c;
      const __m256 inv = _mm256_set1_ps(weight_code_scale(t, &vc.s[i]));
      __m256i sum = _mm256_setzero_si256();
      for (int v = 0; v < kKeyBlock / 8; v += 4) {
        __m256i q[4];
        for (int k = 0; k < 4; ++k) {
          q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(x[v + k], inv));
          sum = _mm256_add_epi32(sum, q[k]);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(vc.codes(h, c) + 8 * v), pack_codes(q));
      }
      alignas(32) int32_t lanes[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
      vc.usum[i] = 0;
      if (!q8)  // only q4_0's offset needs it
        for (int32_t l : lanes) vc.usum[i] += l;
    }
}

template <bool kQ8>
void values_int_for(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                    const ValueCodes& vc, float* acc) {
  for (int32_t h = 0; h < group; h += 2) {
    if (h + 1 < group) values_int_heads<2, MaddDot, kQ8>(kv, rows, nb, vc, h, acc);
    else values_int_heads<1, MaddDot, kQ8>(kv, rows, nb, vc, h, acc);
  }
}

void values_int_avx2(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                     const ValueCodes& vc, float* acc) {
  if (kv.v_dtype == DType::kQ8_0) values_int_for<true>(kv, rows, nb, group, vc, acc);
  else values_int_for<false>(kv, rows, nb, group, vc, acc);
}

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
void value_codes_avx2(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                      const float* w, ValueCodes& vc) {
  value_codes_reference(kv, rows, nb, group, w, vc);
}
void values_int_avx2(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                     const ValueCodes& vc, float* acc) {
  values_int_reference(kv, rows, nb, group, vc, acc);
}
}  // namespace kvcache::cpu::detail
#endif
