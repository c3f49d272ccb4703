// Block geometry, scalar decoders and encoders of the GGUF tensor types. See gguf_quant.h.
#include "program/gguf_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "cpu/block_quant.h"

namespace kvcache::gguf {
namespace {

int nearest(float v) { return static_cast<int>(std::lround(v)); }
uint8_t clamp_u8(int v, int hi) { return static_cast<uint8_t>(std::clamp(v, 0, hi)); }

// ---- decoders: one block, `out` receives the block's values ----------------------------

// Q4_0 / Q4_1 / Q5_0 / Q5_1 share one shape: scale, optional min, optional 32 high bits,
// 16 bytes of nibbles (value j in the low nibble of byte j, value j + 16 in the high one).
void decode_32(const uint8_t* b, bool has_min, bool five_bit, float* out) {
  const float d = load_f16(b);
  const float m = has_min ? load_f16(b + 2) : 0.0f;
  const uint8_t* p = b + (has_min ? 4 : 2);
  uint32_t qh = 0;
  if (five_bit) {
    std::memcpy(&qh, p, 4);
    p += 4;
  }
  const int offset = has_min ? 0 : (five_bit ? 16 : 8);
  for (int j = 0; j < 16; ++j) {
    int lo = p[j] & 0x0F, hi = p[j] >> 4;
    if (five_bit) {
      lo |= static_cast<int>((qh >> j) & 1u) << 4;
      hi |= static_cast<int>((qh >> (j + 16)) & 1u) << 4;
    }
    out[j] = static_cast<float>(lo - offset) * d + m;
    out[j + 16] = static_cast<float>(hi - offset) * d + m;
  }
}


// Q4_K (144 B): d, dmin, 12 packed scale bytes, 128 bytes of nibbles. Q5_K (176 B) adds 32
// bytes of high bits before the nibbles: bit s of qh[l] is the fifth bit of sub-block s's
// value l. Sub-blocks 2c and 2c+1 share nibble bytes [32c, 32c + 32) (low, high nibble).
void decode_k(const uint8_t* b, bool five_bit, float* out) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (five_bit ? 48 : 16);
  for (int s = 0; s < 8; ++s) {
    const ScaleMin sm = unpack_k_scale(scales, s);
    const float scale = d * sm.scale, min = dmin * sm.min;
    const uint8_t* q = qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      int v = (s % 2 == 0) ? (q[l] & 0x0F) : (q[l] >> 4);
      if (five_bit) v |= ((qh[l] >> s) & 1) << 4;
      out[32 * s + l] = scale * static_cast<float>(v) - min;
    }
  }
}

// Q6_K (210 B): ql[128] low nibbles, qh[64] two high bits each, int8 scales[16] (one per 16
// values), d last. Each half of 128 values uses ql[64 h, +64), qh[32 h, +32): value 32 g + l
// (g = 0..3, l < 32) takes the low (g < 2) or high (g >= 2) nibble of ql[l + 32 (g % 2)] and
// bits 2g, 2g + 1 of qh[l]; the stored 6-bit value is offset by 32.
void decode_q6_k(const uint8_t* b, float* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lowbyte = ql[64 * h + l + 32 * (g % 2)];
        const int lo = g < 2 ? (lowbyte & 0x0F) : (lowbyte >> 4);
        const int v = (lo | (((qh[32 * h + l] >> (2 * g)) & 3) << 4)) - 32;
        const int idx = 128 * h + 32 * g + l;
        out[idx] = d * static_cast<float>(sc[idx / 16]) * static_cast<float>(v);
      }
}

// MXFP4 (17 B): exponent byte, then 16 bytes of codes (value j low nibble, j + 16 high).
void decode_mxfp4(const uint8_t* b, float* out) {
  const float half = mxfp4_half_scale(b[0]);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>(kMxfp4Doubled[b[1 + j] & 0x0F]) * half;
    out[j + 16] = static_cast<float>(kMxfp4Doubled[b[1 + j] >> 4]) * half;
  }
}

// ---- encoders --------------------------------------------------------------------------

