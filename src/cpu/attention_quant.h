// Internal to the cpu kernels: the chunk worker for layers the float workers cannot read (a
// q8_0 / q4_0 key or value type, or K and V of different types), shared by its scalar, AVX2
// and AVX-512 versions. Block keys are dotted in integers against the query quantized per
// block of 32 (int8 codes with a float scale, as the Q8_0 weight products quantize their
// input); block value rows are summed in integers too, against the softmax weights taken to
// 7-bit codes ("Values in integers" below), float value rows are widened and added in f32.
// Nothing wider than one row is ever copied out of the pool. Layer: cpu. Not the reference:
// attend_reference() widens every row (load_row) and attends in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/attention_chunk.h"
#include "cpu/block_quant.h"
#include "cpu/dtype_convert.h"

namespace kvcache::cpu::detail {

// One head group's query, ready for the key type: per head h, block b (of head_dim / 32):
// codes qs[h * head_dim + 32 b + i], scale d[h * nblk + b] (query value ~ d * code) and the
// codes' sum[h * nblk + b] (what a q4_0 key's offset of 8 subtracts). For a float key type
// only the f32 query is used. kf holds one widened key row (float keys), vf one value block.
struct QueryBlocks {
  int32_t nblk = 0;
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int32_t> sum;
  std::vector<float> kf;
};

// Quantizes 32 query values: d = max|x| / 127 (kept in f32, not rounded to f16: only the
// stored rows are GGUF blocks), q = round(x / d), sum = sum of q. All zero when max|x| = 0.
inline void quantize_query_block(const float* x, int8_t* q, float* d, int32_t* sum) {
  float amax = 0.0f;
  for (int i = 0; i < kBlockValues; ++i) amax = std::max(amax, std::fabs(x[i]));
  *d = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int32_t s = 0;
  for (int i = 0; i < kBlockValues; ++i) {
    q[i] = static_cast<int8_t>(std::clamp(static_cast<int>(std::lround(x[i] * inv)), -127, 127));
    s += q[i];
  }
  *sum = s;
}

// Fills qb for the `group` query heads at q (rows of head_dim) when K is a block type.
inline void prepare_query(QueryBlocks& qb, const KvView& kv, const float* q, int32_t group) {
  const int32_t dk = kv.head_dim;
  if (!is_block_type(kv.k_dtype)) {
    qb.kf.resize(static_cast<size_t>(dk));
    return;
  }
  qb.nblk = dk / kBlockValues;
  qb.qs.resize(static_cast<size_t>(group) * dk);
  qb.d.resize(static_cast<size_t>(group) * qb.nblk);
  qb.sum.resize(static_cast<size_t>(group) * qb.nblk);
  for (int32_t h = 0; h < group; ++h)
    for (int32_t b = 0; b < qb.nblk; ++b) {
      const int64_t i = int64_t{h} * qb.nblk + b;
      quantize_query_block(q + int64_t{h} * dk + b * kBlockValues,
                           qb.qs.data() + int64_t{h} * dk + b * kBlockValues, &qb.d[i],
                           &qb.sum[i]);
    }
}

inline QueryBlocks& thread_query_blocks() {
  thread_local QueryBlocks qb;
  return qb;
}

// The f16 scale that opens every block.
inline float block_scale(const std::byte* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return f16_to_f32(h);
}

// Scalar pieces every version falls back on. s[h * kKeyBlock] receives head h's logit of the
// key row k (before soft-cap): scale * q_h . k.
inline void logits_key_scalar(const KvView& kv, const std::byte* k, QueryBlocks& qb,
                              const float* q, int32_t group, float scale, float* s) {
  const int32_t dk = kv.head_dim;
  if (!is_block_type(kv.k_dtype)) {
    std::vector<float>& kf = qb.kf;
    load_row(kv.k_dtype, k, kf.data(), dk);
    for (int32_t h = 0; h < group; ++h) {
      float dot = 0.0f;
      for (int32_t d = 0; d < dk; ++d) dot += q[int64_t{h} * dk + d] * kf[d];
      s[h * kKeyBlock] = dot * scale;
    }
    return;
  }
  const bool q8 = kv.k_dtype == DType::kQ8_0;
  const int64_t bb = block_bytes(kv.k_dtype);
  for (int32_t h = 0; h < group; ++h) {
    float dot = 0.0f;
    for (int32_t b = 0; b < qb.nblk; ++b) {
      const auto* blk = reinterpret_cast<const uint8_t*>(k + b * bb);
      const int8_t* qs = qb.qs.data() + int64_t{h} * dk + b * kBlockValues;
      int32_t isum = 0;
      if (q8) {
        for (int i = 0; i < kBlockValues; ++i) isum += qs[i] * static_cast<int8_t>(blk[2 + i]);
      } else {
        for (int i = 0; i < 16; ++i)
          isum += qs[i] * (blk[2 + i] & 0x0F) + qs[i + 16] * (blk[2 + i] >> 4);
        isum -= 8 * qb.sum[int64_t{h} * qb.nblk + b];
      }
      dot += qb.d[int64_t{h} * qb.nblk + b] * block_scale(k + b * bb) * static_cast<float>(isum);
    }
    s[h * kKeyBlock] = dot * scale;
  }
}

// ---- Values in integers (a block-type V) ----
// A block of keys' value sum acc[h][i] += sum_b w[h][b] v_b[i], with v_b = d_{b,c} x code_b
// in value block c, is done as an integer dot product over the keys: per head h and value
// block c, x_b = w[h][b] * d_{b,c} is taken to a code u_b = round(x_b / s) in -127..127 with
// one scale s = max_b |x_b| / 127, and
//   acc[h][32 c + i] += s * sum_b u_b * code_b[i]     (q4_0: code - 8)
// in exact int32 sums (at most 64 x 127 x 128 a lane). The byte products multiply unsigned
// by signed bytes: a q8_0 scale is never negative (the block rule: max|x| / 127), so its x
// and u are too (a negative scale, which no writer makes, counts as zero) and u is the
// unsigned operand; a q4_0 scale takes the sign of the block's largest value, so u is the
// signed operand and the nibbles (0..15) the unsigned one, the offset of 8 coming off as 8 x
// sum u. 127, not 255: AVX2's vpmaddubsw adds two products in int16, which 127 x 128 x 2
// keeps below saturation. Every instruction set uses the same codes, so the workers differ
// only in float rounding and in where their key blocks start. The weights' rounding (half a
// code of the block's largest |x|) is the order of the value codes' own.
inline constexpr int32_t kWeightCodeMax = 127;

// One key block's codes: dv[c * kKeyBlock + b] row b's scale of value block c; u[(h * nvb +
// c) * kKeyBlock + b] (zero from nb on); s and, for q4_0, usum (the sum of u) per (h, c).
struct ValueCodes {
  int32_t nvb = 0;
  std::vector<float> dv;
  std::vector<int8_t> u;
  std::vector<float> s;
  std::vector<int32_t> usum;

