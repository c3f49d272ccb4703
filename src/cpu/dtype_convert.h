// Scalar conversions between f32 and the storage types f16 (IEEE binary16) and bf16. Layer:
// cpu. Rounding is to nearest, ties to even; NaN stays NaN. The SIMD kernels convert in
// registers on their own; these are the readable, portable versions used for writes and by
// the reference kernel.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/geometry.h"

namespace kvcache::cpu {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

// Converts n floats to `dtype` at dst (dtype_size(dtype) * n bytes), and back.
void store_row(DType dtype, const float* src, void* dst, int64_t n);
void load_row(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace kvcache::cpu
