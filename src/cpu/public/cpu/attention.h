// Attention over a layer's stored K/V: the problem description the caches build, the readable
// reference kernel and the optimized kernel (SIMD picked at run time, online softmax, threads).
// Layer: cpu. A query visits only the keys in its KeySet; nothing else is read.
// Shapes (row-major f32): q [T, q_heads, head_dim], out [T, q_heads, value_dim]. Query head h
// uses kv head h / (q_heads / kv_heads).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/cache.h"
#include "cpu/isa.h"
#include "cpu/kv_pool.h"
#include "cpu/thread_pool.h"

namespace kvcache::cpu {

// The rows one query sees, oldest first: a list of cells (cell layout) or up to two runs of
// contiguous rows (sequence layout; two when a ring wraps).
struct KeySet {
  std::span<const int32_t> cells;  // used when n_runs == 0
  int64_t run_begin[2] = {0, 0};
  int64_t run_size[2] = {0, 0};
  int32_t n_runs = 0;

  int64_t size() const {
    return n_runs == 0 ? static_cast<int64_t>(cells.size()) : run_size[0] + run_size[1];
  }
  // Row of the j-th key (0 <= j < size()).
  int64_t row(int64_t j) const {
    if (n_runs == 0) return cells[static_cast<size_t>(j)];
    return j < run_size[0] ? run_begin[0] + j : run_begin[1] + (j - run_size[0]);
  }
};

struct AttentionProblem {
  int32_t n_tokens = 0;  // T
  int32_t q_heads = 0;   // a positive multiple of kv.kv_heads
  const float* q = nullptr;
  float* out = nullptr;
  float scale = 1.0f;
  float softcap = 0.0f;       // 0 = none
  KvView kv;
  std::span<const KeySet> keys;  // one per token, each non-empty
  const float* sinks = nullptr;  // q_heads sink logits (AttendArgs::sinks); nullptr = none
};

// Double accumulation, two-pass softmax, one query head at a time. Single-threaded.
void attend_reference(const AttentionProblem& p);

// Normalizes one head's online-softmax state (running max m, sum l of exp(logit - m), acc of
// dv weighted values) into out, the sink logit (when `sink` is given) joining the denominator:
// out = acc * e^(m - m') / (l * e^(m - m') + e^(sink - m')), m' = max(m, sink). Every
// optimized path ends a head here, so the sink term has one home.
void finish_head(float m, double l, const float* acc, int32_t dv, const float* sink, float* out);

// Optimized kernel; `isa` is resolved by cpu/isa.h (KernelFamily::kFloat): kAuto or a level
// this CPU lacks runs the best supported one. Splits work over (token, kv head) and, when that
// gives too few tasks for the pool, over the key range too.
void attend(const AttentionProblem& p, ThreadPool& pool, Isa isa = Isa::kAuto);
// The level attend(…, isa) runs now (never kAuto): the one choice its dispatch makes.
Isa attend_isa(Isa isa = Isa::kAuto);

// Tokens whose key sets start with the same rows (forks, prefix hits, one prefill chunk, in
// either layout) read those rows once per group (attention_shared.cpp). On by default; a process-wide switch
// so benchmarks can measure what it saves. Set it only while no kernel runs.
void set_shared_prefix_attention(bool on);
bool shared_prefix_attention();

// The two calls of the kernel face (CacheKernel): write then attend, or attend only.
enum class AttendOp { kUpdateAndAttend, kAttendOnly };

// Shape and range checks of one update_and_attend / attend call against its layer (no state
// read): layer in range, n_tokens > 0, q_heads a positive multiple of kv_heads, every span
// sized for its shape (k and v required by kUpdateAndAttend, empty for kAttendOnly), finite
// scale, softcap >= 0, sinks of q_heads finite floats exactly when the layer has sinks (and
// empty otherwise). InvalidArgument naming the field, the value and the expectation.
Status check_attend_args(const CacheGeometry& geometry, const AttendArgs& args,
                         AttendOp op);

// "update_and_attend: layer L: " (or "attend: layer L: "), the prefix of the call's errors.
// Called only on failure: the per-step path builds no strings.
std::string attend_context(int32_t layer, AttendOp op);

}  // namespace kvcache::cpu