  void size_for(int32_t group, int32_t value_blocks) {
    nvb = value_blocks;
    dv.resize(static_cast<size_t>(nvb) * kKeyBlock);
    u.resize(static_cast<size_t>(group) * nvb * kKeyBlock);
    s.resize(static_cast<size_t>(group) * nvb);
    usum.resize(static_cast<size_t>(group) * nvb);
  }
  int8_t* codes(int32_t h, int32_t c) { return u.data() + (int64_t{h} * nvb + c) * kKeyBlock; }
  const int8_t* codes(int32_t h, int32_t c) const {
    return u.data() + (int64_t{h} * nvb + c) * kKeyBlock;
  }
};

// The scale of one (head, value block)'s codes from the largest |x| among its keys: stores s =
// top / 127 and returns what x is multiplied by before rounding, 127 / top. No weight (top 0)
// or a hostile scale (top not finite) gives s = 0 and codes of 0. Every version calls this.
inline float weight_code_scale(float top, float* s) {
  if (!(top > 0.0f && std::isfinite(top))) top = 0.0f;
  *s = top / static_cast<float>(kWeightCodeMax);
  return top > 0.0f ? static_cast<float>(kWeightCodeMax) / top : 0.0f;
}

inline ValueCodes& thread_value_codes() {
  thread_local ValueCodes vc;
  return vc;
}

// The rule in plain loops (the SIMD versions' reference, and the scalar worker's code): the
// rows' block scales, then each (h, c)'s codes from the weights w[h * kKeyBlock + b].
inline void value_codes_reference(const KvView& kv, const std::byte* const* rows, int64_t nb,
                                  int32_t group, const float* w, ValueCodes& vc) {
  const int64_t bb = block_bytes(kv.v_dtype);
  const bool q8 = kv.v_dtype == DType::kQ8_0;
  vc.size_for(group, kv.value_dim / kBlockValues);
  for (int32_t c = 0; c < vc.nvb; ++c)
    for (int64_t b = 0; b < nb; ++b) vc.dv[c * kKeyBlock + b] = block_scale(rows[b] + c * bb);
  for (int32_t h = 0; h < group; ++h)
    for (int32_t c = 0; c < vc.nvb; ++c) {
      float x[kKeyBlock] = {}, top = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        x[b] = w[h * kKeyBlock + b] * vc.dv[c * kKeyBlock + b];
        if (q8) x[b] = std::max(x[b], 0.0f);
        top = std::max(top, std::fabs(x[b]));
      }
      const int64_t i = int64_t{h} * vc.nvb + c;
      const float inv = weight_code_scale(top, &vc.s[i]);
      vc.usum[i] = 0;
      int8_t* u = vc.codes(h, c);
      for (int64_t b = 0; b < kKeyBlock; ++b) {
        u[b] = static_cast<int8_t>(std::nearbyint(x[b] * inv));
        if (!q8) vc.usum[i] += u[b];  // only q4_0's offset needs it
      }
    }
}

