// Internal to the cpu caches: pieces both layouts share — building the pools, running the
// chosen kernel and the KeySet of a contiguous position range in a (possibly ring) layer.
#pragma once

#include <vector>

#include "cpu/attention.h"
#include "cpu/cpu_cache.h"
#include "cpu/kv_pool.h"

namespace kvcache::cpu::detail {

inline void run_kernel(const CpuCacheOptions& o, const AttentionProblem& p) {
  if (o.reference_kernel) return attend_reference(p);
  attend(p, o.pool != nullptr ? *o.pool : global_pool(), o.isa);
}

// Positions [lo, hi] (inclusive) of a layer whose position p lives in row p mod slots.
inline KeySet ring_keys(int64_t lo, int64_t hi, int64_t slots) {
  KeySet ks;
  const int64_t n = hi - lo + 1, b = lo % slots;
  ks.run_begin[0] = b;
  if (b + n <= slots) {
    ks.run_size[0] = n;
    ks.n_runs = 1;
  } else {
    ks.run_size[0] = slots - b;
    ks.run_begin[1] = 0;
    ks.run_size[1] = n - (slots - b);
    ks.n_runs = 2;
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
  p.kv = pool.view();
  p.keys = keys;
  return p;
}

}  // namespace kvcache::cpu::detail
