// The AVX-512 VNNI quantized-K/V chunk worker (attention_quant.h), entered only through
// attend()'s run-time dispatch (KernelFamily::kInt8Dot). vpdpbusd multiplies unsigned by
// signed bytes, so q8_0 key bytes are offset by 128 (xor 0x80) and q4_0 nibbles are taken as
// stored (0..15); each accumulator starts at minus offset x the query block's code sum,
// leaving exactly sum(q * k). Key logits, groups of a multiple of 4 heads: 4 keys x 4 heads
// in the 16 lanes, each lane a whole block (LaneTables: no horizontal sums); other groups:
// two blocks per vector per head, tiles of 4 keys folded at once (PairTables). Block values:
// integer sums over the keys (value_int.inc, one vpdpbusd per 4 keys x 8 values); float
// values: each block of 32 widened to two f32 vectors and added into up to four heads.
// Measured (32 q / 8 kv heads of 128, kvcache_attention_bench BM_DecodeAttentionIsa, shared
// 2-core machine, noisy): the lane layout took q8_0 from 0.74-0.88x to 1.0-1.25x the calls
// per second of f16 at 16K-64K keys, q4_0 to 1.3-1.5x. The integer values left q8_0 where it
// was at this width (16K keys, 1 thread: 385-416 against 407-420 calls/s, alternating): the
// weight codes cost what the f32 products saved.
// Headers first: nothing shared is compiled for the wider set.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 headers, not this code
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/attention_quant.h"
#include "cpu/simd_target.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")

namespace kvcache::cpu::detail {
namespace {

#include "cpu/exp_avx512.inc"  // lanes()

// A block's f16 scale with the F16C instruction (block_scale() converts in software).
inline float fast_scale(const std::byte* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return _cvtsh_ss(h);
}

// vpdpbusd adds the 4 u x code products of each int32 lane at once.
struct VnniDot {
  static __m256i add(__m256i acc, __m256i u, __m256i t) { return _mm256_dpbusd_epi32(acc, u, t); }
};

#include "cpu/value_int.inc"

// The f16 scales at byte `at` of four rows, converted at once.
inline __m128 four_scales(const std::byte* const* rows, int64_t at) {
  uint16_t h[4];
  for (int i = 0; i < 4; ++i) std::memcpy(&h[i], rows[i] + at, 2);
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(h[0]), static_cast<int16_t>(h[1]),
                                     static_cast<int16_t>(h[2]), static_cast<int16_t>(h[3]), 0,
                                     0, 0, 0));
}

constexpr int32_t kMaxPairs = 8;  // key rows up to 512 values in vectors; wider ones go scalar

// Per head h and block pair c (blocks 2c, 2c + 1; the second absent for an odd count): the
// int32 start of each lane (minus offset x code sum / 8) and the query scales per lane.
struct PairTables {
  std::vector<int32_t> start;  // [group][pairs][16]
  std::vector<float> qd;       // [group][pairs][16]
  std::vector<int8_t> qs;      // the codes, padded by 64 bytes (an odd tail reads past a head)
};

PairTables& thread_tables() {
  thread_local PairTables t;
  return t;
}

void prepare_pairs(const QueryBlocks& qb, const KvView& kv, int32_t group, PairTables& t) {
  const int32_t pairs = (qb.nblk + 1) / 2;
  const int32_t offset_share = kv.k_dtype == DType::kQ8_0 ? 16 : 1;  // 128 / 8 or 8 / 8
  t.start.assign(static_cast<size_t>(group) * pairs * 16, 0);
  t.qd.assign(static_cast<size_t>(group) * pairs * 16, 0.0f);
  for (int32_t h = 0; h < group; ++h)
    for (int32_t b = 0; b < qb.nblk; ++b) {
      const int64_t at = (int64_t{h} * pairs + b / 2) * 16 + (b % 2) * 8;
      const int64_t i = int64_t{h} * qb.nblk + b;
      for (int l = 0; l < 8; ++l) {
        t.start[at + l] = -offset_share * qb.sum[i];
        t.qd[at + l] = qb.d[i];
      }
    }
  t.qs.resize(qb.qs.size() + 64);
  std::copy(qb.qs.begin(), qb.qs.end(), t.qs.begin());
}

