// The AVX2 quantized-K/V chunk worker (attention_quant.h), entered only through attend()'s
// run-time dispatch. Key logits in tiles of 8 keys, one 32-value block per 256-bit vector:
// vpmaddubsw multiplies unsigned by signed bytes, so a q8_0 key block is taken as |k| and the
// query codes get k's signs (vpsignb; the products are unchanged and stay below the int16
// saturation: 2 x 128 x 127), while q4_0 nibbles (0..15) are unsigned already and the offset
// of 8 comes off as 8 x the query block's code sum; vpmaddwd sums pairs to int32, one tree of
// horizontal adds folds the 8 keys' lanes, and one f32 FMA per block applies both scales to
// all 8. Values: half a block (16) widened to two f32 vectors and added into up to four
// heads. Measured (32 q / 8 kv heads of 128, 16K keys, BM_DecodeAttentionIsa at AVX2, this
// AMD EPYC): q8_0 from 0.92-0.95x to 1.04-1.11x the calls per second of f16, q4_0 from
// 0.76-0.83x to 1.22-1.27x. Headers first: nothing shared is compiled for the wider set.
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

  // Values [d0, d0 + 16) of a block-type row as two f32 vectors (half of one block).
  static void widen16(DType dtype, const std::byte* row, int32_t d0, __m256 v[2]) {
    const int32_t half = (d0 / 16) % 2;
    if (dtype == DType::kQ8_0) {
      const std::byte* blk = row + int64_t{d0 / kBlockValues} * kQ8_0BlockBytes;
      const __m256 d = _mm256_set1_ps(fast_scale(blk));
      const auto* x = reinterpret_cast<const __m128i*>(blk + 2 + 16 * half);
      v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(x))));
      v[1] = _mm256_mul_ps(
          d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                 reinterpret_cast<const __m128i*>(blk + 2 + 16 * half + 8)))));
      return;
    }
    const std::byte* blk = row + int64_t{d0 / kBlockValues} * kQ4_0BlockBytes;
    const __m256 d = _mm256_set1_ps(fast_scale(blk));
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    if (half) x = _mm_srli_epi16(x, 4);  // values 16..31 are the high nibbles
    x = _mm_and_si128(x, _mm_set1_epi8(0x0F));
    const __m256i eight = _mm256_set1_epi32(8);
    v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(x), eight)));
    v[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(
                                _mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)), eight)));
  }

  // Heads [0, kNh) x 16 values at a time held in registers over all nb rows: each row's half
  // block is widened once for up to four heads.
  template <int kNh>
  static void values_heads(const KvView& kv, const std::byte* const* rows, int64_t nb,
                           const float* w, float* acc) {
    const int32_t dv = kv.value_dim;
    for (int32_t d0 = 0; d0 < dv; d0 += 16) {
      __m256 a[kNh][2];
      for (int i = 0; i < kNh; ++i)
        for (int c = 0; c < 2; ++c) a[i][c] = _mm256_loadu_ps(acc + int64_t{i} * dv + d0 + 8 * c);
      for (int64_t b = 0; b < nb; ++b) {
        __m256 v[2];
        widen16(kv.v_dtype, rows[b], d0, v);
        for (int i = 0; i < kNh; ++i) {
          const __m256 wb = _mm256_set1_ps(w[i * kKeyBlock + b]);
          for (int c = 0; c < 2; ++c) a[i][c] = _mm256_fmadd_ps(wb, v[c], a[i][c]);
        }
      }
      for (int i = 0; i < kNh; ++i)
        for (int c = 0; c < 2; ++c) _mm256_storeu_ps(acc + int64_t{i} * dv + d0 + 8 * c, a[i][c]);
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
      const int32_t n = std::min(4, group - h);
      const float* wh = w + h * kKeyBlock;
      float* ah = acc + int64_t{h} * dv;
      if (n == 4) values_heads<4>(kv, rows, nb, wh, ah);
      else if (n == 3) values_heads<3>(kv, rows, nb, wh, ah);
      else if (n == 2) values_heads<2>(kv, rows, nb, wh, ah);
      else values_heads<1>(kv, rows, nb, wh, ah);
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
