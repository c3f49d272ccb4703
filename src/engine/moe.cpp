// The mixture-of-experts MLP. See moe.h.
#include "engine/moe.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "cpu/thread_pool.h"
#include "kernels/kernels.h"

namespace kvcache::engine {
namespace {

template <class T>
void grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// One token's top k of l[n] by insertion into o[0, k), best first; equal logits keep the
// lower index first.
void top_k(const float* l, int32_t n, int32_t k, ExpertChoice* o) {
  int32_t have = 0;
  for (int32_t e = 0; e < n; ++e) {
    if (have == k && !(l[e] > l[o[k - 1].expert])) continue;
    int32_t j = have < k ? have : k - 1;
    for (; j > 0 && l[e] > l[o[j - 1].expert]; --j) o[j] = o[j - 1];
    o[j].expert = e;
    have = std::min(have + 1, k);
  }
}

// rows[n, width] += bias row e of a per-expert bias table (gpt-oss); no-op when absent.
void add_expert_bias(float* rows, int64_t n, int64_t width, const std::vector<float>& bias,
                     int32_t e) {
  if (bias.empty()) return;
  const float* b = bias.data() + int64_t{e} * width;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < width; ++i) rows[r * width + i] += b[i];
}

int64_t expert_bytes(const LayerWeights& w, int32_t e) {
  return static_cast<int64_t>(w.gate_exps[e].bytes.size() + w.up_exps[e].bytes.size() +
                              w.down_exps[e].bytes.size());
}

}  // namespace

void route_tokens(std::span<const float> logits, int64_t t, int32_t n_expert, int32_t k,
                  bool renormalize, std::vector<ExpertChoice>& out) {
  out.resize(static_cast<size_t>(t * k));
  for (int64_t r = 0; r < t; ++r) {
    const float* l = logits.data() + r * n_expert;
    ExpertChoice* o = out.data() + r * k;
    top_k(l, n_expert, k, o);
    const double top = l[o[0].expert];  // the largest logit: exp never overflows
    double sum = 0.0;
    if (renormalize) {
      for (int32_t j = 0; j < k; ++j) sum += std::exp(double{l[o[j].expert]} - top);
    } else {
      for (int32_t e = 0; e < n_expert; ++e) sum += std::exp(double{l[e]} - top);
    }
    for (int32_t j = 0; j < k; ++j)
      o[j].weight = static_cast<float>(std::exp(double{l[o[j].expert]} - top) / sum);
  }
}

namespace {

// Rows of the step's input h routed to choices [g.a, g.a + g.n) of the sorted order, gathered
// into dst[g.n, d].
void gather(std::span<const float> h, const MoeScratch& s, const MoeGroup& g, int64_t d,
            int64_t k, float* dst) {
  for (int64_t j = 0; j < g.n; ++j)
    std::copy_n(h.data() + (s.order[g.a + j] / k) * d, d, dst + j * d);
}

void add_gate_up_biases(const LayerWeights& w, const MoeGroup& g, int64_t ff, float* gate,
                        float* up) {
  add_expert_bias(gate, g.n, ff, w.gate_exps_b, g.expert);
  add_expert_bias(up, g.n, ff, w.up_exps_b, g.expert);
}

// gate[n] = act(gate, up), the block's gated activation.
void activate(const HParams& hp, float* gate, const float* up, int64_t n) {
  const std::span<float> g(gate, static_cast<size_t>(n));
  const std::span<const float> u(up, static_cast<size_t>(n));
  if (hp.ffn_act == FfnActivation::kSwigluOai) kernels::swiglu_oai(g, u);
  else kernels::swiglu(g, u);
}

// Runs fn(item) for every item: on the pool (claimed dynamically, so a thread the OS parks
// mid-step leaves its items to the others) unless the work is small. Items are fixed by the
// shapes alone, so the thread count never changes a result.
void run_items(const std::vector<MoeItem>& items, int64_t macs,
               const std::function<void(const MoeItem&)>& fn) {
  cpu::ThreadPool& pool = cpu::global_pool();
  if (pool.size() == 1 || items.size() < 2 || macs < (int64_t{1} << 15)) {
    for (const MoeItem& it : items) fn(it);
    return;
  }
  pool.run_tasks(static_cast<int64_t>(items.size()),
                 [&](int64_t i) { fn(items[static_cast<size_t>(i)]); });
}

// items = (group, [r0, r1)) for every fused group, rows [0, rows) in chunks of `chunk`.
void make_items(const std::vector<MoeGroup>& groups, int64_t rows, int64_t chunk,
                std::vector<MoeItem>& items) {
  items.clear();
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i].slot >= 0)
      for (int64_t r0 = 0; r0 < rows; r0 += chunk)
        items.push_back({static_cast<int32_t>(i), r0, std::min(rows, r0 + chunk)});
}