// 32 values of 4 or 5 bits into a block's tail: for 5 bits, 4 bytes of high bits (bit j of
// the little-endian u32 is value j's), then 16 nibble bytes (value j low, value j + 16 high).
void pack_32(const uint8_t q[32], bool five_bit, uint8_t* p) {
  if (five_bit) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(q[j] >> 4) << j;
    std::memcpy(p, &qh, 4);
    p += 4;
  }
  for (int j = 0; j < 16; ++j)
    p[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

// Symmetric 32-value blocks (Q4_0, Q5_0): the value of largest magnitude maps to -levels/2
// (the widest end of the signed range), so it is represented exactly.
void encode_sym_32(const float* x, bool five_bit, uint8_t* b) {
  float extreme = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
  const int half = five_bit ? 16 : 8;
  store_f16(b, extreme / static_cast<float>(-half));
  const float d = load_f16(b);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = clamp_u8(nearest(x[j] * inv) + half, 2 * half - 1);
  pack_32(q, five_bit, b + 2);
}

// Affine 32-value blocks (Q4_1, Q5_1): min and step from the block's range.
void encode_affine_32(const float* x, bool five_bit, uint8_t* b) {
  const auto [lo, hi] = std::minmax_element(x, x + 32);
  const int top = five_bit ? 31 : 15;
  store_f16(b, (*hi - *lo) / static_cast<float>(top));
  store_f16(b + 2, *lo);
  const float d = load_f16(b), m = load_f16(b + 2);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) q[j] = clamp_u8(nearest((x[j] - m) * inv), top);
  pack_32(q, five_bit, b + 4);
}

// Q4_K / Q5_K: per sub-block of 32 a step and a (non-negative) min with value = step * q -
// min; steps and mins are then quantized to 6 bits against the block's largest of each.
void encode_k(const float* x, bool five_bit, uint8_t* b) {
  const int top = five_bit ? 31 : 15;
  float step[8], mins[8], max_step = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 8; ++s) {
    const auto [lo, hi] = std::minmax_element(x + 32 * s, x + 32 * s + 32);
    mins[s] = std::max(0.0f, -*lo);  // 0 when the whole sub-block is >= 0
    step[s] = (*hi + mins[s]) / static_cast<float>(top);
    max_step = std::max(max_step, step[s]);
    max_min = std::max(max_min, mins[s]);
  }
  store_f16(b, max_step / 63.0f);
  store_f16(b + 2, max_min / 63.0f);
  const float d = load_f16(b), dmin = load_f16(b + 2);
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    // Round the step up so the sub-block's largest value still fits in `top` steps.
    sc[s] = d > 0.0f ? clamp_u8(static_cast<int>(std::ceil(step[s] / d)), 63) : 0;
    mn[s] = dmin > 0.0f ? clamp_u8(nearest(mins[s] / dmin), 63) : 0;
  }
  pack_k_scales(sc, mn, b + 4);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + (five_bit ? 48 : 16);
  if (five_bit) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  for (int s = 0; s < 8; ++s) {
    const float scale = d * sc[s], min = dmin * mn[s];
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const uint8_t q = clamp_u8(nearest((x[32 * s + l] + min) * inv), top);
      qs[32 * (s / 2) + l] |= static_cast<uint8_t>((q & 0x0F) << (s % 2 == 0 ? 0 : 4));
      if (five_bit) qh[l] |= static_cast<uint8_t>((q >> 4) << s);
    }
  }
}

// Q6_K: per 16 values a signed step (largest magnitude -> -32), steps quantized to int8
// against the block's largest step magnitude.
void encode_q6_k(const float* x, uint8_t* b) {
  float step[16], max_abs = 0.0f;
  for (int g = 0; g < 16; ++g) {
    float extreme = 0.0f;
    for (int l = 0; l < 16; ++l)
      if (std::fabs(x[16 * g + l]) > std::fabs(extreme)) extreme = x[16 * g + l];
    step[g] = extreme / -32.0f;
    max_abs = std::max(max_abs, std::fabs(step[g]));
  }
  store_f16(b + 208, max_abs / 127.0f);
  const float d = load_f16(b + 208);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  uint8_t q[256];
  for (int g = 0; g < 16; ++g) {
    sc[g] = static_cast<int8_t>(d > 0.0f ? std::clamp(nearest(step[g] / d), -127, 127) : 0);
    const float scale = d * sc[g];
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    for (int l = 0; l < 16; ++l)
      q[16 * g + l] = clamp_u8(nearest(x[16 * g + l] * inv) + 32, 63);
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  std::memset(b, 0, 192);
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const uint8_t v = q[128 * h + 32 * g + l];
        ql[64 * h + l + 32 * (g % 2)] |= static_cast<uint8_t>((v & 0x0F) << (g < 2 ? 0 : 4));
        qh[32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * g));
      }
}

