// Reading files the tools are handed, safely: the one home for "a regular file, inside its
// allowed place, size-capped before reading". Layer: program. FileBytes maps a model file
// (GGUF, safetensors), reads one into huge pages, or copies bytes the caller holds (fuzzing,
// tests); read_file reads a small file (JSON, .npy) whole. Both refuse directories, FIFOs,
// devices and sockets by name and never block opening them; with `within` set, a path (or
// symlink) resolving outside that directory is refused. Neither interprets the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvcache {

// Size caps, one table for every kind of file the tools open.
namespace file_limits {
inline constexpr uint64_t kJson = uint64_t{16} << 20;           // config.json, index, case.json
inline constexpr uint64_t kTokenizerJson = uint64_t{256} << 20;  // large vocabularies: ~35 MB
inline constexpr uint64_t kArray = uint64_t{1} << 30;           // an op-test .npy array
inline constexpr uint64_t kModel = uint64_t{1} << 40;           // GGUF / safetensors (mapped)
}  // namespace file_limits

// What a file is for and where it may be.
struct FileRule {
  std::string_view what;  // message prefix: "gguf", "config.json", "npy", ...
  uint64_t max_bytes = file_limits::kJson;
  std::string within;     // non-empty: the file's real path must lie inside this directory
};

// The whole file. NotFound when missing; InvalidArgument when it is not a regular file, lies
// outside `rule.within` or is larger than `rule.max_bytes` (checked before reading).
Result<std::string> read_file(const std::string& path, const FileRule& rule);

class FileBytes {
 public:
  // Errors as read_file; messages start with `rule.what` and name the path.
  static Result<FileBytes> map(const std::string& path, const FileRule& rule);
  static Result<FileBytes> map(const std::string& path, std::string_view what) {
    return map(path, FileRule{what, file_limits::kModel, ""});
  }
  // The file's bytes read into anonymous memory that starts on a 2 MiB boundary and is
  // advised to the kernel as huge pages (cpu/huge_pages.h), unchanged otherwise: the same
  // resident size as a mapping, but a stream over it walks one page-table entry per 2 MiB, not
  // per 4 KiB (decode reads every weight once a token: 1.1-1.26x the tokens/s of the mapped
  // file on this project's benchmark files). This is map() where the kernel has no
  // transparent huge pages (Linux's /sys/kernel/mm/transparent_hugepage/enabled absent or
  // "never") and where the copy does not fit (copy_fits): a file that is paged in on demand
  // must stay a mapping, or a model near the machine's memory would be killed for memory
  // instead of running slowly. Errors as map(), plus DataLoss when reading fails and
  // ResourceExhausted when memory runs out.
  static Result<FileBytes> read_huge(const std::string& path, const FileRule& rule);
  // Whether read_huge copies a file of `file_bytes`: at most half of the memory the kernel
  // reports available (the page cache keeps the file's pages too, until it needs them);
  // never when that figure is unknown.
  static bool copy_fits(uint64_t file_bytes, std::optional<uint64_t> available);
  // MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
  static std::optional<uint64_t> available_memory();
  static FileBytes copy(std::span<const uint8_t> bytes);

  std::span<const uint8_t> bytes() const { return bytes_; }

  FileBytes(FileBytes&& other) noexcept;
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

 private:
  FileBytes() = default;
  void release();
  std::vector<uint8_t> owned_;  // copy(): our bytes
  void* map_ = nullptr;  // map() / read_huge(): the whole mapping; nullptr for empty or copy
  size_t map_size_ = 0;
  std::span<const uint8_t> bytes_;
};

}  // namespace kvcache
