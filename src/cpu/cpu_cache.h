// The cpu byte layer's caches: K/V pools per cache layer behind the core layouts, and the
// builders the factory uses for ("cpu", "sequence") and ("cpu", "cell"). Layer: cpu.
#pragma once

#include <memory>

#include "core/cache.h"
#include "core/factory.h"

namespace kvcache::cpu {

// Registers both cpu builders with `factory` (default: the global one). Idempotent: a second
// call finds them registered and returns ok.
Status register_builders(CacheFactory& factory = CacheFactory::global());

}  // namespace kvcache::cpu
