// A small NumPy .npy reader/writer for float32 arrays: little-endian '<f4', C order, format
// versions 1.0 and 2.0. Layer: tools (op-test). Anything else is refused with a message that
// names the file and what was expected. Sizes are checked against the file before allocating.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvcache::tools {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) elements
};

// NotFound when the file is missing; InvalidArgument for another dtype, Fortran order or a
// bad header, or when the file is no regular file inside `within` (empty: anywhere) or is
// larger than file_limits::kArray (program/file_bytes.h); DataLoss when the data is shorter or
// longer than the shape says.
Result<NpyArray> read_npy(const std::filesystem::path& path,
                          const std::filesystem::path& within = {});
// Version 1.0, '<f4', C order. InvalidArgument when data.size() != product(shape).
Status write_npy(const std::filesystem::path& path, std::span<const int64_t> shape,
                 std::span<const float> data);

}  // namespace kvcache::tools
