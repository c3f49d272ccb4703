// Stub used when models/tiny.gguf was absent at configure time: nothing is embedded.
#include "engine/embedded_model.h"

namespace kvcache::engine {

std::span<const uint8_t> embedded_model() { return {}; }

}  // namespace kvcache::engine
