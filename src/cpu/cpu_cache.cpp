// Factory registration and direct construction of the cpu caches.
#include "cpu/cpu_cache.h"

#include <string>

#include "cpu/caches.h"

namespace kvcache::cpu {

Result<std::shared_ptr<Cache>> make_cpu_cache(std::string_view kind, const CacheGeometry& g,
                                              const CacheConfig& c,
                                              const CpuCacheOptions& options) {
  KVCACHE_RETURN_IF_ERROR(validate(g, c, "cpu cache"));
  if (!isa_supported(options.isa))
    return invalid_argument("cpu cache: isa " + std::string(to_string(options.isa)) +
                            " requested, above what this CPU and the ISA ceiling allow");
  if (kind == kSequenceKind) return make_sequence_cache(g, c, options);
  if (kind == kCellKind) return make_cell_cache(g, c, options);
  return not_found("cpu cache: kind '" + std::string(kind) + "', expected '" +
                   std::string(kSequenceKind) + "' or '" + std::string(kCellKind) + "'");
}

Status register_builders(CacheFactory& factory) {
  for (std::string_view kind : {kSequenceKind, kCellKind}) {
    Status s = factory.add(kCpuBackend, kind,
                           [kind](const CacheGeometry& g, const CacheConfig& c) {
                             return make_cpu_cache(kind, g, c);
                           });
    // A duplicate means an earlier call registered it: that is the idempotent case.
    if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) return s;
  }
  return ok_status();
}

}  // namespace kvcache::cpu
