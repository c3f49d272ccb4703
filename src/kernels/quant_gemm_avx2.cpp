// The AVX2 kernel of the integer GEMM (quant_gemm.h), every block type: weight rows are taken
// in integer form (IntBlock) and packed 8 to a vector, four columns to a 32-bit lane, as the
// AVX-512 Q8_0 kernel packs 16: one step multiplies four columns of 8 rows by four broadcast
// activation bytes, and eight steps finish a sub-block's int32 dot for 8 rows, so the f32
// scaling is paid once per sub-block (or half, Q6_K) and 8 rows. Layer: kernels. AVX2 has no
// vpdpbusd: a step is vpsignb (the activation takes the weight's sign), vpmaddubsw (|w| times
// that, pairs summed to int16) and vpmaddwd with ones (pairs to int32). Codes of at most 5 bits
// let 4 or 8 steps add in int16 before one vpmaddwd, and the types with an offset have no
// negative codes and skip vpsignb: Q4_K products 1.4x, Q6_K 1.2x, Q4_K_M prefill 1.15x
// (kvcache_quant_bench / kvcache_file_bench on Zen 4, AVX2 and AVX-512 alike). Q4_0, Q5_0 and
// MXFP4 codes are signed but small: they are stored plus a bias (avx2_code_bias), which skips
// vpsignb too, and bias x the activation's block sum comes off the int32 dot. With panels
// packed in registers (not value by value) that took the gpt-oss-shaped file's AVX2 prefill
// from 248 to ~390 tok/s. Entered only through q8_gemm's dispatch (AVX2+FMA+F16C checked).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "cpu/simd_target.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "program/gguf_quant.h"

#if defined(__x86_64__)
#include <immintrin.h>

KVCACHE_SIMD_BEGIN("avx2,fma,f16c")

namespace kvcache::kernels {
namespace {

using detail::Q8GemmActs;

using detail::IntGemmForm;

#include "kernels/int_panel_simd.inc"

constexpr int kLanes = 8;   // weight rows per vector
constexpr int kTokens = 6;  // activation rows per micro-tile: 6 int32 sums + 6 = 12 ymm

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
// Bits [shift, shift + width) of every byte (width 1 or 2), moved to bit 4.
inline __m256i high_bits(__m256i v, int shift, int width) {
  const __m256i mask = _mm256_set1_epi8(static_cast<char>((1 << width) - 1));
  const __m256i shifted = _mm256_srl_epi16(v, _mm_cvtsi32_si128(shift));
  return _mm256_slli_epi16(_mm256_and_si256(shifted, mask), 4);
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// Where one row's decoded K block goes: sub-block sb's 32 codes at w + sb * kStride, its
// scales and offset at s0 / s1 / c [sb * kLanes] (a panel's layout: 8 rows a sub-block).
struct KOut {
  static constexpr int kStride = kLanes * 32;
  int8_t* w;
  float *s0, *s1, *c;
};

// A Q4_K / Q5_K block's 8 sub-blocks, bitwise as int_blocks decodes them: sub-blocks 2j and
// 2j + 1 are the low and high nibbles of the same 32 bytes (Q5_K: plus bit 2j or 2j + 1 of
// qh as bit 4); scale d x the 6-bit scale, offset -dmin x the 6-bit min.
void k_block(const uint8_t* b, bool five, const KOut& o) {
  const float d = f16_to_f32(load_u16(b)), dmin = f16_to_f32(load_u16(b + 2));
  const __m256i qh = load32(b + 16);
  for (int j = 0; j < 4; ++j) {
    const __m256i q = load32(b + (five ? 48 : 16) + 32 * j);
    __m256i lo = low_nibbles(q), hi = low_nibbles(_mm256_srli_epi16(q, 4));
    if (five) {
      lo = _mm256_or_si256(lo, high_bits(qh, 2 * j, 1));
      hi = _mm256_or_si256(hi, high_bits(qh, 2 * j + 1, 1));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.w + 2 * j * KOut::kStride), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.w + (2 * j + 1) * KOut::kStride), hi);
  }
  uint64_t sc, mn;
  gguf::unpack_k_scales8(b + 4, sc, mn);
  for (int sb = 0; sb < 8; ++sb) {
    o.s0[sb * kLanes] = o.s1[sb * kLanes] = d * static_cast<float>((sc >> (8 * sb)) & 0xFF);
    o.c[sb * kLanes] = -dmin * static_cast<float>((mn >> (8 * sb)) & 0xFF);
  }
}

// A Q6_K block's 8 sub-blocks, bitwise as int_blocks decodes them: sub-block 4h + g takes
// nibble g / 2 of ql's 32 bytes at 64 h + 32 (g % 2), bits 2g, 2g + 1 of qh's at 128 + 32 h as
// bits 4-5, less 32; two int8 scales a sub-block (one per 16 values), no offset.
void q6_block(const uint8_t* b, const KOut& o) {
  const float d = f16_to_f32(load_u16(b + 208));
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  for (int h = 0; h < 2; ++h) {
    const __m256i qh = load32(b + 128 + 32 * h);
    for (int g = 0; g < 4; ++g) {
      const __m256i ql = load32(b + 64 * h + 32 * (g % 2));
      const __m256i lo = g < 2 ? low_nibbles(ql) : low_nibbles(_mm256_srli_epi16(ql, 4));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(o.w + (4 * h + g) * KOut::kStride),
          _mm256_sub_epi8(_mm256_or_si256(lo, high_bits(qh, 2 * g, 2)), _mm256_set1_epi8(32)));
    }
  }
  for (int sb = 0; sb < 8; ++sb) {
    o.c[sb * kLanes] = 0.0f;
    o.s0[sb * kLanes] = d * sc[2 * sb];
    o.s1[sb * kLanes] = d * sc[2 * sb + 1];
  }
}

