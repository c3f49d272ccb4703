// Model fingerprint. See fingerprint.h; the record is specified in docs/snapshot.md.
#include "program/fingerprint.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <xxhash.h>

#include "program/byte_writer.h"
#include "program/gguf_keys.h"

namespace kvcache {
namespace {

constexpr size_t kSampleBytes = 4096;

// The fingerprint's record: ByteWriter plus GGUF values in one canonical form.
class Record : public program::ByteWriter {
 public:
  void put_value(const gguf::Value& v) {
    using gguf::ValueType;
    put<uint32_t>(static_cast<uint32_t>(v.type));
    switch (v.type) {
      case ValueType::kFloat32:
      case ValueType::kFloat64: put<double>(std::get<double>(v.data)); break;
      case ValueType::kBool: put<uint8_t>(std::get<bool>(v.data) ? 1 : 0); break;
      case ValueType::kString: put_string(std::get<std::string>(v.data)); break;
      case ValueType::kArray: {
        const auto& elems = std::get<std::vector<gguf::Value>>(v.data);
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(elems.size());
        for (const gguf::Value& e : elems) put_value(e);
        break;
      }
      default:  // every integer width: its 8-byte two's complement form
        if (const auto* u = std::get_if<uint64_t>(&v.data)) put<uint64_t>(*u);
        else put<int64_t>(std::get<int64_t>(v.data));
    }
  }
};

uint64_t hash(std::span<const uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

}  // namespace

uint64_t model_fingerprint(const gguf::GgufFile& file) {
  Record r;
  r.put_string("kvcache.fingerprint.v1");
  std::string arch;
  if (const gguf::Value* a = file.find(gguf::key_pattern(gguf::Key::kGeneralArchitecture));
      a != nullptr && a->type == gguf::ValueType::kString)
    arch = std::get<std::string>(a->data);
  r.put_string(arch);
  const std::string prefix = arch + ".";
  std::vector<const std::pair<std::string, gguf::Value>*> keys;
  for (const auto& kv : file.metadata())
    if (kv.first.starts_with(prefix)) keys.push_back(&kv);
  std::sort(keys.begin(), keys.end(), [](auto* a, auto* b) { return a->first < b->first; });
  r.put<uint64_t>(keys.size());
  for (const auto* kv : keys) {
    r.put_string(kv->first);
    r.put_value(kv->second);
  }
  r.put<uint64_t>(file.tensors().size());
  for (const gguf::TensorInfo& t : file.tensors()) {
    r.put_string(t.name);
    r.put<uint32_t>(static_cast<uint32_t>(t.type));
    r.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) r.put<int64_t>(d);
    r.put<uint64_t>(t.offset);
    const size_t n = std::min(kSampleBytes, t.bytes.size());
    r.put<uint64_t>(hash(t.bytes.first(n)));
    r.put<uint64_t>(hash(t.bytes.last(n)));
  }
  return hash(r.bytes());
}

}  // namespace kvcache
