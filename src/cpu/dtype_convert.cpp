#include "cpu/dtype_convert.h"

#include "cpu/block_quant.h"

namespace kvcache::cpu {

void store_row(DType dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; i += kBlockValues, d += kQ8_0BlockBytes)
        quantize_q8_0_block(src + i, d);
      return;
    }
    case DType::kQ4_0: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; i += kBlockValues, d += kQ4_0BlockBytes)
        quantize_q4_0_block(src + i, d);
      return;
    }
  }
}

void load_row(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; i += kBlockValues, s += kQ8_0BlockBytes)
        dequantize_q8_0_block(s, dst + i);
      return;
    }
    case DType::kQ4_0: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; i += kBlockValues, s += kQ4_0BlockBytes)
        dequantize_q4_0_block(s, dst + i);
      return;
    }
  }
}

}  // namespace kvcache::cpu