// Sub-block b (32 values) of one weight row in integer form, into w[32] and its scales,
// bitwise int_block's: Q8_0, Q4_0 and MXFP4 (one sub-block per block) decoded with vector
// steps, Q4_1, Q5_0 and Q5_1 through int_blocks (a block kept until the row's next). The K
// types are decoded a whole block at a time by k_block / q6_block (Panel::pack_k_rows).
class RowDecoder {
 public:
  void start(gguf::TensorType type) { type_ = type; }

  // Sub-block sb of the block at blk.
  void sub_block(const uint8_t* blk, int sb, int8_t* w, float& s0, float& s1, float& c) {
    switch (type_) {
      case gguf::TensorType::kQ8_0:
        std::memcpy(w, blk + 2, 32);
        s0 = s1 = f16_to_f32(load_u16(blk));
        c = 0.0f;
        return;
      case gguf::TensorType::kQ4_0:
        store32(w, panel_nibbles(blk + 2, _mm256_set1_epi8(8), nullptr));
        s0 = s1 = f16_to_f32(load_u16(blk));
        c = 0.0f;
        return;
      case gguf::TensorType::kMXFP4:
        store32(w, panel_nibbles(blk + 1, _mm256_setzero_si256(), gguf::kMxfp4Doubled));
        s0 = s1 = gguf::mxfp4_half_scale(blk[0]);
        c = 0.0f;
        return;
      default: {  // Q4_1, Q5_0, Q5_1 (the K types go through pack_k_rows)
        if (sb == 0) detail::int_blocks(type_, blk, ibs_);
        const detail::IntBlock& ib = ibs_[sb];
        std::memcpy(w, ib.w, 32);
        s0 = ib.s[0];
        s1 = ib.s[1];
        c = ib.c;
      }
    }
  }

 private:
  static void store32(int8_t* w, __m256i v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w), v);
  }
  gguf::TensorType type_ = gguf::TensorType::kQ8_0;
  detail::IntBlock ibs_[8];
};

