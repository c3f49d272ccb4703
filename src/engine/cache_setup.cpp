// Cache planning and construction for the engine. See cache_setup.h.
#include "engine/cache_setup.h"

#include <algorithm>
#include <string>

#include "core/factory.h"
#include "core/str_cat.h"
#include "cpu/cpu_cache.h"

namespace kvcache::engine {

Status apply_window_override(CacheGeometry& geometry, std::span<const int32_t> windows) {
  if (windows.empty())
    return invalid_argument(
        "cache options: windows = {}, expected a non-empty list, e.g. {0, 512} (0 = Full)");
  for (size_t i = 0; i < windows.size(); ++i)
    if (windows[i] < 0)
      return invalid_argument(str_cat("cache options: windows[", i, "] = ", windows[i],
                                      ", expected >= 0 (0 = Full)"));
  for (size_t i = 0; i < geometry.layers.size(); ++i)
    geometry.layers[i].window = windows[i % windows.size()];
  return ok_status();
}

Result<CacheSetup> plan_cache(const Model& model, const CacheOptions& o) {
  CacheSetup s;
  if (o.kind != kSequenceKind && o.kind != kCellKind)
    return invalid_argument(
        str_cat("cache options: kind = \"", o.kind, "\", expected sequence or cell"));
  s.kind = o.kind;
  s.geometry = model.geometry().cache;
  if (!o.windows.empty()) KVCACHE_RETURN_IF_ERROR(apply_window_override(s.geometry, o.windows));
  int64_t max_context = model.geometry().max_context;
  if (max_context <= 0) max_context = model.hparams().context_length;
  const int64_t capacity =
      o.capacity.value_or(max_context > 0 ? std::min(max_context, kDefaultCapacity)
                                          : kDefaultCapacity);
  if (capacity <= 0)
    return invalid_argument(str_cat("cache options: capacity = ", capacity, ", expected > 0"));
  if (o.initial_capacity < 0)
    return invalid_argument(str_cat("cache options: initial_capacity = ", o.initial_capacity,
                                    ", expected >= 0"));
  int64_t step = o.max_step_tokens.value_or(
      model.geometry().max_step_tokens > 0 ? model.geometry().max_step_tokens
                                           : kDefaultStepTokens);
  if (step <= 0)
    return invalid_argument(str_cat("cache options: max_step_tokens = ", step, ", expected > 0"));
  for (const LayerGeometry& l : s.geometry.layers)
    if (l.sliding()) step = std::min<int64_t>(step, l.window);
  step = std::min({step, capacity, int64_t{1} << 30});
  s.step_tokens = step;
  s.config.capacity = capacity;
  s.config.kv_dtype = o.kv_dtype;
  s.config.initial_capacity = o.initial_capacity;
  s.config.max_write = static_cast<int32_t>(step);
  KVCACHE_RETURN_IF_ERROR(validate(s.geometry, s.config, "run cache"));
  return s;
}

Result<std::shared_ptr<Cache>> build_cache(const CacheSetup& setup) {
  KVCACHE_RETURN_IF_ERROR(cpu::register_builders());
  return CacheFactory::global().build(kCpuBackend, setup.kind, setup.geometry, setup.config);
}

}  // namespace kvcache::engine
