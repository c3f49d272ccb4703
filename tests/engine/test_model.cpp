// Tiny random GGUF models for engine tests. See test_model.h.
#include "test_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "program/model_geometry.h"

namespace kvcache::engine::testing {
namespace {

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  std::vector<float> normal(int64_t n, double stddev, double mean = 0.0) {
    std::normal_distribution<double> d(mean, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(d(rng_));
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

std::vector<uint8_t> tiny_model_bytes(const TinySpec& s) {
  gguf::GgufWriter w;
  const std::string a = s.arch + ".";
  const auto n_layers = static_cast<int32_t>(s.layer_cache.size());
  w.set_string("general.architecture", s.arch);
  w.set_uint32(a + "block_count", static_cast<uint32_t>(n_layers));
  w.set_uint32(a + "embedding_length", static_cast<uint32_t>(s.d_model));
  w.set_uint32(a + "feed_forward_length", static_cast<uint32_t>(s.d_ff));
  w.set_uint32(a + "context_length", static_cast<uint32_t>(s.max_context));
  w.set_uint32(a + "attention.head_count", static_cast<uint32_t>(s.q_heads));
  w.set_uint32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.set_uint32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.set_float32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.set_float32(a + "rope.freq_base", s.rope_base);
  if (s.attn_softcap > 0.0f) w.set_float32(a + "attn_logit_softcapping", s.attn_softcap);
  if (s.final_softcap > 0.0f) w.set_float32(a + "final_logit_softcapping", s.final_softcap);
  if (s.rope_dim > 0) w.set_uint32(a + "rope.dimension_count", static_cast<uint32_t>(s.rope_dim));
  if (s.rope_linear != 1.0f) {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_float32(a + "rope.scaling.factor", s.rope_linear);
  }
  if (s.yarn_factor > 0.0f) {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_float32(a + "rope.scaling.factor", s.yarn_factor);
    w.set_uint32(a + "rope.scaling.original_context_length",
                 static_cast<uint32_t>(s.yarn_orig_ctx));
  }
  if (s.n_expert > 0) {
    w.set_uint32(a + "expert_count", static_cast<uint32_t>(s.n_expert));
    w.set_uint32(a + "expert_used_count", static_cast<uint32_t>(s.n_expert_used));
    w.set_uint32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.d_ff_expert));
  }
  for (const auto& [key, value] : s.extra_ints) w.set_uint32(a + key, static_cast<uint32_t>(value));
  ModelGeometry g;
  for (size_t c = 0; c < s.cache_kv_heads.size(); ++c)
    g.cache.layers.push_back({s.cache_kv_heads[c], s.head_dim, s.head_dim, s.cache_windows[c]});
  g.layer_cache = s.layer_cache;
  g.max_context = s.max_context;
  g.max_step_tokens = s.max_step_tokens;
  Status st = write_model_geometry(g, w);
  EXPECT_TRUE(st.ok()) << st.to_string();

  Gen gen(s.seed);
  const int64_t d = s.d_model;
  auto add = [&](const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    if (std::find(s.skip_tensors.begin(), s.skip_tensors.end(), name) != s.skip_tensors.end())
      return;
    if (s.edit) s.edit(name, v);
    const bool router = name.find("ffn_gate_inp") != std::string::npos;
    const gguf::TensorType type = dims.size() == 3 ? s.experts_as
                                  : dims.size() == 2 && !router ? s.store_as
                                                                : gguf::TensorType::kF32;
    if (dims.size() == 3 && dims[2] == 0) dims.pop_back();  // one expert of a split stack
    Status t = w.add_tensor_f32(name, std::move(dims), v, type);
    EXPECT_TRUE(t.ok()) << name << ": " << t.to_string();
  };
  auto mat = [&](int64_t out, int64_t in) {
    return gen.normal(out * in, 1.0 / std::sqrt(static_cast<double>(in)));
  };
  const bool gemma = s.arch.rfind("gemma", 0) == 0;
  const bool gpt_oss = s.arch == "gpt-oss";
  // Gemma scales embeddings by sqrt(d): keep the scaled rows near unit RMS.
  add("token_embd.weight", {d, s.vocab},
      gen.normal(int64_t{s.vocab} * d, gemma ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0));
  if (!s.rope_freqs.empty())
    add("rope_freqs.weight", {static_cast<int64_t>(s.rope_freqs.size())}, s.rope_freqs);
  std::vector<bool> owned(s.cache_kv_heads.size(), false);
  for (int32_t i = 0; i < n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const int32_t c = s.layer_cache[i];
    const int64_t qd = int64_t{s.q_heads} * s.head_dim;
    const int64_t kd = int64_t{s.cache_kv_heads[c]} * s.head_dim;
    add(p + "attn_norm.weight", {d}, gen.normal(d, 0.1, 1.0));
    add(p + "attn_q.weight", {d, qd}, mat(qd, d));
    if (s.bias) add(p + "attn_q.bias", {qd}, gen.normal(qd, 0.2));
    if (s.qk_norm) add(p + "attn_q_norm.weight", {s.head_dim}, gen.normal(s.head_dim, 0.1, 1.0));
    if (!owned[c]) {
      owned[c] = true;
      add(p + "attn_k.weight", {d, kd}, mat(kd, d));
      add(p + "attn_v.weight", {d, kd}, mat(kd, d));
      if (s.bias) {
        add(p + "attn_k.bias", {kd}, gen.normal(kd, 0.2));
        add(p + "attn_v.bias", {kd}, gen.normal(kd, 0.2));
      }
      if (s.qk_norm)
        add(p + "attn_k_norm.weight", {s.head_dim}, gen.normal(s.head_dim, 0.1, 1.0));
    }
    add(p + "attn_output.weight", {qd, d}, mat(d, qd));
    if (gpt_oss) add(p + "attn_output.bias", {d}, gen.normal(d, 0.2));
    add(p + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), {d},
        gen.normal(d, 0.1, 1.0));
    if (s.n_expert > 0) {
      const int64_t n = s.stack_experts > 0 ? s.stack_experts : s.n_expert, ff = s.d_ff_expert;
      add(p + "ffn_gate_inp.weight", {d, s.n_expert}, gen.normal(s.n_expert * d, 2.0 / std::sqrt(d)));
      const struct {
        const char* name;
        int64_t rows, cols;
      } stacks[] = {{"gate", ff, d}, {"up", ff, d}, {"down", d, ff}};
      for (const auto& m : stacks) {
        std::vector<float> v = mat(n * m.rows, m.cols);
        if (!s.split_experts) {
          add(p + "ffn_" + m.name + "_exps.weight", {m.cols, m.rows, n}, std::move(v));
          continue;
        }
        const auto per = static_cast<size_t>(m.rows * m.cols);
        for (int64_t e = 0; e < n; ++e)  // typed as the stacks would be
          add(p + "ffn_" + m.name + "." + std::to_string(e) + ".weight", {m.cols, m.rows, 0},
              std::vector<float>(v.begin() + e * per, v.begin() + (e + 1) * per));
      }
      if (gpt_oss) {  // gate/up biases of 4: the activation's clamps at 7 are reached
        add(p + "ffn_gate_inp.bias", {s.n_expert}, gen.normal(s.n_expert, 0.5));
        add(p + "ffn_gate_exps.bias", {ff, n}, gen.normal(n * ff, 4.0));
        add(p + "ffn_up_exps.bias", {ff, n}, gen.normal(n * ff, 4.0));
        add(p + "ffn_down_exps.bias", {d, n}, gen.normal(n * d, 0.5));
      }
    } else {
      add(p + "ffn_gate.weight", {d, s.d_ff}, mat(s.d_ff, d));
      add(p + "ffn_up.weight", {d, s.d_ff}, mat(s.d_ff, d));
      add(p + "ffn_down.weight", {s.d_ff, d}, mat(d, s.d_ff));
    }
    if (gemma) {
      add(p + "post_attention_norm.weight", {d}, gen.normal(d, 0.1, 1.0));
      add(p + "post_ffw_norm.weight", {d}, gen.normal(d, 0.1, 1.0));
    }
  }
  add("output_norm.weight", {d}, gen.normal(d, 0.1, 1.0));
  if (!s.tied) add("output.weight", {d, s.vocab}, mat(s.vocab, d));
  // Drawn last, so a spec with sinks has the same other weights as the one without.
  for (int32_t i = 0; s.sinks > 0 && i < n_layers; ++i)
    add("blk." + std::to_string(i) + ".attn_sinks.weight", {s.sinks},
        gen.normal(s.sinks, 1.5, 0.5));
  return w.bytes();
}

gguf::GgufFile tiny_file(const TinySpec& spec) {
  std::vector<uint8_t> bytes = tiny_model_bytes(spec);
  Result<gguf::GgufFile> f = gguf::GgufFile::parse(bytes);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return std::move(*f);
}

Model tiny_model(const TinySpec& spec) {
  gguf::GgufFile f = tiny_file(spec);
  Result<Model> m = Model::load(f);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(*m);
}

}  // namespace kvcache::engine::testing
