// GGUF tensor block formats: per-type block geometry, and the readable (scalar) decoders and
// encoders of the types the engine computes with. Layer: program. Layouts follow the GGUF /
// ggml specification byte for byte (little-endian); the encoders are this project's own
// (plain min/max and absmax scaling, no search), used by `kvcache quantize` and by tests.
// Not here: fast kernels (engine/quant_matvec.h) and any choice of which tensor gets which type.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "program/gguf.h"

namespace kvcache::gguf {

// A type's block: `elements` values stored in `bytes` bytes (F32: 1 and 4).
struct BlockGeometry {
  int64_t elements = 0;
  int64_t bytes = 0;
};
// nullopt for a type number whose block size this project does not know.
std::optional<BlockGeometry> block_geometry(TensorType type);

// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4: the types the engine
// reads.
bool is_computable(TensorType type);
// Bytes of one row of `cols` values; nullopt when cols is not a whole number of blocks or the
// type is unknown.
std::optional<int64_t> row_bytes(TensorType type, int64_t cols);

// Decodes n values (n a multiple of the block size) of a computable type. Returns false (and
// writes nothing) for another type or a partial block.
bool dequantize(TensorType type, std::span<const uint8_t> src, std::span<float> dst);

// Encodes n values (n a multiple of the block size) as a computable type; dst holds
// row_bytes(type, n) bytes. Returns false for another type or a partial block. Non-finite
// inputs give non-finite scales; callers check their inputs.
bool quantize(TensorType type, std::span<const float> src, std::span<uint8_t> dst);

// MXFP4 (17 bytes per 32 values): byte 0 is an E8M0 exponent e, bytes 1..16 hold 4-bit E2M1
// codes (value j in the low nibble of byte 1 + j, value j + 16 in the high one). Value =
// E2M1(code) * 2^(e - 127) = kMxfp4Doubled[code] * mxfp4_half_scale(e): the E2M1 values
// {0, .5, 1, 1.5, 2, 3, 4, 6} (code bit 3 = sign) doubled into integers, and half the scale.
// e = 255 (NaN in the OCP format) decodes as 2^127 like every other byte: files never hold it.
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                             0, -1, -2, -3, -4, -6, -8, -12};
// 2^(e - 128), exact for every byte, built from the bits (inline: the kernels' row tails call
// it per block): the normal float with exponent field e - 1 from e = 2 on, and the subnormals
// 2^21 << e (2^-128, 2^-127) below.
inline float mxfp4_half_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t{1} << (21 + e) : uint32_t{e - 1u} << 23;
  return std::bit_cast<float>(bits);
}

// Q4_K / Q5_K pack eight 6-bit scales and eight 6-bit mins into 12 bytes; sub-block j's pair.
struct ScaleMin {
  uint8_t scale = 0, min = 0;
};
ScaleMin unpack_k_scale(const uint8_t* packed12, int j);
// All eight at once (unpack_k_scale's rule on four bytes at a time): byte j of `scales` /
// `mins` is sub-block j's. Bytes 0-3 / 4-7 hold scales / mins 0-3 in their low 6 bits and the
// top 2 bits of scales / mins 4-7; bytes 8-11 the low nibbles of 4-7.
inline void unpack_k_scales8(const uint8_t* packed12, uint64_t& scales, uint64_t& mins) {
  uint32_t w[3];
  std::memcpy(w, packed12, 12);
  const uint32_t sc_hi = (w[2] & 0x0F0F0F0Fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0F0F0F0Fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  scales = (w[0] & 0x3F3F3F3Fu) | (uint64_t{sc_hi} << 32);
  mins = (w[1] & 0x3F3F3F3Fu) | (uint64_t{mn_hi} << 32);
}
void pack_k_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t* packed12);

}  // namespace kvcache::gguf
