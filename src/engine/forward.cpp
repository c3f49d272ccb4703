// The decoder forward through the cache. See forward.h.
#include "engine/forward.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/str_cat.h"
#include "engine/yarn_rope.h"

namespace kvcache::engine {
namespace {

void add_bias(std::span<float> y, const std::vector<float>& b, int64_t t) {
  if (b.empty()) return;
  const size_t n = b.size();
  for (int64_t r = 0; r < t; ++r)
    for (size_t i = 0; i < n; ++i) y[r * n + i] += b[i];
}

// Per-head RMSNorm of x[rows = T*heads, head_dim] when a norm weight is present.
void head_norm(std::span<float> x, const std::vector<float>& w, int64_t rows, int32_t dim,
               float eps) {
  if (w.empty()) return;
  kernels::rmsnorm_rows(x, w, x, rows, dim, eps);
}

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

Status check_cache_fits(const Model& model, const CacheGeometry& g) {
  const CacheGeometry& mine = model.geometry().cache;
  if (g.layers.size() != mine.layers.size())
    return invalid_argument(str_cat("engine: cache has ", g.layers.size(),
                                    " layers, the model needs ", mine.layers.size()));
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const LayerGeometry &a = g.layers[i], &b = mine.layers[i];
    if (a.kv_heads != b.kv_heads || a.head_dim != b.head_dim || a.value_dim != b.value_dim)
      return invalid_argument(str_cat("engine: cache layer ", i, " has kv_heads/",
                                      "head_dim/value_dim ", a.kv_heads, "/", a.head_dim, "/",
                                      a.value_dim, ", the model needs ", b.kv_heads, "/",
                                      b.head_dim, "/", b.value_dim));
    if (a.sinks != b.sinks)
      return invalid_argument(str_cat("engine: cache layer ", i, " has sinks = ", a.sinks,
                                      ", the model's has ", b.sinks,
                                      " (attention sinks are the model's to publish)"));
  }
  return ok_status();
}

Engine::Engine(const Model& model, std::shared_ptr<Cache> cache)
    : model_(model), cache_(std::move(cache)), kernel_(*cache_) {
  const HParams& hp = model_.hparams();
  rope_ = kernels::RopeParams{hp.head_dim, hp.rope_dim, hp.rope_base, hp.rope_linear,
                              hp.rope_interleaved, model_.rope_freqs()};
  rope_swa_ = rope_;
  rope_swa_.base = hp.rope_base_swa;
  rope_swa_.linear = hp.rope_linear_swa;
}

void Engine::add_residual(std::span<float> y, const std::vector<float>& post_norm, int64_t t) {
  const int64_t d = model_.hparams().d_model;
  if (!post_norm.empty()) kernels::rmsnorm_rows(y, post_norm, y, t, d, model_.hparams().rms_eps);
  for (int64_t i = 0; i < t * d; ++i) x_[i] += y[i];
}

Result<std::unique_ptr<Engine>> Engine::create(const Model& model, std::shared_ptr<Cache> cache) {
  if (!cache) return invalid_argument("engine: no cache given");
  KVCACHE_RETURN_IF_ERROR(check_cache_fits(model, cache->geometry()));
  return std::unique_ptr<Engine>(new Engine(model, std::move(cache)));
}

Status Engine::run_layer(int32_t i, int64_t t, std::span<const int64_t> positions) {
  const HParams& hp = model_.hparams();
  const LayerWeights& w = model_.layers()[i];
  const int64_t d = hp.d_model, hq = hp.q_heads, dk = hp.head_dim, dv = hp.value_dim;
  const int64_t kd = w.kv_heads * dk, vd = w.kv_heads * dv;
  const kernels::RopeParams& rp = w.sliding ? rope_swa_ : rope_;
  kernels::rmsnorm_rows(x_, w.attn_norm, h_, t, d, hp.rms_eps);
  if (w.kv_shared) {
    kernels::matmul(h_, w.wq, q_, t);
  } else {
    const kernels::SharedProduct qkv[] = {{&w.wq, q_}, {&w.wk, k_}, {&w.wv, v_}};
    kernels::matmul_shared(h_, t, qkv);
  }
  add_bias(q_, w.bq, t);
  head_norm(q_, w.q_norm, t * hq, hp.head_dim, hp.rms_eps);
  kernels::rope(q_, positions, hp.q_heads, rp);
  scale_rotated(q_, t * hq, hp.head_dim, hp.rope_dim, hp.rope_attn_factor);  // YaRN; else 1
  AttendArgs args;
  args.layer = w.cache;
  args.n_tokens = static_cast<int32_t>(t);
  args.q_heads = hp.q_heads;
  args.positions = positions;
  args.q = std::span<const float>(q_.data(), t * hq * dk);
  if (!w.kv_shared) {
    add_bias(k_, w.bk, t);
    add_bias(v_, w.bv, t);
    head_norm(k_, w.k_norm, t * w.kv_heads, hp.head_dim, hp.rms_eps);
    kernels::rope(k_, positions, w.kv_heads, rp);
    scale_rotated(k_, t * w.kv_heads, hp.head_dim, hp.rope_dim, hp.rope_attn_factor);
    args.k = std::span<const float>(k_.data(), t * kd);
    args.v = std::span<const float>(v_.data(), t * vd);
  }
  args.scale = hp.attn_scale;
  args.softcap = hp.attn_softcap;
  args.sinks = w.attn_sinks;  // empty unless the file carries blk.N.attn_sinks.weight
  args.out = std::span<float>(att_.data(), t * hq * dv);
  // A KV-shared layer reads the cache layer an earlier layer of this step wrote.
  Status attended = w.kv_shared ? kernel_.attend(args) : kernel_.update_and_attend(args);
  KVCACHE_RETURN_IF_ERROR_CTX(std::move(attended), str_cat("engine: layer ", i));
  if (w.post_attn_norm.empty()) {
    kernels::matmul(att_, w.wo, x_, t, /*accumulate=*/true);
    add_bias(x_, w.bo, t);
  } else {
    kernels::matmul(att_, w.wo, h_, t);
    add_residual(h_, w.post_attn_norm, t);
  }
  kernels::rmsnorm_rows(x_, w.ffn_norm, h_, t, d, hp.rms_eps);
  if (!w.router.empty()) {
    grow(moe_.y, t * d);
    const std::span<float> y(moe_.y.data(), t * d);
    moe_ffn(w, hp, i, h_, t, y, moe_);
    add_residual(y, w.post_ffn_norm, t);
    return ok_status();
  }
  const kernels::SharedProduct gate_up[] = {{&w.w_gate, gate_}, {&w.w_up, up_}};
  kernels::matmul_shared(h_, t, gate_up);
  const std::span<float> gate(gate_.data(), t * hp.d_ff);
  if (hp.ffn_act == FfnActivation::kGeluTanh) kernels::gelu_tanh_gated(gate, up_);
  else kernels::swiglu(gate, up_);
  if (w.post_ffn_norm.empty()) {
    kernels::matmul(gate_, w.w_down, x_, t, /*accumulate=*/true);
  } else {
    kernels::matmul(gate_, w.w_down, h_, t);
    add_residual(h_, w.post_ffn_norm, t);
  }
  return ok_status();
}

Status Engine::forward(const Batch& batch, LogitsMode mode, Logits& out) {
  std::vector<int32_t> rows;
  const size_t t = std::min(batch.tokens.size(), batch.seq_ids.size());  // checked below
  for (size_t i = 0; i < t; ++i) {
    bool last = mode == LogitsMode::kAll;
    if (!last) {
      last = true;
      for (size_t j = i + 1; j < t && last; ++j) last = batch.seq_ids[j] != batch.seq_ids[i];
    }
    if (last) rows.push_back(static_cast<int32_t>(i));
  }
  return forward(batch, rows, out);
}

Status Engine::forward(const Batch& batch, std::span<const int32_t> rows, Logits& out) {
  const HParams& hp = model_.hparams();
  const auto t = static_cast<int64_t>(batch.tokens.size());
  if (t == 0 || batch.seq_ids.size() != batch.tokens.size() ||
      batch.positions.size() != batch.tokens.size())
    return invalid_argument(str_cat("engine forward: tokens/seq_ids/positions have ", t, "/",
                                    batch.seq_ids.size(), "/", batch.positions.size(),
                                    " entries, expected equal and > 0"));
  for (int64_t i = 0; i < t; ++i)
    if (batch.tokens[i] < 0 || batch.tokens[i] >= hp.vocab)
      return invalid_argument(str_cat("engine forward: token[", i, "] = ", batch.tokens[i],
                                      ", expected in [0, ", hp.vocab, ")"));
  for (size_t r = 0; r < rows.size(); ++r)
    if (rows[r] < 0 || rows[r] >= t || (r > 0 && rows[r] <= rows[r - 1]))
      return invalid_argument(str_cat("engine forward: rows[", static_cast<int64_t>(r), "] = ",
                                      rows[r], ", expected ascending batch indices in [0, ", t,
                                      ")"));
  KVCACHE_RETURN_IF_ERROR(cache_->declare_step(batch.seq_ids));
  const int64_t d = hp.d_model;
  int64_t widest = 0;
  for (const LayerWeights& w : model_.layers()) widest = std::max<int64_t>(widest, w.kv_heads);
  grow(x_, t * d);
  grow(h_, t * d);
  grow(q_, t * hp.q_heads * hp.head_dim);
  grow(k_, t * widest * hp.head_dim);
  grow(v_, t * widest * hp.value_dim);
  grow(att_, t * hp.q_heads * hp.value_dim);
  grow(gate_, t * hp.d_ff);
  grow(up_, t * hp.d_ff);
  for (int64_t i = 0; i < t; ++i)
    model_.token_embd().row(batch.tokens[i], std::span<float>(x_).subspan(i * d, d));
  if (hp.embed_scale != 1.0f)
    for (int64_t i = 0; i < t * d; ++i) x_[i] *= hp.embed_scale;
  for (int32_t i = 0; i < hp.n_layers; ++i)
    KVCACHE_RETURN_IF_ERROR(run_layer(i, t, batch.positions));

  out.vocab = hp.vocab;
  out.token_index.assign(rows.begin(), rows.end());
  const auto n_rows = static_cast<int64_t>(rows.size());
  for (int64_t r = 0; r < n_rows; ++r)
    kernels::rmsnorm_rows(std::span<const float>(x_).subspan(out.token_index[r] * d, d),
                          model_.output_norm(), std::span<float>(h_).subspan(r * d, d), 1, d,
                          hp.rms_eps);
  out.data.resize(n_rows * hp.vocab);
  kernels::matmul(h_, model_.output(), out.data, n_rows);
  kernels::softcap(out.data, hp.final_softcap);
  return ok_status();
}

}  // namespace kvcache::engine
