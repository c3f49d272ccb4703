// The cpu byte layer's caches: K/V pools per cache layer behind the core layouts, and the
// builders the factory uses for ("cpu", "sequence") and ("cpu", "cell"). Layer: cpu.
// make_cpu_cache() builds one directly with kernel options (tests and benchmarks use it to
// pin the instruction set, the thread pool or the reference kernel).
#pragma once

#include <memory>
#include <string_view>

#include "core/cache.h"
#include "core/factory.h"
#include "cpu/attention.h"
#include "cpu/thread_pool.h"

namespace kvcache::cpu {

// Registers both cpu builders with `factory` (default: the global one). Idempotent: a second
// call finds them registered and returns ok.
Status register_builders(CacheFactory& factory = CacheFactory::global());

struct CpuCacheOptions {
  Isa isa = Isa::kAuto;           // must be supported (cpu/isa.h: CPU and ceilings)
  bool reference_kernel = false;  // attend with attend_reference() (slow; for tests)
  ThreadPool* pool = nullptr;     // nullptr = global_pool() at each call; else must outlive
};

// kind is kSequenceKind or kCellKind. InvalidArgument with the validation reason; NotFound
// for another kind.
Result<std::shared_ptr<Cache>> make_cpu_cache(std::string_view kind, const CacheGeometry& geometry,
                                              const CacheConfig& config,
                                              const CpuCacheOptions& options = {});

}  // namespace kvcache::cpu
