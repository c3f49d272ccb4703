// GGUF value and tensor-type helpers shared by the reader and the writer.
#include <limits>

#include "program/gguf.h"

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

std::string_view to_string(TensorType type) {
  switch (type) {
    case TensorType::kF32: return "F32";
    case TensorType::kF16: return "F16";
    case TensorType::kQ8_0: return "Q8_0";
    case TensorType::kBF16: return "BF16";
  }
  return "UNKNOWN";
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
  if (n < 0) return std::nullopt;
  const auto un = static_cast<uint64_t>(n);
  uint64_t r = 0;
  switch (type) {
    case TensorType::kF32:
      if (__builtin_mul_overflow(un, uint64_t{4}, &r)) return std::nullopt;
      return r;
    case TensorType::kF16:
    case TensorType::kBF16:
      if (__builtin_mul_overflow(un, uint64_t{2}, &r)) return std::nullopt;
      return r;
    case TensorType::kQ8_0:
      if (un % 32 != 0) return std::nullopt;
      return (un / 32) * 34;
  }
  return std::nullopt;
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

}  // namespace kvcache::gguf