// acc[h * value_dim + 32 c + i] += s * (integer sum), the sums taken key by key.
inline void values_int_reference(const KvView& kv, const std::byte* const* rows, int64_t nb,
                                 int32_t group, const ValueCodes& vc, float* acc) {
  const bool q8 = kv.v_dtype == DType::kQ8_0;
  const int64_t bb = block_bytes(kv.v_dtype);
  for (int32_t h = 0; h < group; ++h)
    for (int32_t c = 0; c < vc.nvb; ++c) {
      int32_t sum[kBlockValues] = {};
      const int8_t* u = vc.codes(h, c);
      for (int64_t b = 0; b < nb; ++b) {
        const auto* blk = reinterpret_cast<const uint8_t*>(rows[b] + c * bb) + 2;
        for (int i = 0; i < kBlockValues; ++i) {
          const int32_t code = q8 ? static_cast<int8_t>(blk[i])
                                  : ((i < 16 ? blk[i] : blk[i - 16] >> 4) & 0x0F) - 8;
          sum[i] += u[b] * code;
        }
      }
      const float s = vc.s[int64_t{h} * vc.nvb + c];
      float* a = acc + int64_t{h} * kv.value_dim + c * kBlockValues;
      for (int i = 0; i < kBlockValues; ++i) a[i] = std::fma(s, static_cast<float>(sum[i]), a[i]);
    }
}

// The SIMD versions (the AVX-512 one needs VNNI), for the differential tests: vc must hold
// value_codes_reference's codes for the same rows and weights; acc receives the same sums.
void value_codes_avx2(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                      const float* w, ValueCodes& vc);
void values_int_avx2(const KvView& kv, const std::byte* const* rows, int64_t nb, int32_t group,
                     const ValueCodes& vc, float* acc);
void value_codes_avx512(const KvView& kv, const std::byte* const* rows, int64_t nb,
                        int32_t group, const float* w, ValueCodes& vc);
void values_int_avx512(const KvView& kv, const std::byte* const* rows, int64_t nb,
                       int32_t group, const ValueCodes& vc, float* acc);

// The float workers' softmax step (a block's logits of one head into weights, rescaling its
// m, l, acc), shared with the quantized workers of the same instruction set.
void softmax_block_avx2(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc);
void softmax_block_avx512(float* s, int64_t nb, int32_t dv, float& m, float& l, float* acc);

// Asks for key j's K and V rows a line at a time (the last byte too: a block row need not
// start on a line), into L1 (near) or L2 (far).
template <int kLocality>
inline void prefetch_key(const KvView& kv, const KeySet& keys, int32_t g, int64_t j) {
  const int64_t row = keys.row(j);
  const auto* kp = reinterpret_cast<const char*>(kv.k_row(g, row));
  const auto* vp = reinterpret_cast<const char*>(kv.v_row(g, row));
  for (int64_t o = 0; o < kv.k_bytes; o += 64) __builtin_prefetch(kp + o, 0, kLocality);
  __builtin_prefetch(kp + kv.k_bytes - 1, 0, kLocality);
  for (int64_t o = 0; o < kv.v_bytes; o += 64) __builtin_prefetch(vp + o, 0, kLocality);
  __builtin_prefetch(vp + kv.v_bytes - 1, 0, kLocality);
}
// Shared by the SIMD tiles. q8_0 rows of 128 values are 136 bytes: 128 keys ahead into L2 and 16 into L1 measured
// 1.5x the calls per second of 32 ahead into L1 at 16K keys (32/8 heads of 128, 1 thread;
// noisy shared machine: 282 vs 182 calls/s), 64K keys 1.6x.
constexpr int64_t kFarKeys = 128, kNearKeys = 16;