// The E2M1 code nearest to v (a value in units of the block's step 2^(e - 127)): magnitudes
// {0, .5, 1, 1.5, 2, 3, 4, 6}, a tie to the smaller one, beyond 6 clamped; bit 3 the sign
// (a value that rounds to zero takes code 0, never -0).
uint8_t e2m1_code(float v) {
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  const float m = std::fabs(v);
  uint8_t i = 0;
  while (i < 7 && m > kMid[i]) ++i;
  return i != 0 && v < 0.0f ? static_cast<uint8_t>(i | 8) : i;
}

// Squared error of 32 values encoded with exponent e; codes into q.
double mxfp4_try(const float* x, int e, uint8_t q[32]) {
  const float half = mxfp4_half_scale(static_cast<uint8_t>(e));
  const float inv = 1.0f / (2.0f * half);  // exact: 2^(127 - e), a float for every e < 255
  double err = 0.0;
  for (int j = 0; j < 32; ++j) {
    q[j] = e2m1_code(x[j] * inv);
    const double d = double{x[j]} - double{static_cast<float>(kMxfp4Doubled[q[j]]) * half};
    err += d * d;
  }
  return err;
}

// MXFP4: the smallest exponent whose largest value 6 * 2^(e - 127) covers the block's largest
// |x| (nothing clipped), or one below it (finer steps, the largest values clipped to 6 steps)
// when that has the smaller squared error. An all-zero block is exponent 127 and zero codes.
void encode_mxfp4(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  uint8_t q[32] = {}, alt[32];
  int e = 127;
  if (amax > 0.0f) {
    int k = 0;
    std::frexp(double{amax} / 6.0, &k);  // amax / 6 in [2^(k-1), 2^k)
    e = std::clamp(k + 127, 0, 254);
    while (e > 0 && 6.0 * std::ldexp(1.0, e - 128) >= amax) --e;  // smallest that covers
    while (e < 254 && 6.0 * std::ldexp(1.0, e - 127) < amax) ++e;
    const double err = mxfp4_try(x, e, q);
    if (e > 0 && mxfp4_try(x, e - 1, alt) < err) {
      --e;
      std::memcpy(q, alt, 32);
    }
  }
  b[0] = static_cast<uint8_t>(e);
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

}  // namespace

std::optional<BlockGeometry> block_geometry(TensorType type) {
  switch (type) {
    case TensorType::kF32: case TensorType::kI32: return BlockGeometry{1, 4};
    case TensorType::kF16: case TensorType::kBF16: case TensorType::kI16:
      return BlockGeometry{1, 2};
    case TensorType::kI8: return BlockGeometry{1, 1};
    case TensorType::kI64: case TensorType::kF64: return BlockGeometry{1, 8};
    case TensorType::kQ4_0: return BlockGeometry{32, 18};
    case TensorType::kQ4_1: return BlockGeometry{32, 20};
    case TensorType::kQ5_0: return BlockGeometry{32, 22};
    case TensorType::kQ5_1: return BlockGeometry{32, 24};
    case TensorType::kQ8_0: return BlockGeometry{32, 34};
    case TensorType::kQ8_1: return BlockGeometry{32, 36};
    case TensorType::kIQ4_NL: return BlockGeometry{32, 18};
    case TensorType::kMXFP4: return BlockGeometry{32, 17};
    case TensorType::kQ2_K: return BlockGeometry{256, 84};
    case TensorType::kQ3_K: return BlockGeometry{256, 110};
    case TensorType::kQ4_K: return BlockGeometry{256, 144};
    case TensorType::kQ5_K: return BlockGeometry{256, 176};
    case TensorType::kQ6_K: return BlockGeometry{256, 210};
    case TensorType::kQ8_K: return BlockGeometry{256, 292};
    case TensorType::kIQ2_XXS: return BlockGeometry{256, 66};
    case TensorType::kIQ2_XS: return BlockGeometry{256, 74};
    case TensorType::kIQ3_XXS: return BlockGeometry{256, 98};
    case TensorType::kIQ1_S: return BlockGeometry{256, 50};
    case TensorType::kIQ3_S: return BlockGeometry{256, 110};
    case TensorType::kIQ2_S: return BlockGeometry{256, 82};
    case TensorType::kIQ4_XS: return BlockGeometry{256, 136};
    case TensorType::kIQ1_M: return BlockGeometry{256, 56};
    case TensorType::kTQ1_0: return BlockGeometry{256, 54};
    case TensorType::kTQ2_0: return BlockGeometry{256, 66};
  }
  return std::nullopt;
}

