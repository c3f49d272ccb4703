// Cache planning and construction for the engine. See cache_setup.h.
#include "engine/cache_setup.h"

#include <algorithm>
#include <string>

#include "core/factory.h"
#include "core/str_cat.h"
#include "cpu/cpu_cache.h"
#include "program/model_geometry.h"

namespace kvcache::engine {

Result<CacheSetup> plan_cache(const Model& model, const CacheOptions& o) {
  CacheSetup s;
  if (o.kind != kSequenceKind && o.kind != kCellKind)
    return invalid_argument(
        str_cat("cache options: kind = \"", o.kind, "\", expected sequence or cell"));
  s.kind = o.kind;
  ModelGeometry mg = model.geometry();
  if (!o.windows.empty()) {
    Result<ModelGeometry> w = with_windows(mg, o.windows);
    if (!w.ok()) return with_context(w.status(), "cache options");
    mg = std::move(*w);
  }
  s.geometry = mg.cache;
  const int64_t capacity = o.capacity.value_or(default_capacity(model));
  if (capacity <= 0)
    return invalid_argument(str_cat("cache options: capacity = ", capacity, ", expected > 0"));
  if (o.initial_capacity < 0)
    return invalid_argument(str_cat("cache options: initial_capacity = ", o.initial_capacity,
                                    ", expected >= 0"));
  if (o.max_seqs && *o.max_seqs < 1)
    return invalid_argument(str_cat("cache options: max_seqs = ", *o.max_seqs, ", expected >= 1"));
  if (o.max_seqs && o.kind != kCellKind)
    return invalid_argument(str_cat("cache options: max_seqs = ", *o.max_seqs,
                                    " applies to the cell kind only (kind = ", o.kind, ")"));
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
  s.config.k_dtype = o.k_dtype;
  s.config.v_dtype = o.v_dtype;
  s.config.kv_rotate = o.kv_rotate;
  s.config.initial_capacity = o.initial_capacity;
  s.config.max_write = static_cast<int32_t>(step);
  s.config.max_seqs = o.max_seqs;
  KVCACHE_RETURN_IF_ERROR(validate(s.geometry, s.config, "run cache"));
  return s;
}

int64_t model_context(const Model& model) {
  const int64_t max_context = model.geometry().max_context;
  return max_context > 0 ? max_context : std::max<int64_t>(model.hparams().context_length, 0);
}

int64_t default_capacity(const Model& model) {
  const int64_t context = model_context(model);
  return context > 0 ? std::min(context, kDefaultCapacity) : kDefaultCapacity;
}

Result<std::shared_ptr<Cache>> build_cache(const CacheSetup& setup) {
  KVCACHE_RETURN_IF_ERROR(cpu::register_builders());
  return CacheFactory::global().build(kCpuBackend, setup.kind, setup.geometry, setup.config);
}

}  // namespace kvcache::engine
