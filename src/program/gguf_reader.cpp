// GGUF v3 (and v2) reader: every read is bounds-checked against the bytes that remain, and
// every count or length is capped before anything is allocated. Assumes a little-endian host
// (as GGUF files are little-endian); the project targets x86-64 and arm64.

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <unordered_map>

#include "core/str_cat.h"
#include "program/file_bytes.h"
#include "program/gguf.h"
#include "program/gguf_quant.h"

namespace kvcache::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747u;            // "GGUF" read as little-endian u32
constexpr uint64_t kMaxNameLength = 65535;           // keys and tensor names
constexpr uint64_t kMaxArrayElements = 1ull << 22;   // one array (vocabularies are ~2^18)
constexpr uint64_t kMaxTotalValues = 1ull << 23;     // all values in a file (~48 B each)
constexpr int kMaxArrayDepth = 8;                    // nested arrays
constexpr uint32_t kMaxDims = 4;                     // GGML_MAX_DIMS

class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : b_(bytes) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return ok_status();
    return data_loss(str_cat("gguf: truncated at offset ", pos_, " reading ", what,
                             " (need ", n, " bytes, ", remaining(), " left)"));
  }
  template <class T>
  Status read(T* out, std::string_view what) {
    KVCACHE_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }
  Status read_string(std::string* out, std::string_view what, uint64_t cap) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    KVCACHE_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining())
      return data_loss(str_cat("gguf: ", what, " at offset ", at, " has length ",
                               len, ", past the end of the file (", remaining(),
                               " bytes left)"));
    if (len > cap)
      return invalid_argument(str_cat("gguf: ", what, " at offset ", at,
                                      " has length ", len, ", expected <= ", cap));
    out->assign(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return ok_status();
  }

 private:
  std::span<const uint8_t> b_;
  uint64_t pos_ = 0;
};

bool valid_value_type(uint32_t t) { return t <= 12; }

// Smallest encoding of one element of `t`: bounds array counts before reserving.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8: case ValueType::kInt8: case ValueType::kBool: return 1;
    case ValueType::kUint16: case ValueType::kInt16: return 2;
    case ValueType::kUint32: case ValueType::kInt32: case ValueType::kFloat32: return 4;
    case ValueType::kUint64: case ValueType::kInt64: case ValueType::kFloat64: return 8;
    case ValueType::kString: return 8;
    case ValueType::kArray: return 12;
  }
  return 1;
}

struct ValueReader {
  Cursor& c;
  uint64_t values = 0;  // running total, capped by kMaxTotalValues

  template <class T>
  Status scalar(Value* out, std::string_view key) {
    T v{};
    KVCACHE_RETURN_IF_ERROR(c.read(&v, "value of '" + std::string(key) + "'"));
    if constexpr (std::is_floating_point_v<T>) out->data = static_cast<double>(v);
    else if constexpr (std::is_signed_v<T>) out->data = static_cast<int64_t>(v);
    else out->data = static_cast<uint64_t>(v);
    return ok_status();
  }

  Status read(ValueType type, int depth, Value* out, std::string_view key) {
    if (++values > kMaxTotalValues)
      return invalid_argument(str_cat("gguf: more than ", kMaxTotalValues,
                                      " metadata values (at key '", key, "')"));
    out->type = type;
    switch (type) {
      case ValueType::kUint8: return scalar<uint8_t>(out, key);
      case ValueType::kInt8: return scalar<int8_t>(out, key);
      case ValueType::kUint16: return scalar<uint16_t>(out, key);
      case ValueType::kInt16: return scalar<int16_t>(out, key);
      case ValueType::kUint32: return scalar<uint32_t>(out, key);
      case ValueType::kInt32: return scalar<int32_t>(out, key);
      case ValueType::kFloat32: return scalar<float>(out, key);
      case ValueType::kUint64: return scalar<uint64_t>(out, key);
      case ValueType::kInt64: return scalar<int64_t>(out, key);
      case ValueType::kFloat64: return scalar<double>(out, key);
      case ValueType::kBool: {
        uint8_t b = 0;
        const uint64_t at = c.pos();
        KVCACHE_RETURN_IF_ERROR(c.read(&b, "value of '" + std::string(key) + "'"));
        if (b > 1)
          return invalid_argument(str_cat("gguf: '", key, "' at offset ", at,
                                          ": BOOL byte = ", b, ", expected 0 or 1"));
        out->data = b != 0;
        return ok_status();
      }
      case ValueType::kString: {
        std::string s;
        KVCACHE_RETURN_IF_ERROR(
            c.read_string(&s, "string value of '" + std::string(key) + "'", c.remaining()));
        out->data = std::move(s);
        return ok_status();
      }
      case ValueType::kArray: return array(depth, out, key);
    }
    return invalid_argument("gguf: unknown value type");
  }

