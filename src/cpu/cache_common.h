// Internal to the cpu caches: pieces both layouts share — building a cache over its layout,
// the step checks, writing a step's K/V, running the chosen kernel and the KeySet of the slot
// runs a layout computed (no ring or window arithmetic here: the layouts own it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/sequence_layout.h"
#include "core/str_cat.h"
#include "cpu/attention.h"
#include "cpu/cpu_cache.h"
#include "cpu/hadamard.h"
#include "cpu/kv_pool.h"

namespace kvcache::cpu::detail {

// A cache of type C over the layout L::create(g, c) validated, then C::init() (the pools).
template <class C, class L>
Result<std::shared_ptr<Cache>> make_cache(const CacheGeometry& g, const CacheConfig& c,
                                          const CpuCacheOptions& options) {
  Result<L> layout = L::create(g, c);
  if (!layout.ok()) return layout.status();
  auto cache = std::make_shared<C>(std::move(layout).value(), options);
  KVCACHE_RETURN_IF_ERROR(cache->init());
  return std::shared_ptr<Cache>(std::move(cache));
}

// The kernel calls' protocol check common to both layouts: a step is declared and the call
// has as many tokens as it declared.
inline Status check_declared(const AttendArgs& a, AttendOp op, bool step_open,
                             int64_t declared) {
  if (!step_open)
    return failed_precondition(attend_context(a.layer, op) +
                               "no declared step (call declare_step first)");
  if (a.n_tokens != declared)
    return invalid_argument(str_cat(attend_context(a.layer, op), "n_tokens = ", a.n_tokens,
                                    ", expected the declared ", declared));
  return ok_status();
}

// Writes token i's K and V of the call into row row_of(i) of the layer's pool; `rotate`:
// each head's rows rotated first (hadamard.h), so the pool holds H k and H v.
template <class RowOf>
void write_tokens(LayerPool& pool, const LayerGeometry& l, const AttendArgs& a, RowOf row_of,
                  bool rotate) {
  const int64_t kw = int64_t{l.kv_heads} * l.head_dim, vw = int64_t{l.kv_heads} * l.value_dim;
  thread_local std::vector<float> k, v;
  for (int32_t i = 0; i < a.n_tokens; ++i) {
    const float* ki = a.k.data() + i * kw;
    const float* vi = a.v.data() + i * vw;
    if (rotate) {
      k.assign(ki, ki + kw);
      v.assign(vi, vi + vw);
      hadamard_rows(k.data(), l.kv_heads, l.head_dim);
      hadamard_rows(v.data(), l.kv_heads, l.value_dim);
      ki = k.data(), vi = v.data();
    }
    pool.write(row_of(i), ki, vi);
  }
}

inline int64_t pools_bytes(const std::vector<LayerPool>& pools) {
  int64_t total = 0;
  for (const LayerPool& p : pools) total += p.bytes();
  return total;
}

inline void run_kernel(const CpuCacheOptions& o, const AttentionProblem& p) {
  if (o.reference_kernel) return attend_reference(p);
  attend(p, o.pool != nullptr ? *o.pool : global_pool(), o.isa);
}

// run_kernel over a rotated pool: the query rotated alike (q . k unchanged), the output
// (a mix of rotated values) rotated back in place.
inline void run_kernel(const CpuCacheOptions& o, AttentionProblem p, bool rotate) {
  if (!rotate) return run_kernel(o, p);
  thread_local std::vector<float> q;
  const int64_t rows = int64_t{p.n_tokens} * p.q_heads;
  q.assign(p.q, p.q + rows * p.kv.head_dim);
  hadamard_rows(q.data(), rows, p.kv.head_dim);
  p.q = q.data();
  run_kernel(o, p);
  hadamard_rows(p.out, rows, p.kv.value_dim);
}

// The KeySet of the slot runs a sequence layout computed (SequenceLayout::visible).
inline KeySet keys_of(const SlotRuns& r) {
  KeySet ks;
  ks.n_runs = r.n;
  for (int32_t i = 0; i < r.n; ++i) {
    ks.run_begin[i] = r.runs[i].begin;
    ks.run_size[i] = r.runs[i].size();
  }
  return ks;
}

inline AttentionProblem make_problem(const AttendArgs& a, const LayerPool& pool,
                                     const std::vector<KeySet>& keys) {
  AttentionProblem p;
  p.n_tokens = a.n_tokens;
  p.q_heads = a.q_heads;
  p.q = a.q.data();
  p.out = a.out.data();
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.sinks = a.sinks.empty() ? nullptr : a.sinks.data();
  p.kv = pool.view();
  p.keys = keys;
  return p;
}

}  // namespace kvcache::cpu::detail