// Rows r0 .. r0 + 8 (fewer at the end: zero rows) of a block-type weight in integer form
// (IntBlock), per sub-block b of 32 columns: q[b][k][i] = the 4 int8 of columns 32 b + 4 k
// .. + 3 of row r0 + i (as one int32), u[b][k][i] their magnitudes (|-128| = 128 as an
// unsigned byte) — or, for a type whose codes are never negative (the offset types) or have
// a code bias (avx2_code_bias), the codes plus the bias and no q — and s0/s1/c[b][i] the
// IntBlock's scales and offset. A sub-block's 8 rows are decoded side by side and transposed in
// registers (packing was 35 % of an MXFP4 expert product when it went value by value). The
// smallest code and largest magnitude stay in registers while packing: kept in the (thread-
// local) panel, every sub-block's update went through memory, and a Qwen3-30B-A3B-shaped
// Q4_K_M prefill (~32 tokens an expert, AVX2) ran 0.91-0.95x llama.cpp; now 1.02x.
struct Panel {
  std::vector<int32_t> q, u;
  std::vector<float> s0, s1, c;
  void pack(const Weight& w, int64_t r0, int64_t n, int64_t blocks) {
    bias = detail::avx2_code_bias(w.type);
    // Codes that are never negative (the offset types') or made so by the bias: u = w + bias
    // and no q.
    const bool no_sign = bias != 0 || detail::int_gemm_form(w.type).offset;
    q.resize(no_sign ? 0 : static_cast<size_t>(blocks * 8 * kLanes));
    u.resize(static_cast<size_t>(blocks * 8 * kLanes));
    for (std::vector<float>* v : {&s0, &s1, &c})
      v->assign(static_cast<size_t>(blocks * kLanes), 0.0f);
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    if (no_sign) pack_rows<true>(w, r0, n, blocks, lo, hi);
    else pack_rows<false>(w, r0, n, blocks, lo, hi);
    alignas(32) uint8_t lo_b[32], hi_b[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lo_b), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(hi_b), hi);
    signed_codes = false;
    int largest = 0;
    for (int i = 0; i < 32; ++i) {
      signed_codes |= static_cast<int8_t>(lo_b[i]) < 0;
      largest = std::max<int>(largest, hi_b[i]);
    }
    // Steps whose int16 pair sums (each at most 2 * largest * 127) add up below 32768.
    group = 1;
    while (group < 8 && 2 * group * 2 * largest * 127 <= 32767) group *= 2;
  }
  bool signed_codes = true;  // some code is negative: the activation takes the weight's sign
  int group = 1;             // k steps summed in int16 before one widening to int32
  int bias = 0;              // u holds w + bias (avx2_code_bias); the dot takes it back off

 private:
  // Sub-block b of the 8 rows (codes[i]: row i's 32 codes) transposed into q / u; lo / hi
  // gather the smallest code and the largest magnitude per byte.
  template <bool kNoSign>
  void put(int64_t b, int8_t (*codes)[32], __m256i& lo, __m256i& hi) {
    __m256i v[kLanes];
    for (int i = 0; i < kLanes; ++i)
      v[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes[i]));
    panel_transpose8(v);
    for (int k = 0; k < 8; ++k) {
      const size_t o = static_cast<size_t>((b * 8 + k) * kLanes);
      if (kNoSign) {
        const __m256i biased = _mm256_add_epi8(v[k], _mm256_set1_epi8(static_cast<char>(bias)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(&u[o]), biased);
        hi = _mm256_max_epu8(hi, biased);
        continue;
      }
      const __m256i mag = _mm256_abs_epi8(v[k]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&q[o]), v[k]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(&u[o]), mag);
      lo = _mm256_min_epi8(lo, v[k]);
      hi = _mm256_max_epu8(hi, mag);
    }
  }
  // The K types a whole block of each row at a time, the others a sub-block at a time; lo / hi
  // as in put (each loop keeps them in locals: see the comment above Panel).
  template <bool kNoSign>
  void pack_rows(const Weight& w, int64_t r0, int64_t n, int64_t blocks, __m256i& lo,
                 __m256i& hi) {
    if (w.type == gguf::TensorType::kQ4_K || w.type == gguf::TensorType::kQ5_K ||
        w.type == gguf::TensorType::kQ6_K)
      pack_k_rows<kNoSign>(w, r0, n, blocks, lo, hi);
    else
      pack_sub_blocks<kNoSign>(w, r0, n, blocks, lo, hi);
  }

  // One sub-block of each row at a time through its RowDecoder.
  template <bool kNoSign>
  void pack_sub_blocks(const Weight& w, int64_t r0, int64_t n, int64_t blocks, __m256i& lo_out,
                       __m256i& hi_out) {
    const uint8_t* row[kLanes];
    for (int64_t i = 0; i < n; ++i) {
      rows_[i].start(w.type);
      row[i] = w.row_data(r0 + i);
    }
    alignas(32) int8_t codes[kLanes][32] = {};
    const gguf::BlockGeometry g = *gguf::block_geometry(w.type);
    const int per_block = static_cast<int>(g.elements / 32);
    int64_t offset = 0;  // of sub-block b's block in a row
    __m256i lo = lo_out, hi = hi_out;
    for (int64_t b = 0, sb = 0; b < blocks; ++b) {
      const int64_t at = b * kLanes;
      for (int64_t i = 0; i < n; ++i)
        rows_[i].sub_block(row[i] + offset, static_cast<int>(sb), codes[i], s0[at + i],
                           s1[at + i], c[at + i]);
      if (++sb == per_block) {
        sb = 0;
        offset += g.bytes;
      }
      put<kNoSign>(b, codes, lo, hi);
    }
    lo_out = lo, hi_out = hi;
  }

  // The K types a whole block (8 sub-blocks) of each row at a time, decoded in place into the
  // 8 sub-blocks' code tiles and the panel's scales, then the 8 tiles transposed. (Going
  // through RowDecoder a sub-block at a time, the per-call dispatch and the scales unpacked
  // one at a time cost about as much as the transposes.)
  template <bool kNoSign>
  void pack_k_rows(const Weight& w, int64_t r0, int64_t n, int64_t blocks, __m256i& lo_out,
                   __m256i& hi_out) {
    alignas(32) int8_t codes[8][kLanes][32] = {};
    const int64_t block_bytes = gguf::block_geometry(w.type)->bytes;
    __m256i lo = lo_out, hi = hi_out;
    for (int64_t kb = 0; kb < blocks / 8; ++kb) {
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* blk = w.row_data(r0 + i) + kb * block_bytes;
        const int64_t at = kb * 8 * kLanes + i;
        const KOut out{&codes[0][i][0], &s0[at], &s1[at], &c[at]};
        if (w.type == gguf::TensorType::kQ6_K) q6_block(blk, out);
        else k_block(blk, w.type == gguf::TensorType::kQ5_K, out);
      }
      for (int sb = 0; sb < 8; ++sb) put<kNoSign>(kb * 8 + sb, codes[sb], lo, hi);
    }
    lo_out = lo, hi_out = hi;
  }

  RowDecoder rows_[kLanes];  // each row's decoder (Q4_1, Q5_0, Q5_1: a block stays decoded)
};