// For groups of a multiple of 4 heads, a second layout that needs no horizontal sums: the 16
// lanes of a vector are (key i, head h) = 4 i + h for 4 keys x 4 heads, each lane
// accumulating a whole block's dot product. Per 4-head slice c, block b and 4-byte group d
// (of 8): q holds head h's codes d as an int32 in lane 4 i + h; start holds minus the key
// offset (128 for q8_0 made unsigned, 8 for q4_0) x head h's code sum; qd head h's scale.
struct LaneTables {
  std::vector<int32_t> q;      // [slice][block][8][16]
  std::vector<int32_t> start;  // [slice][block][16]
  std::vector<float> qd;       // [slice][block][16]
};

LaneTables& thread_lanes() {
  thread_local LaneTables t;
  return t;
}

void prepare_lanes(const QueryBlocks& qb, const KvView& kv, int32_t group, LaneTables& t) {
  const int32_t slices = group / 4, nblk = qb.nblk, dk = kv.head_dim;
  const int32_t offset = kv.k_dtype == DType::kQ8_0 ? 128 : 8;
  t.q.resize(static_cast<size_t>(slices) * nblk * 8 * 16);
  t.start.resize(static_cast<size_t>(slices) * nblk * 16);
  t.qd.resize(static_cast<size_t>(slices) * nblk * 16);
  for (int32_t c = 0; c < slices; ++c)
    for (int32_t b = 0; b < nblk; ++b)
      for (int32_t lane = 0; lane < 16; ++lane) {
        const int32_t h = 4 * c + lane % 4;
        const int64_t cb = int64_t{c} * nblk + b;
        t.start[cb * 16 + lane] = -offset * qb.sum[int64_t{h} * nblk + b];
        t.qd[cb * 16 + lane] = qb.d[int64_t{h} * nblk + b];
        for (int32_t d = 0; d < 8; ++d)
          std::memcpy(&t.q[(cb * 8 + d) * 16 + lane],
                      qb.qs.data() + int64_t{h} * dk + b * kBlockValues + 4 * d, 4);
      }
}

// Block b's 32 values of a q8_0 row as unsigned bytes (value + 128).
inline __m256i q8_unsigned(const std::byte* row, int32_t b) {
  const __m256i x = _mm256_loadu_si256(
      reinterpret_cast<const __m256i*>(row + int64_t{b} * kQ8_0BlockBytes + 2));
  return _mm256_xor_si256(x, _mm256_set1_epi8(static_cast<char>(0x80)));
}

// Blocks b, b + 1 of a q4_0 row as nibbles in value order ([lo b | hi b | lo b+1 | hi b+1]);
// `two` false: block b only, the upper half zero.
inline __m512i q4_pair(const std::byte* row, int32_t b, bool two) {
  const std::byte* p = row + int64_t{b} * kQ4_0BlockBytes + 2;
  const __m128i x0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i x1 = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kQ4_0BlockBytes))
                         : _mm_setzero_si128();
  const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(x0), x1, 1);
  const __m256i m = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(x, m);                         // [lo b | lo b+1]
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m);   // [hi b | hi b+1]
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

// Key row k's block pairs: ku[c] the pair's codes as vpdpbusd's unsigned operand, kd[c] its
// two scales across the pair's lanes (the second 0 when absent).
inline void load_key(const std::byte* k, bool q8, int64_t bb, int32_t nblk, int32_t pairs,
                     __m512i* ku, __m512* kd) {
  for (int32_t c = 0; c < pairs; ++c) {
    const int32_t b = 2 * c;
    const bool two = b + 1 < nblk;
    if (q8) {
      const __m256i hi = two ? q8_unsigned(k, b + 1) : _mm256_setzero_si256();
      ku[c] = _mm512_inserti64x4(_mm512_castsi256_si512(q8_unsigned(k, b)), hi, 1);
    } else {
      ku[c] = q4_pair(k, b, two);
    }
    const float d1 = two ? fast_scale(k + (b + 1) * bb) : 0.0f;
    kd[c] = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(fast_scale(k + b * bb)),
                                 _mm512_set1_ps(d1));
  }
}

// The sums of four vectors, in order.
inline __m128 fold4(const __m512* a) {
  __m128 u[4];
  for (int i = 0; i < 4; ++i) {
    const __m256 lo = _mm512_castps512_ps256(a[i]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[i]), 1));
    const __m256 t = _mm256_add_ps(lo, hi);
    u[i] = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  }
  return _mm_hadd_ps(_mm_hadd_ps(u[0], u[1]), _mm_hadd_ps(u[2], u[3]));
}


