// The scalar float16/bfloat16 <-> float32 conversions under the names the program and engine
// code use; the one implementation is core/half.h. Layer: program (internal header).
#pragma once

#include <cstdint>

#include "core/half.h"

namespace kvcache::program_detail {

using kvcache::bf16_to_f32;
using kvcache::f16_to_f32;
using kvcache::f32_from_bits;
using kvcache::f32_to_bf16;
using kvcache::f32_to_f16;
inline uint32_t bits_from_f32(float f) { return f32_bits(f); }

}  // namespace kvcache::program_detail
