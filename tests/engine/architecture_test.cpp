// The architectures beyond plain llama/qwen: what gemma2/gemma3 files and Llama 3.1's
// rope_freqs.weight mean (hyperparameters, required tensors, the 27B attention-scale rule),
// refusals naming the value, and the cached forward equal to the no-cache reference for each
// through both layouts. The interpretation itself is pinned against the independent Python
// reference by the engine_arch_golden_* tests.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

constexpr double kTol = 1e-4;

TinySpec gemma2_spec() {
  TinySpec s;
  s.arch = "gemma2";
  s.cache_windows = {4, 0, 4};  // sliding layers use rope_base_swa (= rope_base in gemma2)
  s.attn_softcap = 1.5f;
  s.final_softcap = 3.0f;
  s.tied = true;
  return s;
}

TinySpec gemma3_spec() {
  TinySpec s;
  s.arch = "gemma3";
  s.qk_norm = true;
  s.rope_base = 1e6f;
  s.rope_linear = 4.0f;
  s.tied = true;
  return s;
}

// A header-only file (keys + a token_embd of [d = 48, vocab 4]) for read_hparams.
gguf::GgufFile header(const std::string& arch, uint32_t layers,
                      void (*extra)(gguf::GgufWriter&, const std::string&) = nullptr) {
  gguf::GgufWriter w;
  const std::string a = arch + ".";
  w.set_string("general.architecture", arch);
  w.set_uint32(a + "block_count", layers);
  w.set_uint32(a + "embedding_length", 48);
  w.set_uint32(a + "feed_forward_length", 64);
  w.set_uint32(a + "attention.head_count", 4);
  w.set_uint32(a + "attention.key_length", 16);
  w.set_uint32(a + "attention.value_length", 16);
  if (extra) extra(w, a);
  EXPECT_TRUE(w.add_tensor_f32("token_embd.weight", {48, 4}, std::vector<float>(48 * 4)).ok());
  return gguf::GgufFile::parse(w.bytes()).value();
}

TEST(Architecture, Gemma2ReadsSoftcapsScaleGeluAndPostNorms) {
  Model m = tiny_model(gemma2_spec());
  const HParams& h = m.hparams();
  EXPECT_FALSE(h.rope_interleaved);  // rotate-half, as the HF checkpoint
  EXPECT_FLOAT_EQ(h.embed_scale, std::sqrt(32.0f));
  EXPECT_FLOAT_EQ(h.attn_scale, 1.0f / std::sqrt(8.0f));  // query_pre_attn_scalar = key_length
  EXPECT_FLOAT_EQ(h.attn_softcap, 1.5f);
  EXPECT_FLOAT_EQ(h.final_softcap, 3.0f);
  EXPECT_EQ(h.ffn_act, FfnActivation::kGeluTanh);
  EXPECT_EQ(m.layers()[0].post_attn_norm.size(), 32u);
  EXPECT_EQ(m.layers()[0].post_ffn_norm.size(), 32u);
  // layer_cache {0, 1, 2, 1} over windows {4, 0, 4}: model layers 0, 2 slide; 1 and 3 read
  // the full cache 1.
  EXPECT_TRUE(m.layers()[0].sliding);
  EXPECT_FALSE(m.layers()[1].sliding);
  EXPECT_TRUE(m.layers()[2].sliding);
  EXPECT_FALSE(m.layers()[3].sliding);
}

