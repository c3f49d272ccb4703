#include "cpu/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace kvcache::cpu {
namespace {

int nearest(float v) { return static_cast<int>(std::lround(v)); }

}  // namespace

void quantize_q8_0_block(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < kBlockValues; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = store_f16(b, amax / 127.0f);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < kBlockValues; ++j)
    b[2 + j] = static_cast<uint8_t>(
        static_cast<int8_t>(std::clamp(nearest(x[j] * inv), -127, 127)));
}

void dequantize_q8_0_block(const uint8_t* b, float* out) {
  const float d = load_f16(b);
  for (int j = 0; j < kBlockValues; ++j)
    out[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

void quantize_q4_0_block(const float* x, uint8_t* b) {
  float extreme = 0.0f;
  for (int j = 0; j < kBlockValues; ++j)
    if (std::fabs(x[j]) > std::fabs(extreme)) extreme = x[j];
  const float d = store_f16(b, extreme / -8.0f);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  uint8_t q[kBlockValues];
  for (int j = 0; j < kBlockValues; ++j)
    q[j] = static_cast<uint8_t>(std::clamp(nearest(x[j] * inv) + 8, 0, 15));
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

void dequantize_q4_0_block(const uint8_t* b, float* out) {
  const float d = load_f16(b);
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
    out[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

}  // namespace kvcache::cpu
