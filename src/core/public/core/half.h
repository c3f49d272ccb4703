// The one home of the scalar float16 / bfloat16 <-> float32 conversions, below both program
// (file readers and writers) and cpu (K/V storage, reference kernels). Layer: core.
// Round-to-nearest-even on narrowing; NaN stays NaN; overflow goes to inf. Not vectorized:
// SIMD kernels convert in registers on their own and are tested against these.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvcache {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp != 0) return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24 is exact in f32.
  const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in f16: value = mant * 2^-24; round the f32 value to that grid.
    if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24 bits to drop
    const uint32_t keep = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    const uint32_t r = keep + ((rest > half || (rest == half && (keep & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t keep = rebased >> 13;
  const uint32_t rest = rebased & 0x1fffu;
  const uint32_t r = keep + ((rest > 0x1000u || (rest == 0x1000u && (keep & 1u))) ? 1u : 0u);
  return static_cast<uint16_t>(sign | r);  // a carry into the exponent is the right answer
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// An f16 stored little-endian at `p` (a block scale in a GGUF block), unaligned.
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
// Stores f16(v) at `p` and returns the stored value as f32 (what decoders will see).
inline float store_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
  return f16_to_f32(h);
}

}  // namespace kvcache
