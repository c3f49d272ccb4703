// Internal to the cpu layer: constructors of the two cache classes (their definitions live in
// sequence_cache.cpp and cell_cache.cpp; callers use make_cpu_cache or the factory).
#pragma once

#include <memory>

#include "cpu/cpu_cache.h"

namespace kvcache::cpu {

Result<std::shared_ptr<Cache>> make_sequence_cache(const CacheGeometry& g, const CacheConfig& c,
                                                   const CpuCacheOptions& options);
Result<std::shared_ptr<Cache>> make_cell_cache(const CacheGeometry& g, const CacheConfig& c,
                                               const CpuCacheOptions& options);

}  // namespace kvcache::cpu