struct Avx512Ops {
  // One key at a time (the float-key fallback and rows wider than kMaxPairs blocks).
  static void logits(const KvView& kv, const std::byte* k, QueryBlocks& qb, const float* q,
                     int32_t group, float scale, float* s) {
    logits_key_scalar(kv, k, qb, q, group, scale, s);
  }

  // Groups of a multiple of 4 heads: tiles of 4 keys x 4 heads in the lanes (LaneTables).
  // Per block, the 4 keys' codes are dealt to the lanes 4 bytes at a time by one dword
  // permute (lane 4 i + h takes key i's bytes), then one vpdpbusd adds a 4-byte group for all
  // 16 (key, head) pairs; one convert and one FMA per block apply both scales. Nothing is
  // summed across lanes.
  static void logits_block_lanes(const AttentionProblem& p, const KeySet& keys, int32_t g,
                                 int64_t jb, int64_t nb, int64_t j1, QueryBlocks& qb, float* s,
                                 const std::byte** rows) {
    const KvView& kv = p.kv;
    const int32_t group = p.q_heads / kv.kv_heads, nblk = qb.nblk;
    const LaneTables& t = thread_lanes();
    const bool q8 = kv.k_dtype == DType::kQ8_0;
    const int64_t bb = block_bytes(kv.k_dtype);
    __m512i deal[8];  // lane 4 i + h <- dword 8 i + d of [key 0 | key 1 | key 2 | key 3]
    for (int32_t d = 0; d < 8; ++d)
      deal[d] = _mm512_setr_epi32(d, d, d, d, 8 + d, 8 + d, 8 + d, 8 + d, 16 + d, 16 + d, 16 + d,
                                  16 + d, 24 + d, 24 + d, 24 + d, 24 + d);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
      const std::byte* k[4];
      const int valid = gather_tile(kv, keys, g, jb, b0, nb, j1, 4, k, rows);
      for (int32_t c = 0; c < group / 4; ++c) {
        __m512 acc = _mm512_setzero_ps();
        for (int32_t b = 0; b < nblk; ++b) {
          __m256i kb[4];
          for (int i = 0; i < 4; ++i) {
            const std::byte* blk = k[i] + b * bb + 2;
            if (q8) {
              kb[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
            } else {
              const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
              const __m256i xx = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
              kb[i] = _mm256_and_si256(xx, low4);  // [low nibbles | high nibbles]
            }
          }
          __m512i za = _mm512_inserti64x4(_mm512_castsi256_si512(kb[0]), kb[1], 1);
          __m512i zb = _mm512_inserti64x4(_mm512_castsi256_si512(kb[2]), kb[3], 1);
          if (q8) za = _mm512_xor_si512(za, flip), zb = _mm512_xor_si512(zb, flip);
          const int64_t cb = int64_t{c} * nblk + b;
          __m512i isum = _mm512_loadu_si512(t.start.data() + cb * 16);
          const int32_t* qv = t.q.data() + cb * 8 * 16;
          for (int32_t d = 0; d < 8; ++d)
            isum = _mm512_dpbusd_epi32(isum, _mm512_permutex2var_epi32(za, deal[d], zb),
                                       _mm512_loadu_si512(qv + 16 * d));
          const __m512 kd =
              _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(four_scales(k, b * bb)));
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum),
                                _mm512_mul_ps(kd, _mm512_loadu_ps(t.qd.data() + cb * 16)), acc);
        }
        alignas(64) float out[16];
        _mm512_store_ps(out, _mm512_mul_ps(acc, _mm512_set1_ps(p.scale)));
        for (int i = 0; i < valid; ++i)
          for (int h = 0; h < 4; ++h) s[(4 * c + h) * kKeyBlock + b0 + i] = out[4 * i + h];
      }
    }
  }

  // Tiles of 4 keys x every head: each head's codes, lane starts and scales are loaded once
  // per tile, the 4 keys' products accumulate in 4 vectors and fold into 4 sums at once.
  static void logits_block(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t jb,
                           int64_t nb, int64_t j1, QueryBlocks& qb, const float* q, float* s,
                           const std::byte** rows) {
    const KvView& kv = p.kv;
    const int32_t pairs = (qb.nblk + 1) / 2;
    if (!is_block_type(kv.k_dtype) || pairs > kMaxPairs)
      return logits_by_key<Avx512Ops>(p, keys, g, jb, nb, j1, qb, q, s, rows);
    if ((p.q_heads / kv.kv_heads) % 4 == 0)
      return logits_block_lanes(p, keys, g, jb, nb, j1, qb, s, rows);
    const int32_t group = p.q_heads / kv.kv_heads, dk = kv.head_dim;
    const PairTables& t = thread_tables();
    const bool q8 = kv.k_dtype == DType::kQ8_0;
    const int64_t bb = block_bytes(kv.k_dtype);
    const __m128 scale = _mm_set1_ps(p.scale);
    for (int64_t b = 0; b < nb; b += 4) {
      const std::byte* k[4];
      const int valid = gather_tile(kv, keys, g, jb, b, nb, j1, 4, k, rows);
      __m512i ku[4][kMaxPairs];
      __m512 kd[4][kMaxPairs];
      for (int i = 0; i < 4; ++i) load_key(k[i], q8, bb, qb.nblk, pairs, ku[i], kd[i]);
      for (int32_t h = 0; h < group; ++h) {
        const int32_t* start = t.start.data() + int64_t{h} * pairs * 16;
        const float* qd = t.qd.data() + int64_t{h} * pairs * 16;
        const int8_t* qs = t.qs.data() + int64_t{h} * dk;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                         _mm512_setzero_ps()};
        for (int32_t c = 0; c < pairs; ++c) {
          const __m512i qv = _mm512_loadu_si512(qs + 64 * c);
          const __m512i st = _mm512_loadu_si512(start + 16 * c);
          const __m512 qdv = _mm512_loadu_ps(qd + 16 * c);
          for (int i = 0; i < 4; ++i) {
            const __m512i x = _mm512_dpbusd_epi32(st, ku[i][c], qv);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x), _mm512_mul_ps(kd[i][c], qdv), acc[i]);
          }
        }
        alignas(16) float out[4];
        _mm_store_ps(out, _mm_mul_ps(fold4(acc), scale));
        for (int i = 0; i < valid; ++i) s[h * kKeyBlock + b + i] = out[i];
      }
    }
  }

  static void softmax(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
    softmax_block_avx512(s, nb, dv, m, l, acc);
  }

  // Values d0 .. d0 + 32 of a float row as two f32 vectors (masked past n).
  static void widen32(DType dtype, const std::byte* row, int32_t d0, int32_t n, __m512& v0,
                      __m512& v1) {
    __m512* out[2] = {&v0, &v1};
    for (int i = 0; i < 2; ++i) {
      const int32_t d = d0 + 16 * i;
      const __mmask16 m = d < n ? lanes(n - d) : 0;
      if (dtype == DType::kF32) {
        *out[i] = _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + d);
      } else {
        const __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * int64_t{d});
        *out[i] = dtype == DType::kF16
                      ? _mm512_cvtph_ps(h)
                      : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
    }
  }

  template <int kNh>
  static void values_heads(const KvView& kv, const std::byte* const* rows, int64_t nb,
                           const float* w, float* acc) {
    const int32_t dv = kv.value_dim;
    for (int32_t d0 = 0; d0 < dv; d0 += 32) {
      const __mmask16 m0 = lanes(dv - d0), m1 = d0 + 16 < dv ? lanes(dv - d0 - 16) : 0;
      __m512 a[kNh][2];
      for (int i = 0; i < kNh; ++i) {
        a[i][0] = _mm512_maskz_loadu_ps(m0, acc + int64_t{i} * dv + d0);
        a[i][1] = _mm512_maskz_loadu_ps(m1, acc + int64_t{i} * dv + d0 + 16);
      }
      for (int64_t b = 0; b < nb; ++b) {
        __m512 v0, v1;
        widen32(kv.v_dtype, rows[b], d0, dv, v0, v1);
        for (int i = 0; i < kNh; ++i) {
          const __m512 wb = _mm512_set1_ps(w[i * kKeyBlock + b]);
          a[i][0] = _mm512_fmadd_ps(wb, v0, a[i][0]);
          a[i][1] = _mm512_fmadd_ps(wb, v1, a[i][1]);
        }
      }
      for (int i = 0; i < kNh; ++i) {
        _mm512_mask_storeu_ps(acc + int64_t{i} * dv + d0, m0, a[i][0]);
        _mm512_mask_storeu_ps(acc + int64_t{i} * dv + d0 + 16, m1, a[i][1]);
      }
    }
  }

  static void values(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                     const float* w, float* acc) {
    if (is_block_type(kv.v_dtype)) {
      ValueCodes& vc = thread_value_codes();
      value_codes_avx512(kv, rows, nb, group, w, vc);
      return values_int_avx512(kv, rows, nb, group, vc, acc);
    }
    const int32_t dv = kv.value_dim;
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

  static void prepare(const QueryBlocks& qb, const KvView& kv, int32_t group) {
    if (!is_block_type(kv.k_dtype)) return;
    if (group % 4 == 0 && qb.nblk <= 2 * kMaxPairs)
      return prepare_lanes(qb, kv, group, thread_lanes());
    prepare_pairs(qb, kv, group, thread_tables());
  }
};

}  // namespace