// Stage 1 of the fused groups: each group's rows of h gathered into s.xs[slot * d] (quantized
// once for both matrices), then one dispatch for every group's gate and up rows into
// s.gate / s.up[slot * ff], then their biases.
void fused_gate_up(const LayerWeights& w, const HParams& hp, std::span<const float> h,
                   int64_t rows, MoeScratch& s) {
  const int64_t d = hp.d_model, ff = hp.d_ff_expert;
  const kernels::Weight& gate0 = w.gate_exps[0];  // every expert has its shape and type
  const bool quantize = kernels::product_quantizes(gate0.type) ||
                        kernels::product_quantizes(w.up_exps[0].type);
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const MoeGroup& g = s.groups[i];
    if (g.slot < 0) continue;
    float* x = s.xs.data() + g.slot * d;
    gather(h, s, g, d, hp.n_expert_used, x);
    s.inputs[i].set(x, g.n, d, quantize);
  }
  make_items(s.groups, ff, kernels::row_chunk(gate0), s.items);
  run_items(s.items, 2 * rows * ff * d, [&](const MoeItem& it) {
    const MoeGroup& g = s.groups[static_cast<size_t>(it.group)];
    const kernels::ProductInput& in = s.inputs[static_cast<size_t>(it.group)];
    kernels::matmul_rows(w.gate_exps[g.expert], in, it.r0, it.r1, s.gate.data() + g.slot * ff);
    kernels::matmul_rows(w.up_exps[g.expert], in, it.r0, it.r1, s.up.data() + g.slot * ff);
  });
  for (const MoeGroup& g : s.groups)
    if (g.slot >= 0)
      add_gate_up_biases(w, g, ff, s.gate.data() + g.slot * ff, s.up.data() + g.slot * ff);
}

// Stage 2: the activated s.gate rows through one dispatch for every group's down rows into
// s.out[slot * d], then their biases.
void fused_down(const LayerWeights& w, const HParams& hp, int64_t rows, MoeScratch& s) {
  const int64_t d = hp.d_model, ff = hp.d_ff_expert;
  const kernels::Weight& down0 = w.down_exps[0];
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const MoeGroup& g = s.groups[i];
    if (g.slot >= 0)
      s.inputs[i].set(s.gate.data() + g.slot * ff, g.n, ff,
                      kernels::product_quantizes(down0.type));
  }
  make_items(s.groups, d, kernels::row_chunk(down0), s.items);
  run_items(s.items, rows * ff * d, [&](const MoeItem& it) {
    const MoeGroup& g = s.groups[static_cast<size_t>(it.group)];
    kernels::matmul_rows(w.down_exps[g.expert], s.inputs[static_cast<size_t>(it.group)], it.r0,
                         it.r1, s.out.data() + g.slot * d);
  });
  for (const MoeGroup& g : s.groups)
    if (g.slot >= 0) add_expert_bias(s.out.data() + g.slot * d, g.n, d, w.down_exps_b, g.expert);
}

// Every fused group (slot >= 0: at most kSmallBatch tokens) through its expert's SwiGLU into
// s.out[slot * d], `rows` slots in all: one pool dispatch for all the groups' gate and up rows,
// the activation, one dispatch for all their down rows.
void run_fused(const LayerWeights& w, const HParams& hp, std::span<const float> h, int64_t rows,
               MoeScratch& s) {
  if (rows == 0) return;
  grow(s.xs, rows * hp.d_model);
  grow(s.gate, rows * hp.d_ff_expert);
  grow(s.up, rows * hp.d_ff_expert);
  grow(s.out, rows * hp.d_model);
  if (s.inputs.size() < s.groups.size()) s.inputs.resize(s.groups.size());
  fused_gate_up(w, hp, h, rows, s);
  activate(hp, s.gate.data(), s.up.data(), rows * hp.d_ff_expert);
  fused_down(w, hp, rows, s);
}