TEST(Architecture, Gemma2SoftcapsDefaultToTheGemma2ValuesWhenAbsent) {
  Result<HParams> h = read_hparams(header("gemma2", 4));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_FLOAT_EQ(h->attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(h->final_softcap, 30.0f);
  EXPECT_FLOAT_EQ(h->rope_base_swa, 10000.0f);
}

TEST(Architecture, The27BSizesScaleAttentionByWidthOverHeads) {
  // 46-layer gemma2 / 62-layer gemma3: 1/sqrt(48 / 4) = 1/sqrt(12); other sizes 1/sqrt(16).
  EXPECT_FLOAT_EQ(read_hparams(header("gemma2", 46))->attn_scale, 1.0f / std::sqrt(12.0f));
  EXPECT_FLOAT_EQ(read_hparams(header("gemma2", 45))->attn_scale, 0.25f);
  EXPECT_FLOAT_EQ(read_hparams(header("gemma3", 62))->attn_scale, 1.0f / std::sqrt(12.0f));
  EXPECT_FLOAT_EQ(read_hparams(header("gemma3", 46))->attn_scale, 0.25f);
  EXPECT_FLOAT_EQ(read_hparams(header("llama", 46))->attn_scale, 0.25f);
}

TEST(Architecture, Gemma3SlidingLayersUseTheLocalBaseUnscaledAndNoSoftcaps) {
  Model m = tiny_model(gemma3_spec());
  const HParams& h = m.hparams();
  EXPECT_FLOAT_EQ(h.rope_base, 1e6f);
  EXPECT_FLOAT_EQ(h.rope_linear, 4.0f);
  EXPECT_FLOAT_EQ(h.rope_base_swa, 10000.0f);
  EXPECT_FLOAT_EQ(h.rope_linear_swa, 1.0f);
  EXPECT_EQ(h.attn_softcap, 0.0f);
  EXPECT_EQ(h.final_softcap, 0.0f);
  EXPECT_EQ(m.layers()[0].q_norm.size(), 8u);
  Result<HParams> local = read_hparams(header("gemma3", 6, [](gguf::GgufWriter& w,
                                                                 const std::string& a) {
    w.set_float32(a + "rope.freq_base_swa", 20000.0f);
    w.set_float32(a + "attn_logit_softcapping", 5.0f);  // not a gemma3 key: ignored
  }));
  ASSERT_TRUE(local.ok());
  EXPECT_FLOAT_EQ(local->rope_base_swa, 20000.0f);
  EXPECT_EQ(local->attn_softcap, 0.0f);
}

TEST(Architecture, GemmaRequiredNormsAreNamedWhenMissing) {
  TinySpec s = gemma3_spec();
  s.skip_tensors = {"blk.2.attn_q_norm.weight"};
  gguf::GgufFile f = tiny_file(s);
  Result<Model> m = Model::load(f);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("blk.2.attn_q_norm.weight"), std::string::npos);
  TinySpec t = gemma2_spec();
  t.skip_tensors = {"blk.3.post_ffw_norm.weight"};
  gguf::GgufFile g = tiny_file(t);
  m = Model::load(g);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("blk.3.post_ffw_norm.weight"), std::string::npos);
}

TEST(Architecture, UnknownArchitectureIsRefusedByNameBeforeAnyOtherKey) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "rwkv6");
  Result<HParams> h = read_hparams(gguf::GgufFile::parse(w.bytes()).value());
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("general.architecture = \"rwkv6\" is not supported"),
            std::string::npos)
      << h.status().message();
  EXPECT_NE(h.status().message().find("gemma3"), std::string::npos);
}

// YaRN (rope.scaling.type = yarn): its keys are read, the magnitude factor derived; a file
// without the original context length, with beta_fast <= beta_slow, or on gemma3 is refused by
// name, and an unknown scaling type names the ones that exist.
TEST(Architecture, YarnRopeScalingReadsItsKeysAndRefusesIncompleteOnes) {
  using Extra = void (*)(gguf::GgufWriter&, const std::string&);
  // The yarn keys every case shares, then the case's own.
  static Extra more = nullptr;
  auto yarn = [](const std::string& arch, Extra extra) {
    more = extra;
    return read_hparams(header(arch, 2, [](gguf::GgufWriter& w, const std::string& a) {
      w.set_string(a + "rope.scaling.type", "yarn");
      w.set_float32(a + "rope.scaling.factor", 4.0f);
      more(w, a);
    }));
  };
  Result<HParams> h = yarn("llama", [](gguf::GgufWriter&, const std::string&) {});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(h.status().message(),
            "load model: gguf: key 'llama.rope.scaling.original_context_length' not found");
  h = yarn("llama", [](gguf::GgufWriter& w, const std::string& a) {
    w.set_uint32(a + "rope.scaling.original_context_length", 2048);
  });
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->rope_yarn_factor, 4.0f);
  EXPECT_EQ(h->rope_yarn_orig_ctx, 2048);
  EXPECT_EQ(h->rope_yarn_beta_fast, 32.0f);  // llama.cpp's defaults
  EXPECT_EQ(h->rope_yarn_beta_slow, 1.0f);
  EXPECT_NEAR(h->rope_attn_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);  // 1.1386
  EXPECT_EQ(h->rope_linear, 1.0f);
  h = yarn("llama", [](gguf::GgufWriter& w, const std::string& a) {
    w.set_uint32(a + "rope.scaling.original_context_length", 2048);
    w.set_float32(a + "rope.scaling.yarn_beta_fast", 1.0f);
  });
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("expected beta_fast > beta_slow"), std::string::npos)
      << h.status().message();
  h = yarn("gemma3", [](gguf::GgufWriter& w, const std::string& a) {
    w.set_uint32(a + "rope.scaling.original_context_length", 2048);
  });
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("gemma3.rope.scaling.type = \"yarn\" is not supported for "
                                      "gemma3"),
            std::string::npos)
      << h.status().message();
  h = read_hparams(header("llama", 2, [](gguf::GgufWriter& w, const std::string& a) {
    w.set_string(a + "rope.scaling.type", "longrope");
  }));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find(
                "llama.rope.scaling.type = \"longrope\" is not supported, expected \"linear\", "
                "\"yarn\" or \"none\""),
            std::string::npos)
      << h.status().message();
}

