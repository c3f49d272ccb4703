// Typed metadata getters and tensor conversion to float32 for GgufFile.
#include <cstring>
#include <limits>

#include "program/gguf.h"
#include "program/gguf_quant.h"

namespace kvcache::gguf {
namespace {

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kUint16:
    case ValueType::kInt16: case ValueType::kUint32: case ValueType::kInt32:
    case ValueType::kUint64: case ValueType::kInt64: return true;
    default: return false;
  }
}
bool is_float(ValueType t) { return t == ValueType::kFloat32 || t == ValueType::kFloat64; }

std::string type_name(const Value& v) {
  if (v.type == ValueType::kArray) return "ARRAY of " + std::string(to_string(v.elem_type));
  return std::string(to_string(v.type));
}

Status wrong_type(std::string_view key, const Value& v, std::string_view expected) {
  return invalid_argument("gguf: '" + std::string(key) + "' has type " + type_name(v) +
                          ", expected " + std::string(expected));
}

// An integer-typed value as int64; nullopt when a UINT64 exceeds int64.
std::optional<int64_t> as_int(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (auto* u = std::get_if<uint64_t>(&v.data)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

double as_double(const Value& v) {
  if (auto* d = std::get_if<double>(&v.data)) return *d;
  if (auto* i = std::get_if<int64_t>(&v.data)) return static_cast<double>(*i);
  if (auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<double>(*u);
  return 0.0;
}

Status missing(std::string_view key) {
  return not_found("gguf: key '" + std::string(key) + "' not found");
}

const std::vector<Value>* elements(const Value& v) {
  return std::get_if<std::vector<Value>>(&v.data);
}

}  // namespace

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!is_integer(v->type)) return wrong_type(key, *v, "an integer");
  auto i = as_int(*v);
  if (!i) return invalid_argument("gguf: '" + std::string(key) + "' does not fit in INT64");
  return *i;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (!is_integer(v->type) && !is_float(v->type)) return wrong_type(key, *v, "a number");
  return as_double(*v);
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::kString) return wrong_type(key, *v, "STRING");
  return std::get<std::string>(v->data);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::kBool) return wrong_type(key, *v, "BOOL");
  return std::get<bool>(v->data);
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::kArray || !is_integer(v->elem_type))
    return wrong_type(key, *v, "an ARRAY of integers");
  std::vector<int64_t> out;
  out.reserve(elements(*v)->size());
  for (const Value& e : *elements(*v)) {
    auto i = as_int(e);
    if (!i) return invalid_argument("gguf: '" + std::string(key) + "' element does not fit INT64");
    out.push_back(*i);
  }
  return out;
}

Result<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::kArray || !(is_integer(v->elem_type) || is_float(v->elem_type)))
    return wrong_type(key, *v, "an ARRAY of numbers");
  std::vector<double> out;
  out.reserve(elements(*v)->size());
  for (const Value& e : *elements(*v)) out.push_back(as_double(e));
  return out;
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (v->type != ValueType::kArray || v->elem_type != ValueType::kString)
    return wrong_type(key, *v, "an ARRAY of STRING");
  std::vector<std::string> out;
  out.reserve(elements(*v)->size());
  for (const Value& e : *elements(*v)) out.push_back(std::get<std::string>(e.data));
  return out;
}

Result<std::vector<float>> GgufFile::tensor_f32(std::string_view name) const {
  const TensorInfo* t = tensor(name);
  if (!t) return not_found("gguf: tensor '" + std::string(name) + "' not found");
  if (!is_computable(t->type))
    return invalid_argument("gguf: tensor '" + std::string(name) + "' has type " +
                            to_string(t->type) + ", which this project does not decode");
  std::vector<float> out(static_cast<size_t>(t->n_elements()));
  if (!dequantize(t->type, t->bytes, out))  // the reader placed whole blocks: cannot fail
    return data_loss("gguf: tensor '" + std::string(name) + "' data does not match its shape");
  return out;
}

}  // namespace kvcache::gguf