bool is_computable(TensorType type) {
  switch (type) {
    case TensorType::kF32: case TensorType::kF16: case TensorType::kBF16:
    case TensorType::kQ4_0: case TensorType::kQ4_1: case TensorType::kQ5_0:
    case TensorType::kQ5_1: case TensorType::kQ8_0: case TensorType::kQ4_K:
    case TensorType::kQ5_K: case TensorType::kQ6_K: case TensorType::kMXFP4: return true;
    default: return false;
  }
}

std::optional<int64_t> row_bytes(TensorType type, int64_t cols) {
  const auto g = block_geometry(type);
  if (!g || cols < 0 || cols % g->elements != 0) return std::nullopt;
  int64_t r = 0;
  if (__builtin_mul_overflow(cols / g->elements, g->bytes, &r)) return std::nullopt;
  return r;
}

ScaleMin unpack_k_scale(const uint8_t* q, int j) {
  if (j < 4) return {static_cast<uint8_t>(q[j] & 63), static_cast<uint8_t>(q[j + 4] & 63)};
  return {static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4))};
}

void pack_k_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0x0F) | ((min[j + 4] & 0x0F) << 4));
  }
}

bool dequantize(TensorType type, std::span<const uint8_t> src, std::span<float> dst) {
  const auto n = static_cast<int64_t>(dst.size());
  const auto bytes = row_bytes(type, n);
  if (!is_computable(type) || !bytes || static_cast<int64_t>(src.size()) < *bytes) return false;
  const BlockGeometry g = *block_geometry(type);
  const uint8_t* p = src.data();
  float* out = dst.data();
  for (int64_t i = 0; i < n / g.elements; ++i, p += g.bytes, out += g.elements) {
    switch (type) {
      case TensorType::kF32: std::memcpy(out, p, 4); break;
      case TensorType::kF16: *out = load_f16(p); break;
      case TensorType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        *out = bf16_to_f32(h);
        break;
      }
      case TensorType::kQ4_0: cpu::dequantize_q4_0_block(p, out); break;  // the K/V rule too
      case TensorType::kQ4_1: decode_32(p, true, false, out); break;
      case TensorType::kQ5_0: decode_32(p, false, true, out); break;
      case TensorType::kQ5_1: decode_32(p, true, true, out); break;
      case TensorType::kQ8_0: cpu::dequantize_q8_0_block(p, out); break;
      case TensorType::kQ4_K: decode_k(p, false, out); break;
      case TensorType::kQ5_K: decode_k(p, true, out); break;
      case TensorType::kQ6_K: decode_q6_k(p, out); break;
      case TensorType::kMXFP4: decode_mxfp4(p, out); break;
      default: return false;
    }
  }
  return true;
}

bool quantize(TensorType type, std::span<const float> src, std::span<uint8_t> dst) {
  const auto n = static_cast<int64_t>(src.size());
  const auto bytes = row_bytes(type, n);
  if (!is_computable(type) || !bytes || static_cast<int64_t>(dst.size()) < *bytes) return false;
  const BlockGeometry g = *block_geometry(type);
  const float* x = src.data();
  uint8_t* b = dst.data();
  for (int64_t i = 0; i < n / g.elements; ++i, b += g.bytes, x += g.elements) {
    switch (type) {
      case TensorType::kF32: std::memcpy(b, x, 4); break;
      case TensorType::kF16: store_f16(b, *x); break;
      case TensorType::kBF16: {
        const uint16_t h = f32_to_bf16(*x);
        std::memcpy(b, &h, 2);
        break;
      }
      case TensorType::kQ4_0: cpu::quantize_q4_0_block(x, b); break;  // the K/V rule too
      case TensorType::kQ4_1: encode_affine_32(x, false, b); break;
      case TensorType::kQ5_0: encode_sym_32(x, true, b); break;
      case TensorType::kQ5_1: encode_affine_32(x, true, b); break;
      case TensorType::kQ8_0: cpu::quantize_q8_0_block(x, b); break;
      case TensorType::kQ4_K: encode_k(x, false, b); break;
      case TensorType::kQ5_K: encode_k(x, true, b); break;
      case TensorType::kQ6_K: encode_q6_k(x, b); break;
      case TensorType::kMXFP4: encode_mxfp4(x, b); break;
      default: return false;
    }
  }
  return true;
}

}  // namespace kvcache::gguf
