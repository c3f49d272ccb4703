// Re-encoding a float GGUF model file into a quantized one (`kvcache quantize`): which tensor
// gets which type under each mix (docs/model_format.md, "Quantized files"), then the encoding.
// Layer: program. Planning is const and reads metadata only; nothing is written unless every
// tensor has a plan. Not here: the block layouts themselves (gguf_quant.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "program/gguf.h"

namespace kvcache::gguf {

// Append-only. kMxfp4: every matrix MXFP4 but the output (Q8_0).
enum class QuantMix { kQ8_0, kQ4_0, kQ4_K_M, kQ5_K_M, kQ6_K, kMxfp4 };
// "q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k", "mxfp4"; nullopt otherwise.
std::optional<QuantMix> parse_quant_mix(std::string_view name);
std::string_view to_string(QuantMix mix);
// The general.file_type value files of this mix carry (the numbering GGUF files use).
uint32_t file_type_of(QuantMix mix);

struct TensorPlan {
  std::string name;
  TensorType from = TensorType::kF32;
  TensorType to = TensorType::kF32;
  bool fallback = false;  // the mix's type did not fit the row length
};

// One plan per tensor, in file order. InvalidArgument naming the tensor when the input is
// already quantized (a block type: re-quantizing compounds the error) or holds a type of
// unknown size.
Result<std::vector<TensorPlan>> plan_quantization(const GgufFile& in, QuantMix mix);

struct QuantizeReport {
  std::map<TensorType, int64_t> tensors_by_type;  // output type -> count
  int64_t fallbacks = 0;
  uint64_t bytes_in = 0, bytes_out = 0;           // tensor data only
};

// Encodes every tensor as planned into `out` (metadata copied unchanged except
// general.file_type and general.quantization_version). `out` is untouched on error.
Result<QuantizeReport> quantize_model(const GgufFile& in, QuantMix mix, GgufWriter& out);

}  // namespace kvcache::gguf