// dot[t] = the int32 dots of columns 32 b + 4 k0 .. 32 b + 4 k1 for the panel's 8 rows and
// token t. Exact: vpmaddubsw multiplies |w| (0..128, unsigned) by sign(w) * x (|x| <= 127:
// quantize_activations rounds x / (amax / 127), which never reaches 128), so each int16 pair
// sum is at most 2 * 128 * 127 = 32512 < 32767 and never saturates; kGroup such sums are added
// in int16 (the panel's `group` keeps them below 32768) before vpmaddwd with ones widens them
// to int32 exactly. Without negative codes (kSigned false: the types with an offset, and the
// biased codes w + bias) w = |w| and the sign step is skipped.
template <int kT, bool kSigned, int kGroup>
[[gnu::always_inline]] inline void block_dots(const Panel& panel, const uint8_t* const* xq,
                                              int64_t b, int k0, int k1, __m256i* dot) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int t = 0; t < kT; ++t) dot[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
  for (int g = k0; g < k1; g += kGroup)
    for (int t = 0; t < kT; ++t) {  // the group's weights are re-read from L1 per token
      __m256i s16 = _mm256_setzero_si256();
      for (int k = g; k < g + kGroup; ++k) {
        const size_t at = static_cast<size_t>((b * 8 + k) * kLanes);
        const auto* wp = reinterpret_cast<const __m256i*>(panel.u.data() + at);
        const __m256i wu = _mm256_loadu_si256(wp);
        int32_t bytes;
        std::memcpy(&bytes, xq[t] + 32 * b + 4 * k, 4);
        __m256i xs = _mm256_set1_epi32(bytes);
        if (kSigned)
          xs = _mm256_sign_epi8(
              xs, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel.q.data() + at)));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wu, xs));
      }
      dot[t] = _mm256_add_epi32(dot[t], _mm256_madd_epi16(s16, ones));
    }
}

// acc[t] = fma(float(dot[t]), s * d_x[t], acc[t]), s per lane.
template <int kT>
void scale_into(const __m256i* dot, const float* s, const float* const* dx, int64_t b,
                __m256* acc) {
  const __m256 sv = _mm256_loadu_ps(s);
  for (int t = 0; t < kT; ++t)
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]),
                             _mm256_mul_ps(sv, _mm256_set1_ps(dx[t][b])), acc[t]);
}