// A group of more than kSmallBatch tokens (prefill) alone, with matmul's GEMM over the pool;
// the output in s.big_out[g.n, d]. Runs after run_fused: s.xs, s.gate and s.up are free.
void run_alone(const LayerWeights& w, const HParams& hp, std::span<const float> h,
               const MoeGroup& g, MoeScratch& s) {
  const int64_t d = hp.d_model, ff = hp.d_ff_expert, n = g.n;
  grow(s.xs, n * d);
  grow(s.gate, n * ff);
  grow(s.up, n * ff);
  grow(s.big_out, n * d);
  gather(h, s, g, d, hp.n_expert_used, s.xs.data());
  kernels::matmul(s.xs, w.gate_exps[g.expert], s.gate, n);
  kernels::matmul(s.xs, w.up_exps[g.expert], s.up, n);
  add_gate_up_biases(w, g, ff, s.gate.data(), s.up.data());
  activate(hp, s.gate.data(), s.up.data(), n * ff);
  kernels::matmul(s.gate, w.down_exps[g.expert], s.big_out, n);
  add_expert_bias(s.big_out.data(), n, d, w.down_exps_b, g.expert);
}

}  // namespace

void moe_ffn(const LayerWeights& w, const HParams& hp, int32_t layer, std::span<const float> h,
             int64_t t, std::span<float> y, MoeScratch& s) {
  const int64_t d = hp.d_model, k = hp.n_expert_used;
  grow(s.logits, t * hp.n_expert);
  kernels::matmul(h, w.router, s.logits, t);
  if (!w.router_b.empty())
    for (int64_t r = 0; r < t; ++r)
      for (int32_t e = 0; e < hp.n_expert; ++e) s.logits[r * hp.n_expert + e] += w.router_b[e];
  route_tokens(s.logits, t, hp.n_expert, hp.n_expert_used, hp.expert_weights_norm, s.choices);
  // Choices grouped by expert, tokens in order within a group: no pass over all experts.
  const int64_t n_choices = t * k;
  s.order.resize(static_cast<size_t>(n_choices));
  std::iota(s.order.begin(), s.order.end(), 0);
  std::sort(s.order.begin(), s.order.end(), [&](int32_t a, int32_t b) {
    const int32_t ea = s.choices[a].expert, eb = s.choices[b].expert;
    return ea != eb ? ea < eb : a < b;
  });
  s.groups.clear();
  int64_t fused_rows = 0;
  for (int64_t a = 0; a < n_choices;) {
    const int32_t e = s.choices[s.order[a]].expert;
    int64_t b = a;
    while (b < n_choices && s.choices[s.order[b]].expert == e) ++b;
    const bool fused = b - a <= kernels::kSmallBatch;
    s.groups.push_back({e, a, b - a, fused ? fused_rows : -1});
    if (fused) fused_rows += b - a;
    a = b;
  }
  run_fused(w, hp, h, fused_rows, s);
  // The weighted sum in ascending expert order, tokens in order within an expert: the same
  // additions whatever ran where.
  std::fill(y.begin(), y.begin() + t * d, 0.0f);
  MoeStats& st = s.stats;
  st.router_bytes += static_cast<int64_t>(w.router.bytes.size());
  if (st.tokens.empty()) st.tokens.assign(static_cast<size_t>(hp.n_layers) * hp.n_expert, 0);
  for (const MoeGroup& g : s.groups) {
    if (g.slot < 0) run_alone(w, hp, h, g, s);
    const float* out = g.slot < 0 ? s.big_out.data() : s.out.data() + g.slot * d;
    for (int64_t j = 0; j < g.n; ++j) {
      const ExpertChoice& c = s.choices[s.order[g.a + j]];
      float* dst = y.data() + (s.order[g.a + j] / k) * d;
      const float* src = out + j * d;
      for (int64_t i = 0; i < d; ++i) dst[i] += c.weight * src[i];
    }
    ++st.expert_runs;
    st.expert_bytes += expert_bytes(w, g.expert);
    st.tokens[static_cast<size_t>(layer) * hp.n_expert + g.expert] += g.n;
  }
}

}  // namespace kvcache::engine
