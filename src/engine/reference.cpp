// The no-cache double-precision reference forward. See reference.h.
#include "engine/reference.h"

#include <algorithm>
#include <cmath>

namespace kvcache::engine {
namespace {

using Vec = std::vector<double>;

// y[T, rows] = x[T, cols] W^T (+ bias).
Vec linear(const Vec& x, const kernels::Weight& w, const std::vector<float>& b, int64_t t) {
  const int64_t in = w.cols, out = w.rows;
  Vec y(t * out, 0.0);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w.at(o, i);
      y[r * out + o] = acc;
    }
  return y;
}

void rmsnorm(Vec& x, const std::vector<float>& w, int64_t rows, int64_t d, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) x[r * d + i] *= inv * w[i];
  }
}

// RoPE of one layer: full layers use rope_base / rope_linear, sliding ones the _swa pair;
// pair j's frequency is divided by factors[j] when given (rope_freqs.weight).
void rope(Vec& x, int64_t t, int64_t heads, const HParams& hp, bool sliding,
          const std::vector<float>& factors) {
  const int64_t half = hp.rope_dim / 2;
  const double base = sliding ? hp.rope_base_swa : hp.rope_base;
  const double linear = sliding ? hp.rope_linear_swa : hp.rope_linear;
  for (int64_t p = 0; p < t; ++p)
    for (int64_t j = 0; j < half; ++j) {
      double freq = std::pow(base, -2.0 * static_cast<double>(j) / hp.rope_dim);
      if (!factors.empty()) freq /= factors[j];
      const double angle = (static_cast<double>(p) / linear) * freq;
      // YaRN's magnitude factor scales cos and sin alike (1 without YaRN).
      const double c = std::cos(angle) * hp.rope_attn_factor;
      const double s = std::sin(angle) * hp.rope_attn_factor;
      const int64_t i0 = hp.rope_interleaved ? 2 * j : j;
      const int64_t i1 = hp.rope_interleaved ? 2 * j + 1 : j + half;
      for (int64_t h = 0; h < heads; ++h) {
        double* v = x.data() + (p * heads + h) * hp.head_dim;
        const double a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = a * s + b * c;
      }
    }
}

// out[T, Hq, Dv]: query p sees keys (p - W, p] (W = 0: all of [0, p]); logits scaled, then
// soft-capped when cap > 0; head h's sink logit (when `sinks` is not empty) joins the
// denominator.
Vec attend(const Vec& q, const Vec& k, const Vec& v, int64_t t, int64_t hq, int64_t hkv,
           int64_t dk, int64_t dv, int32_t window, double scale, double cap,
           const std::vector<float>& sinks) {
  Vec out(t * hq * dv, 0.0);
  const int64_t group = hq / hkv;
  Vec w(t);
  for (int64_t p = 0; p < t; ++p)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / group;
      const int64_t lo = first_visible(window, p);
      double mx = -1e300;
      for (int64_t j = lo; j <= p; ++j) {
        double s = 0.0;
        for (int64_t i = 0; i < dk; ++i)
          s += q[(p * hq + h) * dk + i] * k[(j * hkv + kh) * dk + i];
        w[j] = cap > 0.0 ? cap * std::tanh(s * scale / cap) : s * scale;
        mx = std::max(mx, w[j]);
      }
      if (!sinks.empty()) mx = std::max(mx, double(sinks[h]));
      double sum = sinks.empty() ? 0.0 : std::exp(double(sinks[h]) - mx);
      for (int64_t j = lo; j <= p; ++j) sum += (w[j] = std::exp(w[j] - mx));
      for (int64_t j = lo; j <= p; ++j)
        for (int64_t i = 0; i < dv; ++i)
          out[(p * hq + h) * dv + i] += w[j] / sum * v[(j * hkv + kh) * dv + i];
    }
  return out;
}

// x += y, through the block's post-norm when present (gemma).
void add_residual(Vec& x, Vec y, const std::vector<float>& post_norm, int64_t t, int64_t d,
                  double eps) {
  if (!post_norm.empty()) rmsnorm(y, post_norm, t, d, eps);
  for (int64_t i = 0; i < t * d; ++i) x[i] += y[i];
}

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Row e of a per-expert bias table [n_expert * width]; empty when the table is.
std::vector<float> expert_row(const std::vector<float>& table, int64_t e, int64_t width) {
  if (table.empty()) return {};
  return {table.begin() + e * width, table.begin() + (e + 1) * width};
}

// The gated activation of one (gate, up) pair: silu, GELU-tanh, or gpt-oss's clamped form
// min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1).
double gated(FfnActivation act, double g, double u) {
  if (act == FfnActivation::kGeluTanh) return gelu_tanh(g) * u;
  if (act == FfnActivation::kSwigluOai) {
    g = std::min(g, 7.0);
    u = std::min(std::max(u, -7.0), 7.0);
    return g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
  }
  return g / (1.0 + std::exp(-g)) * u;
}

