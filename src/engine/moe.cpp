// The mixture-of-experts MLP. See moe.h.
#include "engine/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

void moe_ffn(const LayerWeights& w, const HParams& hp, int32_t layer, std::span<const float> h,
             int64_t t, std::span<float> y, MoeScratch& s) {
  const int64_t d = hp.d_model, ff = hp.d_ff_expert, k = hp.n_expert_used;
  grow(s.logits, t * hp.n_expert);
  matmul(h, w.router, s.logits, t);
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
  std::fill(y.begin(), y.begin() + t * d, 0.0f);
  MoeStats& st = s.stats;
  st.router_bytes += static_cast<int64_t>(w.router.bytes.size());
  if (st.tokens.empty()) st.tokens.assign(static_cast<size_t>(hp.n_layers) * hp.n_expert, 0);
  for (int64_t a = 0; a < n_choices;) {
    const int32_t e = s.choices[s.order[a]].expert;
    int64_t b = a;
    while (b < n_choices && s.choices[s.order[b]].expert == e) ++b;
    const int64_t n = b - a;
    grow(s.xs, n * d);
    grow(s.gate, n * ff);
    grow(s.up, n * ff);
    grow(s.out, n * d);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t token = s.order[a + j] / k;
      std::copy_n(h.data() + token * d, d, s.xs.data() + j * d);
    }
    matmul(s.xs, w.gate_exps[e], s.gate, n);
    matmul(s.xs, w.up_exps[e], s.up, n);
    add_expert_bias(s.gate.data(), n, ff, w.gate_exps_b, e);
    add_expert_bias(s.up.data(), n, ff, w.up_exps_b, e);
    const std::span<float> g(s.gate.data(), static_cast<size_t>(n * ff));
    if (hp.ffn_act == FfnActivation::kSwigluOai) swiglu_oai(g, s.up);
    else swiglu(g, s.up);
    matmul(s.gate, w.down_exps[e], s.out, n);
    add_expert_bias(s.out.data(), n, d, w.down_exps_b, e);
    for (int64_t j = 0; j < n; ++j) {
      const ExpertChoice& c = s.choices[s.order[a + j]];
      float* dst = y.data() + (s.order[a + j] / k) * d;
      const float* src = s.out.data() + j * d;
      for (int64_t i = 0; i < d; ++i) dst[i] += c.weight * src[i];
    }
    ++st.expert_runs;
    st.expert_bytes += expert_bytes(w, e);
    st.tokens[static_cast<size_t>(layer) * hp.n_expert + e] += n;
    a = b;
  }
}

}  // namespace kvcache::engine
