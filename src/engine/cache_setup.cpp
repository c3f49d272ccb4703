// Cache planning and construction for the engine. See cache_setup.h.
#include "engine/cache_setup.h"

#include <algorithm>
#include <functional>
#include <string>

#include "core/factory.h"
#include "core/str_cat.h"
#include "cpu/cpu_cache.h"
#include "program/model_geometry.h"

namespace kvcache::engine {

namespace {

// The plan at a given capacity (> 0 checked by the caller's messages below).
Result<CacheSetup> plan_at(const ModelGeometry& model, const CacheOptions& o, int64_t capacity) {
  CacheSetup s;
  if (o.kind != kSequenceKind && o.kind != kCellKind)
    return invalid_argument(
        str_cat("cache options: kind = \"", o.kind, "\", expected sequence or cell"));
  s.kind = o.kind;
  ModelGeometry mg = model;
  if (!o.windows.empty()) {
    Result<ModelGeometry> w = with_windows(mg, o.windows);
    if (!w.ok()) return with_context(w.status(), "cache options");
    mg = std::move(*w);
  }
  s.geometry = mg.cache;
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
      model.max_step_tokens > 0 ? model.max_step_tokens : kDefaultStepTokens);
  if (step <= 0)
    return invalid_argument(str_cat("cache options: max_step_tokens = ", step, ", expected > 0"));
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

// A plan for size n (cells or sessions): the plan, or its refusal.
template <class T>
using PlanOf = std::function<Result<T>(int64_t)>;

// The largest n in [lo, hi] whose plan fits `budget` bytes of K/V (bytes grow with n), found by
// bisection (O(log hi) plans). The plan at lo's refusal when it is refused; `lo_bytes` gets
// the bytes at lo, and the result is 0 when those do not fit.
template <class T>
Result<int64_t> largest_within(int64_t lo, int64_t hi, int64_t budget, const PlanOf<T>& plan,
                               const std::function<int64_t(const T&)>& bytes,
                               int64_t& lo_bytes) {
  KVCACHE_ASSIGN_OR_RETURN(T at_lo, plan(lo));
  lo_bytes = bytes(at_lo);
  if (lo_bytes > budget) return int64_t{0};
  while (lo < hi) {  // invariant: lo fits
    const int64_t mid = lo + (hi - lo + 1) / 2;
    Result<T> p = plan(mid);  // a refusal (an overflow) counts as too big
    if (p.ok() && bytes(*p) <= budget) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

std::string type_names(const CacheOptions& o) {
  return str_cat("k_dtype ", to_string(o.k_dtype.value_or(o.kv_dtype)), ", v_dtype ",
                 to_string(o.v_dtype.value_or(o.kv_dtype)));
}

}  // namespace

int64_t kv_bytes(const CacheSetup& s) {
  return kv_bytes_at_capacity(s.kind, s.geometry, s.config).value_or(0);
}

Result<CacheSetup> plan_cache(const ModelGeometry& model, int64_t context,
                              const CacheOptions& o) {
  if (!o.kv_memory) return plan_at(model, o, o.capacity.value_or(default_capacity(context)));
  if (*o.kv_memory <= 0)
    return invalid_argument(str_cat("cache options: kv_memory = ", *o.kv_memory,
                                    ", expected > 0 bytes"));
  if (o.capacity)
    return invalid_argument(str_cat("cache options: capacity = ", *o.capacity, " and kv_memory = ",
                                    *o.kv_memory, " are both set; give one"));
  const int64_t hi = context > 0 ? std::min(context, kMaxCapacity) : kMaxCapacity;
  const PlanOf<CacheSetup> plan = [&](int64_t n) { return plan_at(model, o, n); };
  int64_t smallest = 0;
  KVCACHE_ASSIGN_OR_RETURN(int64_t capacity,
                           largest_within<CacheSetup>(1, hi, *o.kv_memory, plan, kv_bytes,
                                                      smallest));
  if (capacity == 0)
    return resource_exhausted(str_cat("cache options: kv_memory = ", *o.kv_memory,
                                      " bytes holds no cache: capacity 1 (", o.kind, " layout, ",
                                      type_names(o), ") needs ", smallest, " bytes of K/V"));
  Result<CacheSetup> setup = plan(capacity);
  if (setup.ok()) setup->kv_memory = o.kv_memory;
  return setup;
}

Result<CacheSetup> plan_cache(const Model& model, const CacheOptions& options) {
  return plan_cache(model.geometry(), model_context(model), options);
}

Result<SessionPlan> plan_session_pool(const ModelGeometry& model, int64_t context,
                                      const CacheOptions& options, const SessionPool& pool) {
  const bool budget = pool.kv_memory.has_value();
  if (!budget && (pool.max_sessions < 1 || pool.max_sessions > kMaxPoolSessions))
    return invalid_argument(str_cat("session pool: max_sessions = ", pool.max_sessions,
                                    ", expected 1..", kMaxPoolSessions));
  if (pool.retained_seqs < 0)
    return invalid_argument(str_cat("session pool: retained_seqs = ", pool.retained_seqs,
                                    ", expected >= 0"));
  const int64_t tokens =
      pool.max_session_tokens == 0 ? default_capacity(context) : pool.max_session_tokens;
  if (tokens < 1)
    return invalid_argument(str_cat("session pool: max_session_tokens = ", tokens,
                                    ", expected > 0"));
  if (context > 0 && tokens > context)
    return invalid_argument(str_cat("session pool: max_session_tokens = ", tokens,
                                    " is above the model's max_context ", context));
  if (budget && *pool.kv_memory <= 0)
    return invalid_argument(str_cat("session pool: kv_memory = ", *pool.kv_memory,
                                    ", expected > 0 bytes"));
  if (budget && pool.pool_cells)
    return invalid_argument(str_cat("session pool: pool_cells = ", *pool.pool_cells,
                                     " and kv_memory = ", *pool.kv_memory,
                                     " are both set; give one"));
  const PlanOf<SessionPlan> plan = [&](int64_t sessions) -> Result<SessionPlan> {
    std::optional<int64_t> cells = pool.pool_cells;
    if (!cells) {
      cells = checked_mul(sessions, tokens);
      if (!cells || *cells > kMaxCapacity)
        return invalid_argument(str_cat("session pool: max_sessions * max_session_tokens = ",
                                        sessions, " * ", tokens,
                                        " overflows the pool's cell count (at most 2^31 - 1)"));
    }
    if (*cells < tokens || *cells > kMaxCapacity)
      return invalid_argument(str_cat("session pool: pool_cells = ", *cells, ", expected in [",
                                      tokens, " (max_session_tokens), 2^31 - 1]"));
    CacheOptions co = options;
    co.kind = std::string(kCellKind);
    co.capacity = *cells;
    co.kv_memory.reset();
    co.max_seqs = static_cast<int32_t>(
        std::min<int64_t>(2 * sessions + pool.retained_seqs, kDefaultCellSeqs));
    KVCACHE_ASSIGN_OR_RETURN(CacheSetup setup, plan_at(model, co, *cells));
    return SessionPlan{std::move(setup), static_cast<int32_t>(sessions), tokens};
  };
  if (!budget) return plan(pool.max_sessions);
  int64_t one = 0;
  KVCACHE_ASSIGN_OR_RETURN(
      int64_t sessions,
      largest_within<SessionPlan>(1, kMaxPoolSessions, *pool.kv_memory, plan,
                                  [](const SessionPlan& p) { return kv_bytes(p.setup); }, one));
  if (sessions == 0)
    return resource_exhausted(str_cat("session pool: kv_memory = ", *pool.kv_memory,
                                      " bytes holds no session: one session of ", tokens,
                                      " tokens (", type_names(options), ") needs ", one,
                                      " bytes of K/V"));
  Result<SessionPlan> out = plan(sessions);
  if (out.ok()) out->setup.kv_memory = pool.kv_memory;
  return out;
}

Result<SessionPlan> plan_session_pool(const Model& model, const CacheOptions& options,
                                      const SessionPool& pool) {
  return plan_session_pool(model.geometry(), model_context(model), options, pool);
}

int64_t model_context(const Model& model) {
  const int64_t max_context = model.geometry().max_context;
  return max_context > 0 ? max_context : std::max<int64_t>(model.hparams().context_length, 0);
}

int64_t default_capacity(int64_t context) {
  return context > 0 ? std::min(context, kDefaultCapacity) : kDefaultCapacity;
}

int64_t default_capacity(const Model& model) { return default_capacity(model_context(model)); }

Result<std::shared_ptr<Cache>> build_cache(const CacheSetup& setup) {
  KVCACHE_RETURN_IF_ERROR(cpu::register_builders());
  return CacheFactory::global().build(kCpuBackend, setup.kind, setup.geometry, setup.config);
}

}  // namespace kvcache::engine