  Status array(int depth, Value* out, std::string_view key) {
    const std::string k(key);
    if (depth >= kMaxArrayDepth)
      return invalid_argument(str_cat("gguf: '", k, "': arrays nested deeper than ",
                                      kMaxArrayDepth));
    const uint64_t at = c.pos();
    uint32_t elem = 0;
    uint64_t count = 0;
    KVCACHE_RETURN_IF_ERROR(c.read(&elem, "array type of '" + k + "'"));
    if (!valid_value_type(elem))
      return invalid_argument(str_cat("gguf: '", k, "' at offset ", at, ": array element type ",
                                      elem, ", expected 0..12"));
    KVCACHE_RETURN_IF_ERROR(c.read(&count, "array count of '" + k + "'"));
    const auto et = static_cast<ValueType>(elem);
    if (count > c.remaining() / min_encoded_size(et))
      return data_loss(str_cat("gguf: '", k, "' at offset ", at, ": array of ", count,
                               " ", to_string(et), " elements does not fit in the ",
                               c.remaining(), " bytes left"));
    if (count > kMaxArrayElements)
      return invalid_argument(str_cat("gguf: '", k, "' at offset ", at, ": array of ",
                                      count, " elements, expected <= ", kMaxArrayElements));
    out->elem_type = et;
    std::vector<Value> elements(static_cast<size_t>(count));
    for (auto& e : elements) KVCACHE_RETURN_IF_ERROR(read(et, depth + 1, &e, key));
    out->data = std::move(elements);
    return ok_status();
  }
};

}  // namespace

struct GgufFile::Impl {
  std::shared_ptr<const FileBytes> file;  // mapped (open) or copied (parse); shared with weights
  std::span<const uint8_t> bytes;         // file->bytes()
  uint32_t version = 0;
  uint64_t alignment = 32;
  std::vector<std::pair<std::string, Value>> metadata;
  std::unordered_map<std::string, size_t> key_index;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, size_t> tensor_index;

  explicit Impl(FileBytes f)
      : file(std::make_shared<const FileBytes>(std::move(f))), bytes(file->bytes()) {}
  Status parse();
  Status parse_metadata(Cursor& c, uint64_t n_kv);
  Status parse_tensor_infos(Cursor& c, uint64_t n_tensors);
  Status place_tensors(uint64_t data_start);
};

Status GgufFile::Impl::parse() {
  Cursor c(bytes);
  uint32_t magic = 0;
  KVCACHE_RETURN_IF_ERROR(c.read(&magic, "magic"));
  if (magic != kMagic)
    return data_loss("gguf: bad magic at offset 0 (expected \"GGUF\"); not a GGUF file");
  KVCACHE_RETURN_IF_ERROR(c.read(&version, "version"));
  if (version == 1)
    return invalid_argument("gguf: version 1 is not supported (32-bit counts); re-convert the "
                            "model with a current llama.cpp converter to get GGUF v3");
  if (const uint32_t swapped = __builtin_bswap32(version); swapped >= 1 && swapped <= 3)
    return invalid_argument(str_cat("gguf: big-endian GGUF (version ", swapped,
                                    " byte-swapped); only little-endian files are supported"));
  if (version != 2 && version != 3)
    return invalid_argument(str_cat("gguf: unsupported version ", version, ", expected 3 (or 2)"));
  uint64_t n_tensors = 0, n_kv = 0;
  KVCACHE_RETURN_IF_ERROR(c.read(&n_tensors, "tensor count"));
  KVCACHE_RETURN_IF_ERROR(c.read(&n_kv, "metadata count"));
  // Smallest metadata entry: key length (8) + 1 byte key... use 8 + 4 + 1 = 13; tensor info:
  // name length 8 + n_dims 4 + one dim 8 + type 4 + offset 8 = 32.
  if (n_kv > c.remaining() / 13)
    return data_loss(str_cat("gguf: metadata count ", n_kv, " at offset 16 cannot fit in the ",
                             c.remaining(), " bytes left"));
  if (n_tensors > c.remaining() / 32)
    return data_loss(str_cat("gguf: tensor count ", n_tensors, " at offset 8 cannot fit in the ",
                             c.remaining(), " bytes left"));
  KVCACHE_RETURN_IF_ERROR(parse_metadata(c, n_kv));
  KVCACHE_RETURN_IF_ERROR(parse_tensor_infos(c, n_tensors));
  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  return place_tensors(data_start);
}

