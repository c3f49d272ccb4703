// GgufWriter: serializes metadata and tensors as GGUF v3 (little-endian host assumed).
#include <cstdio>
#include <cstring>
#include <set>

#include "core/str_cat.h"
#include "program/byte_writer.h"
#include "program/gguf.h"
#include "program/gguf_quant.h"

namespace kvcache::gguf {
namespace {

using Out = program::ByteWriter;

int64_t int_of(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v.data)) return *i;
  if (auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<int64_t>(*u);
  if (auto* d = std::get_if<double>(&v.data)) return static_cast<int64_t>(*d);
  if (auto* b = std::get_if<bool>(&v.data)) return *b ? 1 : 0;
  return 0;
}

double double_of(const Value& v) {
  if (auto* d = std::get_if<double>(&v.data)) return *d;
  return static_cast<double>(int_of(v));
}

// Writes the payload of `v` as `type` (the tag is written by the caller).
void put_payload(Out& o, ValueType type, const Value& v) {
  switch (type) {
    case ValueType::kUint8: o.put(static_cast<uint8_t>(int_of(v))); break;
    case ValueType::kInt8: o.put(static_cast<int8_t>(int_of(v))); break;
    case ValueType::kUint16: o.put(static_cast<uint16_t>(int_of(v))); break;
    case ValueType::kInt16: o.put(static_cast<int16_t>(int_of(v))); break;
    case ValueType::kUint32: o.put(static_cast<uint32_t>(int_of(v))); break;
    case ValueType::kInt32: o.put(static_cast<int32_t>(int_of(v))); break;
    case ValueType::kUint64: o.put(static_cast<uint64_t>(int_of(v))); break;
    case ValueType::kInt64: o.put(int_of(v)); break;
    case ValueType::kFloat32: o.put(static_cast<float>(double_of(v))); break;
    case ValueType::kFloat64: o.put(double_of(v)); break;
    case ValueType::kBool: o.put(static_cast<uint8_t>(int_of(v) != 0)); break;
    case ValueType::kString: {
      auto* s = std::get_if<std::string>(&v.data);
      o.put_string(s ? *s : std::string());
      break;
    }
    case ValueType::kArray: {
      o.put(static_cast<uint32_t>(v.elem_type));
      auto* es = std::get_if<std::vector<Value>>(&v.data);
      o.put<uint64_t>(es ? es->size() : 0);
      if (es)
        for (const Value& e : *es) put_payload(o, v.elem_type, e);
      break;
    }
  }
}

Value int32_array(std::span<const int32_t> v) {
  std::vector<Value> es;
  es.reserve(v.size());
  for (int32_t x : v) es.push_back(int_value(ValueType::kInt32, x));
  return array_value(ValueType::kInt32, std::move(es));
}

}  // namespace

GgufWriter::GgufWriter(uint64_t alignment) : alignment_(alignment) {
  // A non power of two would produce a file the reader refuses; fall back to the default.
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) alignment_ = 32;
}

