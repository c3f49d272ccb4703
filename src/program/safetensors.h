// Safetensors checkpoints (Hugging Face): an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}}, then the data. Layer: program. Single files are
// memory-mapped; a directory may instead hold model.safetensors.index.json naming shards.
// Every offset is checked against the data section before use; only F32/F16/BF16 convert.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace kvcache::safetensors {

struct TensorView {
  std::string name;
  std::string dtype;            // as the header spells it: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;   // torch order (slowest first)
  std::span<const uint8_t> bytes;  // into the file; valid while the file lives
  int64_t n_elements() const;
};

// One .safetensors file. Thread-safety: immutable after open; concurrent reads are safe.
class SafetensorsFile {
 public:
  // NotFound when missing; DataLoss for truncation/out-of-range offsets; InvalidArgument for
  // a malformed header (bad JSON, wrong field types, size mismatch).
  // With `within` set, a path resolving outside that directory is refused (FileRule).
  static Result<SafetensorsFile> open(const std::string& path, const std::string& within = "");
  static Result<SafetensorsFile> parse(std::span<const uint8_t> bytes);  // copies the bytes

  const std::vector<TensorView>& tensors() const;
  const TensorView* find(std::string_view name) const;  // nullptr when absent

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A tensor converted to float32 (F32, F16, BF16); InvalidArgument for other dtypes.
Result<std::vector<float>> to_f32(const TensorView& t);

// A checkpoint directory: model.safetensors, or model.safetensors.index.json whose
// "weight_map" names the shard (a plain file name inside the directory) of each tensor.
// Every file must be a regular file resolving inside the directory (no escaping symlinks).
class Checkpoint {
 public:
  static Result<Checkpoint> open(const std::string& dir);
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  std::vector<std::string> names() const;               // sorted
  const std::vector<std::string>& paths() const { return paths_; }  // every file read

 private:
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> paths_;
  std::unordered_map<std::string, const TensorView*> index_;
};

}  // namespace kvcache::safetensors
