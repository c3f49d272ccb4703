// Read-only bytes of a model file: memory-mapped from disk, or a copy of bytes the caller
// holds (fuzzing, tests). Layer: program. Shared by the GGUF and safetensors readers so both
// open files the same way. Move-only; the bytes stay valid while the object lives.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvcache {

class FileBytes {
 public:
  // NotFound when the file is missing; InvalidArgument when it is not a regular file or cannot
  // be mapped. Messages start with `what` ("gguf", "safetensors") and name the path.
  static Result<FileBytes> map(const std::string& path, std::string_view what);
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
  void* map_ = nullptr;         // map(): the mapping; nullptr for an empty file or a copy
  size_t map_size_ = 0;
  std::span<const uint8_t> bytes_;
};

}  // namespace kvcache
