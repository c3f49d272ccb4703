// GGUF v3 model files: a bounds-checked, memory-mapped reader and a writer. Layer: program.
// The reader caps every count and length before allocating and refuses hostile files with a
// DataLoss/InvalidArgument Status naming the offset, key or tensor. It knows nothing of the
// cache; model_geometry.h turns metadata into a geometry.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"

namespace kvcache::gguf {

// Metadata value types, as numbered by the GGUF spec.
enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view to_string(ValueType type);

// Tensor types, numbered as ggml numbers them. The reader accepts every number: it places the
// data of the types listed here (their block sizes are known, gguf_quant.h) and leaves the
// bytes of any other number empty, so metadata tools never refuse a file for its tensor types;
// consumers (the engine loader) refuse what they cannot compute with, naming the type.
enum class TensorType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kIQ2_XXS = 16,
  kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22,
  kIQ4_XS = 23, kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39,
};
// The ggml name ("Q4_K"); "unknown(N)" for a number not listed above.
std::string to_string(TensorType type);

// One metadata value. Scalars of every integer width are held as int64_t/uint64_t; arrays
// hold their element type and elements (nested arrays allowed).
struct Value {
  ValueType type = ValueType::kUint8;
  ValueType elem_type = ValueType::kUint8;  // kArray only
  std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<Value>> data;
};

// Value builders (added): the variant alternative follows the type (signed -> int64_t,
// unsigned -> uint64_t, floats -> double). array_value sets every element's type to `elem`.
Value int_value(ValueType type, int64_t v);      // kInt8..kInt64 (also kUint* from >= 0)
Value uint_value(ValueType type, uint64_t v);    // kUint8..kUint64
Value float_value(ValueType type, double v);     // kFloat32 / kFloat64
Value bool_value(bool v);
Value string_value(std::string v);
Value array_value(ValueType elem, std::vector<Value> elements);

// Bytes a tensor of this type and element count takes; nullopt when `n` does not fill whole
// blocks (Q8_0: 32 elements per 34-byte block), on overflow, or for a type of unknown size.
std::optional<uint64_t> tensor_bytes(TensorType type, int64_t n);

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the fastest-varying (row length)
  uint64_t offset = 0;        // from the start of the data section
  // Into the mapped file; valid while the GgufFile or a holder of storage() lives. Empty for
  // a type whose block size is unknown (see TensorType).
  std::span<const uint8_t> bytes;
  int64_t n_elements() const;
};

// Thread-safety: immutable after open; concurrent reads are safe.
class GgufFile {
 public:
  // Where open() puts the file's bytes: mapped in place (what reading metadata wants), or
  // read into huge pages (what a model that streams its weights every token wants; see
  // FileBytes::read_huge).
  enum class Placement { kMapped, kHugePages };
  // Opens the file. NotFound when missing; DataLoss/InvalidArgument for malformed content.
  static Result<GgufFile> open(const std::string& path, Placement placement = Placement::kMapped);
  // Parses bytes held by the caller (fuzzing, tests); the bytes are copied.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes);

  uint32_t version() const;
  uint64_t alignment() const;
  const std::vector<std::pair<std::string, Value>>& metadata() const;
  const Value* find(std::string_view key) const;  // nullptr when absent
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* tensor(std::string_view name) const;  // nullptr when absent

  // Typed getters: NotFound when absent, InvalidArgument naming key and actual type when the
  // type does not fit. get_int accepts every integer type; get_float accepts floats and ints.
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;

  // A tensor converted to float32 (F32, F16, BF16 and the block types gguf_quant.h decodes),
  // row-major with dims reversed (i.e. the usual [rows, cols] view of a ggml [cols, rows]
  // tensor). NotFound when absent; InvalidArgument naming tensor and type for other types.
  Result<std::vector<float>> tensor_f32(std::string_view name) const;

  // Shared ownership of the bytes every TensorInfo::bytes points into (the mapping, or the
  // parsed copy): holders keep tensor data valid after the GgufFile itself is gone.
  std::shared_ptr<const void> storage() const;

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds a GGUF v3 file in memory or on disk. Values and tensors are written in insertion
// order; tensor data is aligned to `alignment` (general.alignment is written when != 32).
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32);
  void set(std::string key, Value value);  // replaces an earlier value of the same key
  void set_int32(std::string key, int32_t v);
  void set_uint32(std::string key, uint32_t v);
  void set_float32(std::string key, float v);
  void set_string(std::string key, std::string v);
  void set_bool(std::string key, bool v);
  void set_int32_array(std::string key, std::span<const int32_t> v);
  void set_float32_array(std::string key, std::span<const float> v);
  void set_string_array(std::string key, std::span<const std::string> v);
  // dims in ggml order; `data` must hold exactly the bytes of that shape and type.
  Status add_tensor(std::string name, TensorType type, std::vector<int64_t> dims,
                    std::vector<uint8_t> data);
  Status add_tensor_f32(std::string name, std::vector<int64_t> dims, std::span<const float> data,
                        TensorType store_as = TensorType::kF32);  // converts to F16/BF16
  std::vector<uint8_t> bytes() const;
  Status write(const std::string& path) const;

 private:
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  std::vector<PendingTensor> tensors_;
};

}  // namespace kvcache::gguf
