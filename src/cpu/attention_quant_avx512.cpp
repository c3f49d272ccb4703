// The AVX-512 VNNI quantized-K/V chunk worker (attention_quant.h), entered only through
// attend()'s run-time dispatch (KernelFamily::kInt8Dot). Key logits: two 32-value blocks per
// 512-bit vector, one vpdpbusd per head against the int8 query; vpdpbusd multiplies unsigned
// by signed bytes, so q8_0 key bytes are offset by 128 (xor 0x80) and q4_0 nibbles are taken
// as stored (0..15), and each lane's accumulator starts at minus its share of offset x the
// query block's code sum, leaving exactly sum(q * k) per block. Values: each block of 32 is
// widened to two f32 vectors and added into up to four heads held in registers.
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

struct Avx512Ops {
  static void logits(const KvView& kv, const std::byte* k, QueryBlocks& qb, const float* q,
                     int32_t group, float scale, float* s) {
    const int32_t pairs = (qb.nblk + 1) / 2;
    if (!is_block_type(kv.k_dtype) || pairs > kMaxPairs)
      return logits_key_scalar(kv, k, qb, q, group, scale, s);
    const PairTables& t = thread_tables();
    const bool q8 = kv.k_dtype == DType::kQ8_0;
    const int64_t bb = block_bytes(kv.k_dtype);
    __m512i ku[kMaxPairs];
    __m512 kd[kMaxPairs];
    for (int32_t c = 0; c < pairs; ++c) {
      const int32_t b = 2 * c;
      const bool two = b + 1 < qb.nblk;
      if (q8) {
        const __m256i hi = two ? q8_unsigned(k, b + 1) : _mm256_setzero_si256();
        ku[c] = _mm512_inserti64x4(_mm512_castsi256_si512(q8_unsigned(k, b)), hi, 1);
      } else {
        ku[c] = q4_pair(k, b, two);
      }
      const float d1 = two ? block_scale(k + (b + 1) * bb) : 0.0f;
      kd[c] = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(block_scale(k + b * bb)),
                                   _mm512_set1_ps(d1));
    }
    const int32_t dk = kv.head_dim;
    for (int32_t h = 0; h < group; ++h) {
      const int32_t* start = t.start.data() + int64_t{h} * pairs * 16;
      const float* qd = t.qd.data() + int64_t{h} * pairs * 16;
      const int8_t* qs = t.qs.data() + int64_t{h} * dk;
      __m512 acc = _mm512_setzero_ps();
      for (int32_t c = 0; c < pairs; ++c) {
        const __m512i qv = _mm512_loadu_si512(qs + 64 * c);
        const __m512i i = _mm512_dpbusd_epi32(_mm512_loadu_si512(start + 16 * c), ku[c], qv);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i),
                              _mm512_mul_ps(kd[c], _mm512_loadu_ps(qd + 16 * c)), acc);
      }
      s[h * kKeyBlock] = _mm512_reduce_add_ps(acc) * scale;
    }
  }

  static void softmax(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc) {
    softmax_block_avx512(s, nb, dv, m, l, acc);
  }

  // Values d0 .. d0 + 32 of a row as two f32 vectors (masked past n for the float types).
  static void widen32(DType dtype, const std::byte* row, int32_t d0, int32_t n, __m512& v0,
                      __m512& v1) {
    if (dtype == DType::kQ8_0) {
      const std::byte* blk = row + int64_t{d0 / kBlockValues} * kQ8_0BlockBytes;
      const __m512 d = _mm512_set1_ps(block_scale(blk));
      const auto* p = reinterpret_cast<const __m128i*>(blk + 2);
      v0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p))));
      v1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p + 1))));
      return;
    }
    if (dtype == DType::kQ4_0) {
      const std::byte* blk = row + int64_t{d0 / kBlockValues} * kQ4_0BlockBytes;
      const __m512 d = _mm512_set1_ps(block_scale(blk));
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
      const __m128i m = _mm_set1_epi8(0x0F);
      const __m512i eight = _mm512_set1_epi32(8);
      const __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(x, m)), eight);
      const __m512i hi =
          _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(x, 4), m)), eight);
      v0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(lo));
      v1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(hi));
      return;
    }
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
    if (is_block_type(kv.k_dtype)) prepare_pairs(qb, kv, group, thread_tables());
  }
};

}  // namespace

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
}  // namespace kvcache::cpu::detail
#endif
