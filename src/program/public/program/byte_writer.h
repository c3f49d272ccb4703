// ByteWriter: appends fixed-width values, raw bytes and length-prefixed strings to a byte
// vector in the host's byte order. Layer: program; the one encoder behind the GGUF writer, the
// model fingerprint's record and the engine's snapshot header. The hosts kvcache builds for are
// little-endian, which every format written this way specifies. It does no I/O and no checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvcache::program {

class ByteWriter {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
  }
  void put_bytes(const void* p, size_t n) {
    if (n == 0) return;
    const auto* b = static_cast<const uint8_t*>(p);
    bytes_.insert(bytes_.end(), b, b + n);
  }
  // A uint64 byte count, then the bytes (GGUF's string form).
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  // Zero bytes up to the next multiple of `alignment` (> 0).
  void pad_to(uint64_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_.push_back(0);
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace kvcache::program
