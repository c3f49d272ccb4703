// GGUF value and tensor-type helpers shared by the reader and the writer.
#include <limits>

#include "core/str_cat.h"
#include "program/gguf.h"
#include "program/gguf_quant.h"

namespace kvcache::gguf {

std::string_view to_string(ValueType type) {
  switch (type) {
    case ValueType::kUint8: return "UINT8";
    case ValueType::kInt8: return "INT8";
    case ValueType::kUint16: return "UINT16";
    case ValueType::kInt16: return "INT16";
    case ValueType::kUint32: return "UINT32";
    case ValueType::kInt32: return "INT32";
    case ValueType::kFloat32: return "FLOAT32";
    case ValueType::kBool: return "BOOL";
    case ValueType::kString: return "STRING";
    case ValueType::kArray: return "ARRAY";
    case ValueType::kUint64: return "UINT64";
    case ValueType::kInt64: return "INT64";
    case ValueType::kFloat64: return "FLOAT64";
  }
  return "UNKNOWN";
}

std::string to_string(TensorType type) {
  switch (type) {
    case TensorType::kF32: return "F32";
    case TensorType::kF16: return "F16";
    case TensorType::kQ4_0: return "Q4_0";
    case TensorType::kQ4_1: return "Q4_1";
    case TensorType::kQ5_0: return "Q5_0";
    case TensorType::kQ5_1: return "Q5_1";
    case TensorType::kQ8_0: return "Q8_0";
    case TensorType::kQ8_1: return "Q8_1";
    case TensorType::kQ2_K: return "Q2_K";
    case TensorType::kQ3_K: return "Q3_K";
    case TensorType::kQ4_K: return "Q4_K";
    case TensorType::kQ5_K: return "Q5_K";
    case TensorType::kQ6_K: return "Q6_K";
    case TensorType::kQ8_K: return "Q8_K";
    case TensorType::kIQ2_XXS: return "IQ2_XXS";
    case TensorType::kIQ2_XS: return "IQ2_XS";
    case TensorType::kIQ3_XXS: return "IQ3_XXS";
    case TensorType::kIQ1_S: return "IQ1_S";
    case TensorType::kIQ4_NL: return "IQ4_NL";
    case TensorType::kIQ3_S: return "IQ3_S";
    case TensorType::kIQ2_S: return "IQ2_S";
    case TensorType::kIQ4_XS: return "IQ4_XS";
    case TensorType::kI8: return "I8";
    case TensorType::kI16: return "I16";
    case TensorType::kI32: return "I32";
    case TensorType::kI64: return "I64";
    case TensorType::kF64: return "F64";
    case TensorType::kIQ1_M: return "IQ1_M";
    case TensorType::kBF16: return "BF16";
    case TensorType::kTQ1_0: return "TQ1_0";
    case TensorType::kTQ2_0: return "TQ2_0";
    case TensorType::kMXFP4: return "MXFP4";
  }
  return str_cat("unknown(", static_cast<uint32_t>(type), ")");
}

Value int_value(ValueType type, int64_t v) {
  Value r;
  r.type = type;
  r.data = v;
  return r;
}

Value uint_value(ValueType type, uint64_t v) {
  Value r;
  r.type = type;
  r.data = v;
  return r;
}

Value float_value(ValueType type, double v) {
  Value r;
  r.type = type;
  r.data = v;
  return r;
}

Value bool_value(bool v) {
  Value r;
  r.type = ValueType::kBool;
  r.data = v;
  return r;
}

Value string_value(std::string v) {
  Value r;
  r.type = ValueType::kString;
  r.data = std::move(v);
  return r;
}

Value array_value(ValueType elem, std::vector<Value> elements) {
  for (auto& e : elements) e.type = elem;
  Value r;
  r.type = ValueType::kArray;
  r.elem_type = elem;
  r.data = std::move(elements);
  return r;
}

std::optional<uint64_t> tensor_bytes(TensorType type, int64_t n) {
  const auto g = block_geometry(type);
  if (n < 0 || !g || n % g->elements != 0) return std::nullopt;
  uint64_t r = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(n / g->elements),
                             static_cast<uint64_t>(g->bytes), &r))
    return std::nullopt;
  return r;
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

}  // namespace kvcache::gguf
