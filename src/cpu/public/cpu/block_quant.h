// The one definition of the GGUF Q8_0 and Q4_0 block rule: 32 values per block, an f16 scale
// d first, then 32 int8 (value = q * d, 34 bytes) or 16 bytes of nibbles (value j in the low
// nibble of byte j, value j + 16 in the high one; value = (nibble - 8) * d, 18 bytes).
// Layer: cpu. Used by the K/V pools (quantize on write) and by program's weight codecs, so a
// K/V block and a weight block are encoded alike. Scalar and readable; the attention kernels
// read blocks in place on their own and are tested against these.
#pragma once

#include <cstdint>

namespace kvcache::cpu {

inline constexpr int kBlockValues = 32;
inline constexpr int kQ8_0BlockBytes = 34;
inline constexpr int kQ4_0BlockBytes = 18;

// Q8_0: d = f16(max|x| / 127); q = clamp(round(x / d), -127, 127) (round half away from zero,
// dividing by the stored f16 d; all q = 0 when d = 0).
void quantize_q8_0_block(const float* x, uint8_t* block);
void dequantize_q8_0_block(const uint8_t* block, float* out);

// Q4_0: the value of largest magnitude m maps to -8 (the wide end of the signed range, so it
// is exact): d = f16(m / -8); nibble = clamp(round(x / d) + 8, 0, 15).
void quantize_q4_0_block(const float* x, uint8_t* block);
void dequantize_q4_0_block(const uint8_t* block, float* out);

}  // namespace kvcache::cpu