void value_codes_avx512(const KvView& kv, const std::byte* const* rows, int64_t nb,
                        int32_t group, const float* w, ValueCodes& vc) {
  vc.size_for(group, kv.value_dim / kBlockValues);
  value_block_scales(kv, rows, nb, vc);
  const bool q8 = kv.v_dtype == DType::kQ8_0;
  for (int32_t h = 0; h < group; ++h)
    for (int32_t c = 0; c < vc.nvb; ++c) {
      __m512 x[kKeyBlock / 16];
      __m512 top = _mm512_setzero_ps();
      for (int v = 0; v < kKeyBlock / 16; ++v) {
        const __mmask16 in = nb > 16 * v ? lanes(static_cast<int32_t>(nb - 16 * v)) : 0;
        x[v] = _mm512_mul_ps(_mm512_maskz_loadu_ps(in, w + h * kKeyBlock + 16 * v),
                             _mm512_maskz_loadu_ps(in, vc.dv.data() + c * kKeyBlock + 16 * v));
        if (q8) x[v] = _mm512_max_ps(x[v], _mm512_setzero_ps());
        top = _mm512_max_ps(top, _mm512_abs_ps(x[v]));
      }
      const float t = _mm512_reduce_max_ps(top);
      const int64_t i = int64_t{h} * vc.nvb + c;
      const __m512 inv = _mm512_set1_ps(weight_code_scale(t, &vc.s[i]));
      __m512i sum = _mm512_setzero_si512();
      for (int v = 0; v < kKeyBlock / 16; ++v) {
        const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(x[v], inv));
        sum = _mm512_add_epi32(sum, q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(vc.codes(h, c) + 16 * v),
                         _mm512_cvtepi32_epi8(q));
      }
      vc.usum[i] = q8 ? 0 : _mm512_reduce_add_epi32(sum);  // only q4_0's offset needs it
    }
}

