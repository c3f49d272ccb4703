// Row conversions between f32 and the storage types f16 (IEEE binary16) and bf16. Layer:
// cpu. The scalar conversions (nearest, ties to even; NaN stays NaN) are core/half.h's. The
// SIMD kernels convert in registers on their own; these are the readable, portable versions
// used for writes and by the reference kernel.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/geometry.h"
#include "core/half.h"

namespace kvcache::cpu {

// The scalar conversions live in core/half.h (shared with program).
using kvcache::bf16_to_f32;
using kvcache::f16_to_f32;
using kvcache::f32_bits;
using kvcache::f32_from_bits;
using kvcache::f32_to_bf16;
using kvcache::f32_to_f16;

// Converts n floats to `dtype` at dst (row_bytes(dtype, n) bytes), and back. For the block
// types q8_0 / q4_0, n is a multiple of 32 and each block follows cpu/block_quant.h.
void store_row(DType dtype, const float* src, void* dst, int64_t n);
void load_row(DType dtype, const void* src, float* dst, int64_t n);

}  // namespace kvcache::cpu