// A tile of n keys from jb + b0 (the last ones repeat the final valid key past nb): k[i]
// their key rows, rows[b0 + i] the valid keys' value rows, and the K/V rows kFarKeys (into L2)
// and kNearKeys (into L1) further on asked for. Returns how many keys are valid.
inline int gather_tile(const KvView& kv, const KeySet& keys, int32_t g, int64_t jb, int64_t b0,
                       int64_t nb, int64_t j1, int n, const std::byte** k,
                       const std::byte** rows) {
  const int valid = static_cast<int>(std::min<int64_t>(n, nb - b0));
  for (int i = 0; i < n; ++i) {
    const int64_t j = jb + b0 + std::min(i, valid - 1);
    const int64_t row = keys.row(j);
    k[i] = kv.k_row(g, row);
    if (i < valid) {
      rows[b0 + i] = kv.v_row(g, row);
      if (j + kFarKeys < j1) prefetch_key<2>(kv, keys, g, j + kFarKeys);
      if (j + kNearKeys < j1) prefetch_key<3>(kv, keys, g, j + kNearKeys);
    }
  }
  return valid;
}

// Keys [jb, jb + nb) of `keys` one at a time through Ops::logits(kv, k_row, qb, q, group, scale,
// s + b) (s[h * kKeyBlock + b] for h < group), asking for the rows kPrefetchKeys further on
// (before j1) a line at a time; rows[b] receives each key's value row.
template <class Ops>
void logits_by_key(const AttentionProblem& p, const KeySet& keys, int32_t g, int64_t jb,
                   int64_t nb, int64_t j1, QueryBlocks& qb, const float* q, float* s,
                   const std::byte** rows) {
  const KvView& kv = p.kv;
  const int32_t group = p.q_heads / kv.kv_heads;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t row = keys.row(jb + b);
    if (jb + b + kPrefetchKeys < j1) {
      const int64_t ahead = keys.row(jb + b + kPrefetchKeys);
      const auto* kp = reinterpret_cast<const char*>(kv.k_row(g, ahead));
      const auto* vp = reinterpret_cast<const char*>(kv.v_row(g, ahead));
      for (int64_t o = 0; o < kv.k_bytes; o += 64) __builtin_prefetch(kp + o, 0, 3);
      for (int64_t o = 0; o < kv.v_bytes; o += 64) __builtin_prefetch(vp + o, 0, 3);
    }
    Ops::logits(kv, kv.k_row(g, row), qb, q, group, p.scale, s + b);
    rows[b] = kv.v_row(g, row);
  }
}

// The blocked online softmax over keys [j0, j1) of token t for kv head g with Ops:
//   Ops::prepare(qb, kv, group)                     -> once per call, after prepare_query
//   Ops::logits_block(p, keys, g, jb, nb, j1, qb, q, s, rows)
//                                    -> a block's logits (logits_by_key's contract)
//   Ops::softmax(s, nb, dv, m, l, acc)              -> one head's block into weights
//   Ops::values(kv, rows, nb, group, w, acc)        -> acc[h * dv] += sum_b w[h][b] v_b
template <class Ops>
void quant_chunk(const AttentionProblem& p, int32_t t, int32_t g, int64_t j0, int64_t j1,
                 float* m, float* l, float* acc, float* s) {
  const KvView& kv = p.kv;
  const int32_t group = p.q_heads / kv.kv_heads, dv = kv.value_dim, dk = kv.head_dim;
  const KeySet& keys = p.keys[t];
  const float* q = p.q + (int64_t{t} * p.q_heads + int64_t{g} * group) * dk;
  QueryBlocks& qb = thread_query_blocks();
  prepare_query(qb, kv, q, group);
  Ops::prepare(qb, kv, group);
  for (int32_t h = 0; h < group; ++h) m[h] = -INFINITY, l[h] = 0.0f;
  std::memset(acc, 0, sizeof(float) * static_cast<size_t>(group) * dv);
  const std::byte* rows[kKeyBlock];
  for (int64_t jb = j0; jb < j1; jb += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, j1 - jb);
    Ops::logits_block(p, keys, g, jb, nb, j1, qb, q, s, rows);
    if (p.softcap > 0.0f) apply_softcap(s, group, nb, p.softcap);
    for (int32_t h = 0; h < group; ++h)
      Ops::softmax(s + h * kKeyBlock, nb, dv, m[h], l[h], acc + int64_t{h} * dv);
    Ops::values(kv, rows, nb, group, s, acc);
  }
}

}  // namespace kvcache::cpu::detail