template <bool kQ8>
void values_int_for(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                    const ValueCodes& vc, float* acc) {
  for (int32_t h = 0; h < group;) {
    const int32_t n = std::min(4, group - h);
    if (n == 4) values_int_heads<4, VnniDot, kQ8>(kv, rows, nb, vc, h, acc);
    else if (n == 3) values_int_heads<3, VnniDot, kQ8>(kv, rows, nb, vc, h, acc);
    else if (n == 2) values_int_heads<2, VnniDot, kQ8>(kv, rows, nb, vc, h, acc);
    else values_int_heads<1, VnniDot, kQ8>(kv, rows, nb, vc, h, acc);
    h += n;
  }
}

void values_int_avx512(const KvView& kv, const std::byte* const* rows, int64_t nb,
                       int32_t group, const ValueCodes& vc, float* acc) {
  if (kv.v_dtype == DType::kQ8_0) values_int_for<true>(kv, rows, nb, group, vc, acc);
  else values_int_for<false>(kv, rows, nb, group, vc, acc);
}

void chunk_quant_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                        int64_t j1, float* m, float* l, float* acc, float* scratch) {
  quant_chunk<Avx512Ops>(p, t, g, j0, j1, m, l, acc, scratch);
}

}  // namespace kvcache::cpu::detail

KVCACHE_SIMD_END()

#else  // not x86: never selected by resolve_isa(); forwards to the portable worker.

namespace kvcache::cpu::detail {
void chunk_quant_avx512(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0,
                        int64_t j1, float* m, float* l, float* acc, float* scratch) {
  chunk_quant_scalar(p, t, g, j0, j1, m, l, acc, scratch);
}
void value_codes_avx512(const KvView& kv, const std::byte* const* rows, int64_t nb,
                        int32_t group, const float* w, ValueCodes& vc) {
  value_codes_reference(kv, rows, nb, group, w, vc);
}
void values_int_avx512(const KvView& kv, const std::byte* const* rows, int64_t nb,
                       int32_t group, const ValueCodes& vc, float* acc) {
  values_int_reference(kv, rows, nb, group, vc, acc);
}
}  // namespace kvcache::cpu::detail
#endif