// A kernel's form: the sub-block scaling (q8_gemm's split halves, an offset term), whether codes
// are signed, the int16 group, and whether u holds codes plus a bias (Panel::bias).
template <bool kSplitF, bool kOffsetF, bool kSignedF, int kGroupF, bool kBiasF = false>
struct Form {
  static constexpr bool kSplit = kSplitF, kOffset = kOffsetF, kSigned = kSignedF;
  static constexpr int kGroup = kGroupF;
  static constexpr bool kBias = kBiasF;
};

// Activation rows j .. j + kT against a packed panel of n rows: y[(j + t) * y_stride + i],
// i < n, in q8_gemm's order per sub-block (whole dot or halves, then the offset term).
// (One row vector by 6 tokens measured ~1.3x two vectors by 4 on Zen 4 for Q8_0: GCC keeps
// fewer values in registers.)
template <int kT, class F>  // out of line: inlined into gemm_rows, Q4_K ran ~8 % slower
[[gnu::noinline]] void micro_tile(const Panel& panel, int64_t n, const Q8GemmActs& a, int64_t j,
                                  float* y, int64_t y_stride, bool accumulate) {
  __m256 acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* xq[kT];
  const float* dx[kT];
  for (int t = 0; t < kT; ++t) {
    xq[t] = a.xu.data() + (j + t) * a.cols;
    dx[t] = a.d.data() + (j + t) * a.blocks;
  }
  for (int64_t b = 0; b < a.blocks; ++b) {
    __m256i dot[kT];
    if (F::kSplit) {
      block_dots<kT, F::kSigned, F::kGroup>(panel, xq, b, 0, 4, dot);
      scale_into<kT>(dot, panel.s0.data() + b * kLanes, dx, b, acc);
      block_dots<kT, F::kSigned, F::kGroup>(panel, xq, b, 4, 8, dot);
      scale_into<kT>(dot, panel.s1.data() + b * kLanes, dx, b, acc);
    } else {
      block_dots<kT, F::kSigned, F::kGroup>(panel, xq, b, 0, 8, dot);
      if (F::kBias)  // the dot of w + bias, less bias x the block's sum of q: the dot of w
        for (int t = 0; t < kT; ++t)
          dot[t] = _mm256_sub_epi32(
              dot[t], _mm256_set1_epi32(panel.bias * a.sum[(j + t) * a.blocks + b]));
      scale_into<kT>(dot, panel.s0.data() + b * kLanes, dx, b, acc);
    }
    if (F::kOffset) {
      for (int t = 0; t < kT; ++t) dot[t] = _mm256_set1_epi32(a.sum[(j + t) * a.blocks + b]);
      scale_into<kT>(dot, panel.c.data() + b * kLanes, dx, b, acc);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  for (int t = 0; t < kT; ++t) {
    float* out = y + (j + t) * y_stride;
    __m256 v = acc[t];
    if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(out, mask), v);
    _mm256_maskstore_ps(out, mask, v);
  }
}

// The last a.t - j (at most kT) activation rows from j, as one micro-tile.
template <int kT, class F>
void tail_tile(const Panel& panel, int64_t n, const Q8GemmActs& a, int64_t j, float* yr,
               int64_t stride, bool accumulate) {
  if constexpr (kT > 0) {
    if (a.t - j == kT) return micro_tile<kT, F>(panel, n, a, j, yr, stride, accumulate);
    tail_tile<kT - 1, F>(panel, n, a, j, yr, stride, accumulate);
  }
}

// Every activation row against one packed panel, 6 tokens a micro-tile, then the tail.
template <class F>
void panel_tokens(const Panel& panel, int64_t n, const Q8GemmActs& a, float* yr, int64_t stride,
                  bool accumulate) {
  int64_t j = 0;
  for (; j + kTokens <= a.t; j += kTokens)
    micro_tile<kTokens, F>(panel, n, a, j, yr, stride, accumulate);
  tail_tile<kTokens - 1, F>(panel, n, a, j, yr, stride, accumulate);
}

// The panel's kernel: the type's form, then its codes' sign (or bias) and int16 group (a split
// form's halves are 4 steps, so at most 4 there). The codes of Q8_0 need group 1; Q6_K's 4; the
// 4- and 5-bit types' 4 or 8.
template <bool kSplit, bool kOffset>
void panel_kernel(const Panel& panel, int64_t n, const Q8GemmActs& a, float* yr, int64_t stride,
                  bool accumulate) {
  const int group = std::min(panel.group, kSplit ? 4 : 8);
  const auto run = [&]<class F>(F) { panel_tokens<F>(panel, n, a, yr, stride, accumulate); };
  if (!kSplit && !kOffset && panel.bias != 0) {  // the bias types' form is neither
    if (group == 8) return run(Form<false, false, false, 8, true>{});
    if (group >= 4) return run(Form<false, false, false, 4, true>{});
    return run(Form<false, false, false, 1, true>{});
  }
  if (!panel.signed_codes && group == 8) return run(Form<kSplit, kOffset, false, 8>{});
  if (!panel.signed_codes && group >= 4) return run(Form<kSplit, kOffset, false, 4>{});
  if (group == 8) return run(Form<kSplit, kOffset, true, 8>{});
  if (group >= 4) return run(Form<kSplit, kOffset, true, 4>{});
  run(Form<kSplit, kOffset, true, 1>{});
}

// Asks rows [r, r1) (contiguous) into L1 while the current panel computes. An expert's rows
// are short (a Qwen3-30B-A3B expert's Q4_K row is 432 bytes), too short for the hardware to
// learn 8 streams: packing stalled on each block's first line.
void prefetch_rows(const Weight& w, int64_t r, int64_t r1) {
  if (r >= r1) return;
  const char* p = reinterpret_cast<const char*>(w.row_data(r));
  const int64_t bytes = (r1 - r) * w.row_bytes();
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// Rows [r0, r1), 8 at a time, against every activation row (the next 8 prefetched).
void gemm_rows(const Weight& w, int64_t r0, int64_t r1, const Q8GemmActs& a, float* y,
               bool accumulate) {
  thread_local Panel panel;
  const IntGemmForm form = detail::int_gemm_form(w.type);
  for (int64_t r = r0; r < r1; r += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, r1 - r);
    panel.pack(w, r, n, a.blocks);
    prefetch_rows(w, r + n, std::min(r + n + kLanes, w.rows));
    if (form.split) panel_kernel<true, false>(panel, n, a, y + r, w.rows, accumulate);
    else if (form.offset) panel_kernel<false, true>(panel, n, a, y + r, w.rows, accumulate);
    else panel_kernel<false, false>(panel, n, a, y + r, w.rows, accumulate);
  }
}

// The largest |x| of 8 lanes, in every lane.
__m256 lane_max(__m256 v) {
  v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
  v = _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm256_max_ps(v, _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

// quantize_activations' q and d, 32 values a step: d = amax / 127, q = round-to-even(x / d)
// (x times 1 / d, as there), stored as q's byte: the int32's low byte, as the scalar cast
// keeps it (masked to 0..255, the unsigned packs cannot saturate).
void quantize_rows(const float* x, int64_t j0, int64_t j1, Q8GemmActs& a) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i low = _mm256_set1_epi32(0xff);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t b = 0; b < a.blocks; ++b) {
      const float* xb = x + j * a.cols + 32 * b;
      __m256 v[4];
      __m256 m = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);  // a NaN x is skipped, as std::max does
      }
      const float amax = _mm256_cvtss_f32(lane_max(m));
      const float d = amax / 127.0f;
      const float inv = d > 0.0f ? 1.0f / d : 0.0f;
      const __m256 vi = _mm256_set1_ps(inv);
      __m256i q[4];
      for (int i = 0; i < 4; ++i)
        q[i] = _mm256_and_si256(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], vi)), low);
      // Packs interleave 128-bit lanes: bytes come out as q0[0..3] q1[0..3] q2[0..3] q3[0..3]
      // q0[4..7] ..., which the permute puts back in column order.
      const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]),
                                            _mm256_packus_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.xu.data() + j * a.cols + 32 * b),
                          _mm256_permutevar8x32_epi32(p, order));
      a.d[static_cast<size_t>(j * a.blocks + b)] = d;
    }
}

}  // namespace

detail::Q8QuantizeFn detail::avx2_q8_quantize() { return quantize_rows; }
detail::Q8GemmRowsFn detail::avx2_q8_gemm_rows() { return gemm_rows; }

}  // namespace kvcache::kernels

KVCACHE_SIMD_END()

#else
namespace kvcache::kernels {
detail::Q8QuantizeFn detail::avx2_q8_quantize() { return nullptr; }
detail::Q8GemmRowsFn detail::avx2_q8_gemm_rows() { return nullptr; }
}  // namespace kvcache::kernels
#endif
