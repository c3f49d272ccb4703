// The optimized attention driver: picks the chunk worker for the CPU, cuts the work into
// (token, kv head[, key range]) tasks for the thread pool and merges split-key partial states.
#include "cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "core/str_cat.h"
#include "cpu/attention_chunk.h"

namespace kvcache::cpu {

namespace {

constexpr int64_t kMinSplitKeys = 512;  // a key-range task is at least this long
constexpr int64_t kMinSharedKeys = 128;  // shared cells worth a group's extra merge
constexpr int64_t kMinParallelWork = 1 << 18;  // multiply-adds below which one thread runs a call

// The worker for layers with a block type or K and V of different types (attention_quant.h).
// Its AVX-512 version needs VNNI (vpdpbusd): the kInt8Dot family.
detail::ChunkFn quant_chunk_fn(Isa isa) {
  switch (resolve_isa(isa, KernelFamily::kInt8Dot)) {
    case Isa::kAvx512: return detail::chunk_quant_avx512;
    case Isa::kAvx2: return detail::chunk_quant_avx2;
    default: return detail::chunk_quant_scalar;
  }
}

detail::ChunkFn float_chunk_fn(Isa isa) {
  switch (attend_isa(isa)) {
    case Isa::kAvx512: return detail::chunk_avx512;
    case Isa::kAvx2: return detail::chunk_avx2;
    default: return detail::chunk_scalar;
  }
}

detail::ChunkFn chunk_fn(const KvView& kv, Isa isa) {
  return detail::float_workers_fit(kv) ? float_chunk_fn(isa) : quant_chunk_fn(isa);
}

// The worker for problems with many heads per kv head (shared groups' virtual tokens).
detail::ChunkFn wide_chunk_fn(const KvView& kv, Isa isa) {
  if (!detail::float_workers_fit(kv)) return quant_chunk_fn(isa);
  isa = attend_isa(isa);
  return isa == Isa::kAvx512 ? detail::chunk_avx512_wide : float_chunk_fn(isa);
}

struct Scratch {
  std::vector<float> m, l, acc, logits;
  void fit(int64_t group, int64_t value_dim) {
    m.resize(group);
    l.resize(group);
    acc.resize(group * value_dim);
    logits.resize(group * detail::kKeyBlock);
  }
};

Scratch& thread_scratch() {
  thread_local Scratch s;
  return s;
}

// One task per (token, kv head): normalize straight into out.
void attend_unsplit(const AttentionProblem& p, ThreadPool& pool, detail::ChunkFn fn) {
  const int32_t hkv = p.kv.kv_heads, group = p.q_heads / hkv, dv = p.kv.value_dim;
  pool.run_tasks(int64_t{p.n_tokens} * hkv, [&](int64_t task) {
    const auto t = static_cast<int32_t>(task / hkv), g = static_cast<int32_t>(task % hkv);
    Scratch& s = thread_scratch();
    s.fit(group, dv);
    fn(p, t, g, 0, p.keys[t].size(), s.m.data(), s.l.data(), s.acc.data(), s.logits.data());
    float* out = p.out + (int64_t{t} * p.q_heads + int64_t{g} * group) * dv;
    const float* sink = p.sinks != nullptr ? p.sinks + int64_t{g} * group : nullptr;
    for (int32_t h = 0; h < group; ++h)
      finish_head(s.m[h], s.l[h], s.acc.data() + int64_t{h} * dv, dv,
                  sink != nullptr ? sink + h : nullptr, out + int64_t{h} * dv);
  });
}

// Few (token, kv head) pairs and long contexts: split each key range into chunks of
// `chunk` keys, then merge the partial softmax states per pair.
void attend_split(const AttentionProblem& p, ThreadPool& pool, detail::ChunkFn fn,
                  int64_t chunk) {
  const int32_t hkv = p.kv.kv_heads, group = p.q_heads / hkv, dv = p.kv.value_dim;
  std::vector<int64_t> first(p.n_tokens + 1, 0);  // first chunk index of token t
  for (int32_t t = 0; t < p.n_tokens; ++t)
    first[t + 1] = first[t] + (p.keys[t].size() + chunk - 1) / chunk;
  const int64_t per_head = first[p.n_tokens];
  const int64_t state = group * (2 + int64_t{dv});  // m, l, acc per chunk task
  std::vector<float> partial(static_cast<size_t>(per_head * hkv * state));
  pool.run_tasks(per_head * hkv, [&](int64_t task) {
    const auto g = static_cast<int32_t>(task / per_head);
    const int64_t c = task % per_head;
    const auto t = static_cast<int32_t>(std::upper_bound(first.begin(), first.end(), c) -
                                        first.begin() - 1);
    const int64_t j0 = (c - first[t]) * chunk;
    const int64_t j1 = std::min(p.keys[t].size(), j0 + chunk);
    float* st = partial.data() + task * state;
    Scratch& s = thread_scratch();
    s.fit(group, dv);
    fn(p, t, g, j0, j1, st, st + group, st + 2 * group, s.logits.data());
  });
  pool.run_tasks(int64_t{p.n_tokens} * hkv, [&](int64_t task) {
    const auto t = static_cast<int32_t>(task / hkv), g = static_cast<int32_t>(task % hkv);
    float* out = p.out + (int64_t{t} * p.q_heads + int64_t{g} * group) * dv;
    for (int32_t h = 0; h < group; ++h) {
      float m = -INFINITY;
      for (int64_t c = first[t]; c < first[t + 1]; ++c)
        m = std::max(m, partial[(g * per_head + c) * state + h]);
      double denom = 0.0;
      std::fill(out + h * dv, out + (h + 1) * dv, 0.0f);
      for (int64_t c = first[t]; c < first[t + 1]; ++c) {
        const float* st = partial.data() + (g * per_head + c) * state;
        const float w = std::exp(st[h] - m);
        denom += double(st[group + h]) * w;
        const float* acc = st + 2 * group + int64_t{h} * dv;
        for (int32_t d = 0; d < dv; ++d) out[h * dv + d] += acc[d] * w;
      }
      const float* sink = p.sinks != nullptr ? p.sinks + int64_t{g} * group + h : nullptr;
      finish_head(m, denom, out + int64_t{h} * dv, dv, sink, out + int64_t{h} * dv);
    }
  });
}

}  // namespace

void finish_head(float m, double l, const float* acc, int32_t dv, const float* sink,
                 float* out) {
  double scale = 1.0;  // e^(m - m')
  if (sink != nullptr) {
    const float top = std::max(m, *sink);
    scale = std::exp(double(m) - double(top));
    l = l * scale + std::exp(double(*sink) - double(top));
  }
  const auto w = static_cast<float>(scale / l);
  for (int32_t d = 0; d < dv; ++d) out[d] = acc[d] * w;
}

namespace {
std::atomic<bool> g_shared_prefix{true};
}  // namespace

void set_shared_prefix_attention(bool on) { g_shared_prefix.store(on); }
bool shared_prefix_attention() { return g_shared_prefix.load(); }

Isa attend_isa(Isa isa) { return resolve_isa(isa, KernelFamily::kFloat); }

void attend(const AttentionProblem& p, ThreadPool& pool, Isa isa) {
  if (p.n_tokens <= 0) return;
  const detail::ChunkFn fn = chunk_fn(p.kv, isa);
  const int64_t pairs = int64_t{p.n_tokens} * p.kv.kv_heads;
  const int64_t want = 4 * int64_t{pool.size()};
  int64_t longest = 0, keys = 0;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    longest = std::max(longest, p.keys[t].size());
    keys += p.keys[t].size();
  }
  // Too little work to pay for waking other threads: the caller does it alone.
  const int64_t work = keys * p.q_heads * (p.kv.head_dim + p.kv.value_dim);
  if (work < kMinParallelWork) {
    static ThreadPool serial(1);
    return attend_unsplit(p, serial, fn);
  }
  // Tokens that share leading rows (forks, prefix hits, one prefill chunk) read them once.
  if (shared_prefix_attention()) {
    const std::vector<detail::SharedGroup> groups = detail::find_shared_groups(p, kMinSharedKeys);
    if (!groups.empty())
      return detail::attend_shared(p, groups, pool, fn, wide_chunk_fn(p.kv, isa));
  }
  if (pairs >= want || longest < 2 * kMinSplitKeys) return attend_unsplit(p, pool, fn);
  const int64_t splits = (want + pairs - 1) / pairs;
  int64_t chunk = std::max(kMinSplitKeys, (longest + splits - 1) / splits);
  chunk += (detail::kKeyBlock - chunk % detail::kKeyBlock) % detail::kKeyBlock;  // whole blocks
  attend_split(p, pool, fn, chunk);
}