void GgufWriter::set(std::string key, Value value) {
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::set_int32(std::string key, int32_t v) {
  set(std::move(key), int_value(ValueType::kInt32, v));
}
void GgufWriter::set_uint32(std::string key, uint32_t v) {
  set(std::move(key), uint_value(ValueType::kUint32, v));
}
void GgufWriter::set_float32(std::string key, float v) {
  set(std::move(key), float_value(ValueType::kFloat32, v));
}
void GgufWriter::set_string(std::string key, std::string v) {
  set(std::move(key), string_value(std::move(v)));
}
void GgufWriter::set_bool(std::string key, bool v) { set(std::move(key), bool_value(v)); }
void GgufWriter::set_int32_array(std::string key, std::span<const int32_t> v) {
  set(std::move(key), int32_array(v));
}
void GgufWriter::set_float32_array(std::string key, std::span<const float> v) {
  std::vector<Value> es;
  es.reserve(v.size());
  for (float x : v) es.push_back(float_value(ValueType::kFloat32, x));
  set(std::move(key), array_value(ValueType::kFloat32, std::move(es)));
}
void GgufWriter::set_string_array(std::string key, std::span<const std::string> v) {
  std::vector<Value> es;
  es.reserve(v.size());
  for (const auto& x : v) es.push_back(string_value(x));
  set(std::move(key), array_value(ValueType::kString, std::move(es)));
}

Status GgufWriter::add_tensor(std::string name, TensorType type, std::vector<int64_t> dims,
                              std::vector<uint8_t> data) {
  const std::string what = "gguf writer: tensor '" + name + "'";
  if (name.empty() || name.size() > 65535)
    return invalid_argument(str_cat(what, ": name length ", name.size(),
                                    ", expected 1..65535"));
  for (const auto& t : tensors_)
    if (t.name == name) return invalid_argument(what + " added twice");
  if (dims.empty() || dims.size() > 4)
    return invalid_argument(str_cat(what, ": ", dims.size(),
                                    " dimensions, expected 1..4"));
  TensorInfo probe;
  probe.dims = dims;
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0)
      return invalid_argument(str_cat(what, ": dims[", i, "] = ",
                                      dims[i], ", expected >= 0"));
  auto size = tensor_bytes(type, probe.n_elements());
  if (!size)
    return invalid_argument(what + ": shape does not form whole " +
                            std::string(to_string(type)) + " blocks");
  if (*size != data.size())
    return invalid_argument(str_cat(what, ": ", data.size(), " data bytes, expected ",
                                    *size));
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(data)});
  return ok_status();
}

Status GgufWriter::add_tensor_f32(std::string name, std::vector<int64_t> dims,
                                  std::span<const float> data, TensorType store_as) {
  const std::string what = "gguf writer: tensor '" + name + "'";
  if (!is_computable(store_as))
    return invalid_argument(what + ": converting to " + to_string(store_as) + " is not supported");
  if (dims.empty() || dims[0] < 0)
    return invalid_argument(what + ": expected 1..4 dimensions, dims[0] >= 0");
  const auto bytes = tensor_bytes(store_as, static_cast<int64_t>(data.size()));
  if (!bytes || dims[0] % block_geometry(store_as)->elements != 0)
    return invalid_argument(str_cat(what, ": row length ", dims[0], " / ",
                                    data.size(), " values do not form whole ",
                                    to_string(store_as), " blocks"));
  std::vector<uint8_t> out(static_cast<size_t>(*bytes));
  if (!quantize(store_as, data, out)) return invalid_argument(what + ": cannot encode");
  return add_tensor(std::move(name), store_as, std::move(dims), std::move(out));
}

std::vector<uint8_t> GgufWriter::bytes() const {
  auto metadata = metadata_;
  if (alignment_ != 32) {
    bool found = false;
    for (auto& [k, v] : metadata)
      if (k == "general.alignment") {
        v = uint_value(ValueType::kUint32, alignment_);
        found = true;
      }
    if (!found)
      metadata.emplace_back("general.alignment", uint_value(ValueType::kUint32, alignment_));
  }
  Out o;
  o.put<uint32_t>(0x46554747u);  // "GGUF"
  o.put<uint32_t>(3);
  o.put<uint64_t>(tensors_.size());
  o.put<uint64_t>(metadata.size());
  for (const auto& [k, v] : metadata) {
    o.put_string(k);
    o.put(static_cast<uint32_t>(v.type));
    put_payload(o, v.type, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.put_string(t.name);
    o.put(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) o.put(static_cast<uint64_t>(d));
    o.put(static_cast<uint32_t>(t.type));
    o.put(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  if (!tensors_.empty()) o.pad_to(alignment_);
  for (const auto& t : tensors_) {
    o.put_bytes(t.data.data(), t.data.size());
    o.pad_to(alignment_);
  }
  return o.take();
}

Status GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> b = bytes();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return invalid_argument("gguf writer: cannot create '" + path + "': " + std::strerror(errno));
  const size_t n = std::fwrite(b.data(), 1, b.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (n != b.size() || !closed)
    return data_loss(str_cat("gguf writer: short write to '", path, "' (", n, " of ",
                             b.size(), " bytes)"));
  return ok_status();
}

}  // namespace kvcache::gguf