Status GgufFile::Impl::parse_metadata(Cursor& c, uint64_t n_kv) {
  ValueReader vr{c};
  metadata.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key;
    KVCACHE_RETURN_IF_ERROR(c.read_string(&key, str_cat("key #", i), kMaxNameLength));
    if (key_index.count(key))
      return invalid_argument(str_cat("gguf: duplicate metadata key '", key, "' at offset ", at));
    uint32_t type = 0;
    const uint64_t type_at = c.pos();
    KVCACHE_RETURN_IF_ERROR(c.read(&type, "type of '" + key + "'"));
    if (!valid_value_type(type))
      return invalid_argument(str_cat("gguf: '", key, "' at offset ", type_at, ": value type ",
                                      type, ", expected 0..12"));
    Value v;
    KVCACHE_RETURN_IF_ERROR(vr.read(static_cast<ValueType>(type), 0, &v, key));
    key_index.emplace(key, metadata.size());
    metadata.emplace_back(std::move(key), std::move(v));
  }
  if (auto it = key_index.find("general.alignment"); it != key_index.end()) {
    const Value& v = metadata[it->second].second;
    if (v.type != ValueType::kUint32)
      return invalid_argument("gguf: general.alignment has type " +
                              std::string(to_string(v.type)) + ", expected UINT32");
    const uint64_t a = std::get<uint64_t>(v.data);
    if (a == 0 || (a & (a - 1)) != 0)
      return invalid_argument(str_cat("gguf: general.alignment = ", a,
                                      ", expected a power of two"));
    alignment = a;
  }
  return ok_status();
}

Status GgufFile::Impl::parse_tensor_infos(Cursor& c, uint64_t n_tensors) {
  tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    const uint64_t at = c.pos();
    KVCACHE_RETURN_IF_ERROR(c.read_string(&t.name, str_cat("tensor name #", i), kMaxNameLength));
    const std::string what = "tensor '" + t.name + "'";
    if (tensor_index.count(t.name))
      return invalid_argument(str_cat("gguf: duplicate ", what, " at offset ", at));
    uint32_t n_dims = 0;
    KVCACHE_RETURN_IF_ERROR(c.read(&n_dims, "dimension count of " + what));
    if (n_dims == 0 || n_dims > kMaxDims)
      return invalid_argument(str_cat("gguf: ", what, " at offset ", at, ": ", n_dims,
                                      " dimensions, expected 1..", kMaxDims));
    int64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      KVCACHE_RETURN_IF_ERROR(c.read(&dim, "dimensions of " + what));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n, static_cast<int64_t>(dim), &n))
        return invalid_argument(str_cat("gguf: ", what, ": dims[", d, "] = ", dim,
                                        " overflows the element count"));
      t.dims.push_back(static_cast<int64_t>(dim));
    }
    uint32_t type = 0;
    KVCACHE_RETURN_IF_ERROR(c.read(&type, "type of " + what));
    // Every type number is accepted here (metadata readers must not refuse a file for its
    // types); place_tensors gives data only to types of known block size.
    t.type = static_cast<TensorType>(type);
    KVCACHE_RETURN_IF_ERROR(c.read(&t.offset, "data offset of " + what));
    tensor_index.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
  }
  return ok_status();
}