TEST(Architecture, GptOssReadsYarnExpertsAndItsTraits) {
  Result<HParams> h = read_hparams(header("gpt-oss", 2, [](gguf::GgufWriter& w,
                                                           const std::string& a) {
    w.set_uint32(a + "context_length", 131072);
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_float32(a + "rope.scaling.factor", 32.0f);
    w.set_uint32(a + "rope.scaling.original_context_length", 4096);
    w.set_uint32(a + "expert_count", 4);
    w.set_uint32(a + "expert_used_count", 2);
    w.set_uint32(a + "expert_feed_forward_length", 32);
    w.set_bool(a + "expert_weights_norm", false);  // gpt-oss softmaxes the chosen logits
  }));
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_TRUE(h->gpt_oss);
  EXPECT_FALSE(h->rope_interleaved);  // NEOX pairs (i, i + r/2)
  EXPECT_EQ(h->ffn_act, FfnActivation::kSwigluOai);
  EXPECT_FLOAT_EQ(h->attn_scale, 0.25f);  // 1 / sqrt(16)
  EXPECT_FLOAT_EQ(h->rope_yarn_factor, 32.0f);
  EXPECT_NEAR(h->rope_attn_factor, 0.1 * std::log(32.0) + 1.0, 1e-6);  // 1.3466
  EXPECT_EQ(h->rope_yarn_orig_ctx, 4096);
  EXPECT_FLOAT_EQ(h->rope_linear, 1.0f);
  EXPECT_EQ(h->n_expert, 4);
  EXPECT_EQ(h->n_expert_used, 2);
  EXPECT_TRUE(h->expert_weights_norm);
}

TEST(Architecture, RopeFreqsAreLoadedAndBadOnesRefusedByIndex) {
  TinySpec s;
  s.rope_freqs = {1.0f, 2.0f, 4.0f, 8.0f};  // head_dim 8: 4 pairs
  Model m = tiny_model(s);
  EXPECT_EQ(m.rope_freqs(), s.rope_freqs);
  s.rope_freqs = {1.0f, 2.0f, 4.0f};
  Result<Model> r = Model::load(tiny_file(s));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rope_freqs.weight has GGUF dims [3], expected [4]"),
            std::string::npos)
      << r.status().message();
  s.rope_freqs = {1.0f, 2.0f, -4.0f, 8.0f};
  r = Model::load(tiny_file(s));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rope_freqs.weight[2] = -4"), std::string::npos)
      << r.status().message();
}

// The cached forward equals the no-cache reference: both layouts, chunks of 3, 21 positions
// over Sliding(4) layers.
void expect_cached_equals_reference(const TinySpec& spec) {
  Model model = tiny_model(spec);
  for (const char* kind : {"sequence", "cell"}) {
    CacheOptions o;
    o.kind = kind;
    o.capacity = 64;
    Built b = build(model, o);
    const std::vector<int32_t> tokens = some_tokens(21, model.hparams().vocab, 5);
    std::vector<float> got = cached_logits(b, tokens, 3);
    EXPECT_LE(rel_diff(got, reference_logits(model, tokens)), kTol) << spec.arch << " " << kind;
  }
}

TEST(Architecture, Gemma2CachedForwardMatchesReference) {
  expect_cached_equals_reference(gemma2_spec());
}

TEST(Architecture, Gemma3CachedForwardMatchesReference) {
  expect_cached_equals_reference(gemma3_spec());
}

TEST(Architecture, LlamaWithRopeFreqsCachedForwardMatchesReference) {
  TinySpec s;
  s.rope_freqs = {1.0f, 2.5f, 4.0f, 8.0f};
  expect_cached_equals_reference(s);
}

}  // namespace
}  // namespace kvcache::engine::testing
