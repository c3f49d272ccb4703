// The tiny default model (models/tiny.gguf) embedded in the binary at build time, so
// `kvcache run` works with no model file. Layer: engine. Empty when the build found no file.
#pragma once

#include <cstdint>
#include <span>

namespace kvcache::engine {

// The GGUF bytes; valid for the process lifetime. Empty when none was embedded.
std::span<const uint8_t> embedded_model();

}  // namespace kvcache::engine