Status GgufFile::Impl::place_tensors(uint64_t data_start) {
  if (tensors.empty()) return ok_status();
  if (data_start > bytes.size())
    return data_loss(str_cat("gguf: data section would start at offset ", data_start,
                             ", past the end of the file (", bytes.size(), " bytes)"));
  const uint64_t data_size = bytes.size() - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) within the data section
  ranges.reserve(tensors.size());
  for (auto& t : tensors) {
    const std::string what = "tensor '" + t.name + "'";
    const auto block = block_geometry(t.type);
    if (!block) {  // unknown size: no bytes, no range; consumers refuse it by type
      if (t.offset % alignment != 0)
        return data_loss(str_cat("gguf: ", what, ": data offset ", t.offset,
                                 " is not a multiple of the alignment ", alignment));
      ranges.emplace_back(t.offset, t.offset);  // empty: skipped by the overlap check
      continue;
    }
    if (t.dims[0] % block->elements != 0)
      return invalid_argument(str_cat("gguf: ", what, ": row length ", t.dims[0],
                                      " is not a multiple of the ", to_string(t.type), " block (",
                                      block->elements, " values)"));
    auto size = tensor_bytes(t.type, t.n_elements());
    if (!size)
      return invalid_argument(str_cat("gguf: ", what, ": ", static_cast<uint64_t>(t.n_elements()),
                                      " elements do not form whole ", to_string(t.type),
                                      " blocks"));
    if (t.offset % alignment != 0)
      return data_loss(str_cat("gguf: ", what, ": data offset ", t.offset,
                               " is not a multiple of the alignment ", alignment));
    if (t.offset > data_size || *size > data_size - t.offset)
      return data_loss(str_cat("gguf: ", what, ": data [", t.offset, ", ", t.offset,
                               " + ", *size, ") lies past the end of the data section (",
                               data_size, " bytes)"));
    t.bytes = bytes.subspan(static_cast<size_t>(data_start + t.offset), static_cast<size_t>(*size));
    ranges.emplace_back(t.offset, t.offset + *size);
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t max_end = 0;  // furthest end of the non-empty ranges seen so far
  size_t owner = 0;
  for (size_t idx : order) {
    const auto& r = ranges[idx];
    if (r.first == r.second) continue;  // empty tensors occupy nothing
    if (r.first < max_end)
      return data_loss(str_cat("gguf: tensor '", tensors[idx].name, "' data [", r.first, ", ",
                               r.second, ") overlaps tensor '", tensors[owner].name,
                               "' (which ends at ", max_end, ")"));
    max_end = r.second;
    owner = idx;
  }
  return ok_status();
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes) {
  auto impl = std::make_unique<Impl>(FileBytes::copy(bytes));
  KVCACHE_RETURN_IF_ERROR(impl->parse());
  return GgufFile(std::move(impl));
}

Result<GgufFile> GgufFile::open(const std::string& path, Placement placement) {
  const FileRule rule{"gguf", file_limits::kModel, ""};
  Result<FileBytes> file = placement == Placement::kHugePages ? FileBytes::read_huge(path, rule)
                                                              : FileBytes::map(path, rule);
  if (!file.ok()) return file.status();
  auto impl = std::make_unique<Impl>(std::move(file).value());
  Status s = impl->parse();
  if (!s.ok()) return Status(s.code(), s.message() + " (file '" + path + "')");
  return GgufFile(std::move(impl));
}

uint32_t GgufFile::version() const { return impl_->version; }
std::shared_ptr<const void> GgufFile::storage() const { return impl_->file; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
const std::vector<std::pair<std::string, Value>>& GgufFile::metadata() const {
  return impl_->metadata;
}
const std::vector<TensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

const Value* GgufFile::find(std::string_view key) const {
  auto it = impl_->key_index.find(std::string(key));
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second].second;
}

const TensorInfo* GgufFile::tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(std::string(name));
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

}  // namespace kvcache::gguf