// The mixture-of-experts MLP of h [T, d], token by token: router logits, the top k (ties:
// lower index), softmax weights (over the chosen when renormalised, else over all), and the
// weighted sum of the chosen experts' SwiGLU outputs.
Vec moe(const Vec& h, const LayerWeights& w, const HParams& hp, int64_t t) {
  const int64_t d = hp.d_model, n = hp.n_expert, k = hp.n_expert_used;
  const Vec logits = linear(h, w.router, w.router_b, t);
  Vec y(t * d, 0.0);
  std::vector<int64_t> ids(n);
  for (int64_t p = 0; p < t; ++p) {
    const double* l = logits.data() + p * n;
    for (int64_t e = 0; e < n; ++e) ids[e] = e;
    std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
    double sum = 0.0;
    for (int64_t e = 0; e < (hp.expert_weights_norm ? k : n); ++e)
      sum += std::exp(l[ids[e]] - l[ids[0]]);
    const Vec x(h.begin() + p * d, h.begin() + (p + 1) * d);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[j];
      Vec g = linear(x, w.gate_exps[e], expert_row(w.gate_exps_b, e, hp.d_ff_expert), 1);
      const Vec u = linear(x, w.up_exps[e], expert_row(w.up_exps_b, e, hp.d_ff_expert), 1);
      for (size_t i = 0; i < g.size(); ++i) g[i] = gated(hp.ffn_act, g[i], u[i]);
      const Vec o = linear(g, w.down_exps[e], expert_row(w.down_exps_b, e, d), 1);
      const double weight = std::exp(l[e] - l[ids[0]]) / sum;
      for (int64_t i = 0; i < d; ++i) y[p * d + i] += weight * o[i];
    }
  }
  return y;
}

}  // namespace

std::vector<double> reference_logits(const Model& model, std::span<const int32_t> tokens,
                                     const CacheGeometry* windows) {
  const HParams& hp = model.hparams();
  const CacheGeometry& geo = windows ? *windows : model.geometry().cache;
  const auto t = static_cast<int64_t>(tokens.size());
  const int64_t d = hp.d_model, hq = hp.q_heads, dk = hp.head_dim, dv = hp.value_dim;
  Vec x(t * d);
  for (int64_t p = 0; p < t; ++p)
    for (int64_t i = 0; i < d; ++i)
      x[p * d + i] = model.token_embd().at(tokens[p], i) * static_cast<double>(hp.embed_scale);
  std::vector<Vec> cache_k(geo.layers.size()), cache_v(geo.layers.size());
  for (const LayerWeights& w : model.layers()) {
    const int64_t hkv = w.kv_heads;
    Vec h = x;
    rmsnorm(h, w.attn_norm, t, d, hp.rms_eps);
    Vec q = linear(h, w.wq, w.bq, t);
    if (!w.q_norm.empty()) rmsnorm(q, w.q_norm, t * hq, dk, hp.rms_eps);
    rope(q, t, hq, hp, w.sliding, model.rope_freqs());
    if (!w.kv_shared) {
      Vec k = linear(h, w.wk, w.bk, t);
      if (!w.k_norm.empty()) rmsnorm(k, w.k_norm, t * hkv, dk, hp.rms_eps);
      rope(k, t, hkv, hp, w.sliding, model.rope_freqs());
      cache_k[w.cache] = std::move(k);
      cache_v[w.cache] = linear(h, w.wv, w.bv, t);
    }
    Vec att = attend(q, cache_k[w.cache], cache_v[w.cache], t, hq, hkv, dk, dv,
                     geo.layers[w.cache].window, hp.attn_scale, hp.attn_softcap, w.attn_sinks);
    add_residual(x, linear(att, w.wo, w.bo, t), w.post_attn_norm, t, d, hp.rms_eps);
    h = x;
    rmsnorm(h, w.ffn_norm, t, d, hp.rms_eps);
    if (!w.router.empty()) {
      add_residual(x, moe(h, w, hp, t), w.post_ffn_norm, t, d, hp.rms_eps);
      continue;
    }
    Vec g = linear(h, w.w_gate, {}, t);
    Vec u = linear(h, w.w_up, {}, t);
    for (size_t i = 0; i < g.size(); ++i) g[i] = gated(hp.ffn_act, g[i], u[i]);
    add_residual(x, linear(g, w.w_down, {}, t), w.post_ffn_norm, t, d, hp.rms_eps);
  }
  rmsnorm(x, model.output_norm(), t, d, hp.rms_eps);
  Vec logits = linear(x, model.output(), {}, t);
  const double cap = hp.final_softcap;
  if (cap > 0.0)
    for (double& l : logits) l = cap * std::tanh(l / cap);
  return logits;
}

}  // namespace kvcache::engine