namespace {
const char* op_name(AttendOp op) {
  return op == AttendOp::kAttendOnly ? "attend" : "update_and_attend";
}
// The sink logits against the layer's flag (`bad` prefixes the call's context).
template <class Bad>
Status check_sinks(const LayerGeometry& l, const AttendArgs& a, Bad bad) {
  if (!l.sinks) {
    if (a.sinks.empty()) return ok_status();
    return bad("sinks has ", a.sinks.size(), " floats, expected none (the layer has no sinks)");
  }
  if (a.sinks.size() != static_cast<size_t>(a.q_heads))
    return bad("sinks has ", a.sinks.size(), " floats, expected one per query head (q_heads = ",
               a.q_heads, ") on a layer with sinks");
  for (size_t h = 0; h < a.sinks.size(); ++h)
    if (!std::isfinite(a.sinks[h]))
      return bad("sinks[", h, "] is not finite, expected a finite logit");
  return ok_status();
}

}  // namespace

std::string attend_context(int32_t layer, AttendOp op) {
  return str_cat(op_name(op), ": layer ", layer, ": ");
}

Status check_attend_args(const CacheGeometry& geometry, const AttendArgs& a, AttendOp op) {
  if (a.layer < 0 || a.layer >= static_cast<int32_t>(geometry.layers.size()))
    return invalid_argument(str_cat(op_name(op), ": layer = ", a.layer, ", expected in [0, ",
                                    geometry.layers.size(), ")"));
  const LayerGeometry& l = geometry.layers[a.layer];
  auto bad = [&](auto&&... parts) {
    return invalid_argument(str_cat(attend_context(a.layer, op), parts...));
  };
  if (a.n_tokens <= 0) return bad("n_tokens = ", a.n_tokens, ", expected > 0");
  if (a.q_heads <= 0 || a.q_heads % l.kv_heads != 0)
    return bad("q_heads = ", a.q_heads, ", expected a positive multiple of kv_heads = ",
               l.kv_heads);
  auto check = [&](const char* name, size_t got, int64_t heads, int64_t dim) -> Status {
    const int64_t want = int64_t{a.n_tokens} * heads * dim;
    if (static_cast<int64_t>(got) == want) return ok_status();
    return bad(name, " has ", got, " floats, expected ", a.n_tokens, " x ", heads, " x ", dim,
               " = ", want);
  };
  if (a.positions.size() != static_cast<size_t>(a.n_tokens))
    return bad("positions has ", a.positions.size(), " entries, expected n_tokens = ",
               a.n_tokens);
  KVCACHE_RETURN_IF_ERROR(check("q", a.q.size(), a.q_heads, l.head_dim));
  KVCACHE_RETURN_IF_ERROR(check("out", a.out.size(), a.q_heads, l.value_dim));
  if (op == AttendOp::kUpdateAndAttend) {
    KVCACHE_RETURN_IF_ERROR(check("k", a.k.size(), l.kv_heads, l.head_dim));
    KVCACHE_RETURN_IF_ERROR(check("v", a.v.size(), l.kv_heads, l.value_dim));
  } else {
    if (!a.k.empty())
      return bad("k has ", a.k.size(), " floats, expected none (attend writes nothing)");
    if (!a.v.empty())
      return bad("v has ", a.v.size(), " floats, expected none (attend writes nothing)");
  }
  if (!std::isfinite(a.scale)) return bad("scale is not finite, expected a finite number");
  if (!(a.softcap >= 0.0f) || !std::isfinite(a.softcap))
    return bad("softcap = ", std::to_string(a.softcap), ", expected >= 0 and finite (0 = none)");
  return check_sinks(l, a, bad);
}


}  // namespace kvcache::cpu
