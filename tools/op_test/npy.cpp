#include "op_test/npy.h"

#include "core/str_cat.h"
#include "program/file_bytes.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <string>

namespace kvcache::tools {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr int64_t kMaxHeader = 1 << 16;

// The value text of `key` in the header dict ("'descr': '<f4', ..."), or empty.
std::string dict_value(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t p = header.find(':', k);
  if (p == std::string::npos) return "";
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p >= header.size()) return "";
  if (header[p] == '(') {
    const size_t e = header.find(')', p);
    return e == std::string::npos ? "" : header.substr(p, e - p + 1);
  }
  const size_t e = header.find_first_of(",}", p);
  return e == std::string::npos ? "" : header.substr(p, e - p);
}

// "(3, 4, 5)" or "(3,)" or "()" -> dims; false on anything else.
bool parse_shape(const std::string& text, std::vector<int64_t>& shape) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') return false;
  size_t i = 1;
  while (i + 1 < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == ',')) ++i;
    if (i + 1 >= text.size()) break;
    int64_t v = 0;
    size_t digits = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (v > (int64_t{1} << 40)) return false;
      v = v * 10 + (text[i] - '0');
      ++i, ++digits;
    }
    if (digits == 0) return false;
    shape.push_back(v);
  }
  return true;
}

}  // namespace

Result<NpyArray> read_npy(const std::filesystem::path& path, const std::filesystem::path& within) {
  static_assert(std::endian::native == std::endian::little, "npy: little-endian hosts only");
  const std::string name = path.string();
  Result<std::string> read = read_file(name, {"npy", file_limits::kArray, within.string()});
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  if (bytes.size() < 10 || bytes.compare(0, 6, kMagic, 6) != 0)
    return invalid_argument("npy: '" + name + "' is not a .npy file (bad magic)");
  const auto major = static_cast<uint8_t>(bytes[6]);
  int64_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    header_at = 10;
  } else if (major == 2) {
    if (bytes.size() < 12) return data_loss("npy: '" + name + "' header is truncated");
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[8 + i]);
    header_at = 12;
  } else {
    return invalid_argument(str_cat("npy: '", name, "' has format version ", major,
                                    ", expected 1 or 2"));
  }
  if (header_len > kMaxHeader || header_at + header_len > static_cast<int64_t>(bytes.size()))
    return data_loss(str_cat("npy: '", name, "' header length ", header_len,
                             " runs past the file"));
  const std::string header = bytes.substr(header_at, header_len);
  const std::string descr = dict_value(header, "descr");
  if (descr != "'<f4'")
    return invalid_argument("npy: '" + name + "' has dtype " + (descr.empty() ? "?" : descr) +
                            ", expected '<f4' (little-endian float32)");
  if (dict_value(header, "fortran_order") != "False")
    return invalid_argument("npy: '" + name + "' is Fortran-ordered, expected C order");
  NpyArray a;
  if (!parse_shape(dict_value(header, "shape"), a.shape))
    return invalid_argument("npy: '" + name + "' has an unreadable shape in its header");
  int64_t count = 1;
  for (int64_t d : a.shape)
    if (__builtin_mul_overflow(count, d, &count) || count > (int64_t{1} << 32))
      return invalid_argument("npy: '" + name + "' shape is too large");
  const int64_t have = static_cast<int64_t>(bytes.size()) - header_at - header_len;
  if (have != count * 4)
    return data_loss(str_cat("npy: '", name, "' holds ", have,
                             " data bytes, its shape needs ", count * 4));
  a.data.resize(static_cast<size_t>(count));
  std::memcpy(a.data.data(), bytes.data() + header_at + header_len, static_cast<size_t>(have));
  return a;
}

Status write_npy(const std::filesystem::path& path, std::span<const int64_t> shape,
                 std::span<const float> data) {
  int64_t count = 1;
  std::string dims;  // "3, 4" ; a 1-D shape keeps its comma: "3,"
  for (size_t i = 0; i < shape.size(); ++i) {
    count *= shape[i];
    if (i) dims += ", ";
    dims += str_cat(shape[i]);
  }
  if (shape.size() == 1) dims += ",";
  if (count != static_cast<int64_t>(data.size()))
    return invalid_argument(str_cat("npy: writing '", path.string(), "': ",
                                    data.size(), " floats for a shape of ",
                                    count));
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  f.write(reinterpret_cast<const char*>(data.data()),
          static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!f) return data_loss("npy: writing '" + path.string() + "' failed");
  return ok_status();
}

}  // namespace kvcache::tools
