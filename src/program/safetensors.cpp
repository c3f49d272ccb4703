// Safetensors reader: header bounds and types checked before any tensor is exposed.
#include "program/safetensors.h"


#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/half.h"
#include "core/str_cat.h"
#include "program/file_bytes.h"

namespace kvcache::safetensors {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own 100 MB limit

int64_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;  // unknown: only the offsets are checked
}

}  // namespace

int64_t TensorView::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

struct SafetensorsFile::Impl {
  FileBytes file;                  // mapped (open) or copied (parse)
  std::span<const uint8_t> bytes;  // file.bytes()
  std::vector<TensorView> tensors;
  std::unordered_map<std::string, size_t> index;
  explicit Impl(FileBytes f) : file(std::move(f)), bytes(file.bytes()) {}
  Status parse();
  Status add_entry(const std::string& name, const nlohmann::json& e, uint64_t data_start,
                   uint64_t data_size);
};

Status SafetensorsFile::Impl::add_entry(const std::string& name, const nlohmann::json& e,
                                        uint64_t data_start, uint64_t data_size) {
  const std::string what = "safetensors: tensor '" + name + "'";
  if (!e.is_object()) return invalid_argument(what + ": entry is not an object");
  auto dt = e.find("dtype");
  auto sh = e.find("shape");
  auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string())
    return invalid_argument(what + ": \"dtype\" missing or not a string");
  if (sh == e.end() || !sh->is_array())
    return invalid_argument(what + ": \"shape\" missing or not an array");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    return invalid_argument(what + ": \"data_offsets\" must be two non-negative integers");
  TensorView t;
  t.name = name;
  t.dtype = dt->get<std::string>();
  if (sh->size() > 8)
    return invalid_argument(str_cat(what, ": ", sh->size(), " dims, expected <= 8"));
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40))
      return invalid_argument(what + ": shape entries must be integers in [0, 2^40]");
    t.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  const uint64_t begin = (*off)[0].get<uint64_t>();
  const uint64_t end = (*off)[1].get<uint64_t>();
  if (begin > end || end > data_size)
    return data_loss(str_cat(what, ": data_offsets [", begin, ", ", end,
                             ") outside the data section of ", data_size, " bytes"));
  const int64_t n = t.n_elements();
  const int64_t es = dtype_size(t.dtype);
  int64_t expect = 0;
  if (n < 0 || (es > 0 && __builtin_mul_overflow(n, es, &expect)))
    return invalid_argument(what + ": shape overflows");
  if (es > 0 && static_cast<uint64_t>(expect) != end - begin)
    return invalid_argument(str_cat(what, ": ", end - begin, " data bytes, expected ", expect,
                                    " for ", t.dtype, " of ", static_cast<uint64_t>(n),
                                    " elements"));
  t.bytes = bytes.subspan(static_cast<size_t>(data_start + begin), static_cast<size_t>(end - begin));
  index.emplace(name, tensors.size());
  tensors.push_back(std::move(t));
  return ok_status();
}

Status SafetensorsFile::Impl::parse() {
  if (bytes.size() < 8)
    return data_loss(str_cat("safetensors: file of ", bytes.size(), " bytes is shorter than the "
                             "8-byte header length"));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8)
    return data_loss(str_cat("safetensors: header length ", n, " runs past the end of the file (",
                             bytes.size() - 8, " bytes follow)"));
  if (n > kMaxHeader)
    return invalid_argument(
        str_cat("safetensors: header length ", n, ", expected <= ", kMaxHeader));
  const auto* h = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header = nlohmann::json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object())
    return invalid_argument("safetensors: header is not a JSON object");
  const uint64_t data_start = 8 + n;
  const uint64_t data_size = bytes.size() - data_start;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    KVCACHE_RETURN_IF_ERROR(add_entry(name, e, data_start, data_size));
  }
  return ok_status();
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

Result<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes) {
  auto impl = std::make_unique<Impl>(FileBytes::copy(bytes));
  KVCACHE_RETURN_IF_ERROR(impl->parse());
  return SafetensorsFile(std::move(impl));
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, const std::string& within) {
  Result<FileBytes> file = FileBytes::map(path, {"safetensors", file_limits::kModel, within});
  if (!file.ok()) return file.status();
  auto impl = std::make_unique<Impl>(std::move(file).value());
  Status s = impl->parse();
  if (!s.ok()) return Status(s.code(), s.message() + " (file '" + path + "')");
  return SafetensorsFile(std::move(impl));
}

const std::vector<TensorView>& SafetensorsFile::tensors() const { return impl_->tensors; }

const TensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = impl_->index.find(std::string(name));
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

Result<std::vector<float>> to_f32(const TensorView& t) {
  const bool f32 = t.dtype == "F32", half = t.dtype == "F16" || t.dtype == "BF16";
  if (!f32 && !half)
    return invalid_argument("safetensors: tensor '" + t.name + "' has dtype " + t.dtype +
                            ", expected F32, F16 or BF16");
  // The bytes, not the shape, bound the allocation (a view need not come from parse()).
  const int64_t count = t.n_elements();
  const uint64_t want = static_cast<uint64_t>(count) * (f32 ? 4 : 2);
  if (count < 0 || static_cast<uint64_t>(count) > t.bytes.size() || want != t.bytes.size())
    return data_loss(str_cat("safetensors: tensor '", t.name, "' holds ", t.bytes.size(),
                             " bytes, its shape needs ",
                             (count < 0 ? std::string("more") : str_cat(want))));
  const auto n = static_cast<size_t>(count);
  std::vector<float> out(n);
  if (f32) {
    if (n) std::memcpy(out.data(), t.bytes.data(), n * 4);
  } else {
    const bool f16 = t.dtype == "F16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.bytes.data() + 2 * i, 2);
      out[i] = f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return out;
}

namespace {

Result<std::vector<std::string>> shard_names(const std::string& dir,
                                             const std::string& index_path) {
  Result<std::string> text =
      read_file(index_path, {"safetensors index", file_limits::kJson, dir});
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object())
    return invalid_argument("safetensors: '" + index_path +
                            "' is not a JSON object with a \"weight_map\" object");
  std::set<std::string> files;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string())
      return invalid_argument("safetensors: weight_map[\"" + tensor + "\"] is not a string");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      return invalid_argument("safetensors: weight_map[\"" + tensor + "\"] = \"" + f +
                              "\", expected a file name inside the checkpoint directory");
    files.insert(f);
  }
  return std::vector<std::string>(files.begin(), files.end());
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  std::vector<std::string> files;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (exists(index_path)) {
    auto names = shard_names(dir, index_path);
    c.paths_.push_back(index_path);
    if (!names.ok()) return names.status();
    files = *names;
  } else if (exists(dir + "/model.safetensors")) {
    files = {"model.safetensors"};
  } else {
    return not_found("safetensors: '" + dir + "' holds neither model.safetensors nor "
                     "model.safetensors.index.json");
  }
  for (const auto& f : files) {
    auto file = SafetensorsFile::open(dir + "/" + f, dir);
    if (!file.ok()) return file.status();
    c.paths_.push_back(dir + "/" + f);
    c.files_.push_back(std::move(file).value());
  }
  for (const auto& f : c.files_)
    for (const auto& t : f.tensors())
      if (!c.index_.emplace(t.name, &t).second)
        return invalid_argument("safetensors: tensor '" + t.name + "' appears in two shards");
  return c;
}

const TensorView* Checkpoint::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : index_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvcache::safetensors
