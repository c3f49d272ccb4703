// Model loading errors and cache planning: window override, step lowering, invalid options.
#include <gtest/gtest.h>

#include <string>

#include "engine/cache_setup.h"
#include "engine/model.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

TEST(ModelLoad, ReadsHyperparametersAndGeometry) {
  Model m = tiny_model(TinySpec{});
  EXPECT_EQ(m.hparams().arch, "llama");
  EXPECT_EQ(m.hparams().n_layers, 4);
  EXPECT_EQ(m.hparams().vocab, 260);
  EXPECT_EQ(m.hparams().rope_dim, 8);  // defaults to key_length
  EXPECT_TRUE(m.hparams().rope_interleaved);
  EXPECT_EQ(m.geometry().max_step_tokens, 8);
  EXPECT_FALSE(m.tied());
}

TEST(ModelLoad, MissingTensorIsNamed) {
  TinySpec s;
  s.skip_tensors = {"blk.2.ffn_up.weight"};
  gguf::GgufFile f = tiny_file(s);
  Result<Model> m = Model::load(f);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("blk.2.ffn_up.weight"), std::string::npos);
}

TEST(ModelLoad, MissingKvProjectionOnAnOwningLayerIsNamed) {
  TinySpec s;
  s.skip_tensors = {"blk.1.attn_v.weight"};
  gguf::GgufFile f = tiny_file(s);
  Result<Model> m = Model::load(f);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.1.attn_v.weight"), std::string::npos);
}

TEST(ModelLoad, WrongShapeIsNamedWithExpectedDims) {
  gguf::GgufWriter w;
  std::vector<uint8_t> good = tiny_model_bytes(TinySpec{});
  gguf::GgufFile f = gguf::GgufFile::parse(good).value();
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<int64_t> dims = t.dims;
    if (t.name == "blk.0.attn_q.weight") std::swap(dims[0], dims[1]);  // 32x32 stays square
    if (t.name == "blk.0.ffn_gate.weight") dims = {48, 32};            // transposed
    ASSERT_TRUE(w.add_tensor(t.name, t.type, dims,
                             std::vector<uint8_t>(t.bytes.begin(), t.bytes.end())).ok());
  }
  std::vector<uint8_t> bad = w.bytes();
  gguf::GgufFile g = gguf::GgufFile::parse(bad).value();
  Result<Model> m = Model::load(g);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("blk.0.ffn_gate.weight has GGUF dims [48, 32], "
                                      "expected [32, 48]"),
            std::string::npos)
      << m.status().message();
}

TEST(ModelLoad, UnknownArchitectureIsRefused) {
  TinySpec s;
  s.arch = "gpt9";
  gguf::GgufFile f = tiny_file(s);
  Result<Model> m = Model::load(f);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("gpt9"), std::string::npos);
}

TEST(CacheSetup, WindowOverrideChangesOnlyPolicies) {
  Model m = tiny_model(TinySpec{});
  CacheOptions o;
  o.windows = {0, 6};
  CacheSetup s = *plan_cache(m, o);
  ASSERT_EQ(s.geometry.layers.size(), 3u);
  // Cycled: cache layers 0, 1, 2 get 0, 6, 0.
  EXPECT_EQ(s.geometry.layers[0].window, 0);
  EXPECT_EQ(s.geometry.layers[1].window, 6);
  EXPECT_EQ(s.geometry.layers[2].window, 0);
  for (size_t i = 0; i < 3; ++i) {
    LayerGeometry want = m.geometry().cache.layers[i];
    want.window = s.geometry.layers[i].window;
    EXPECT_EQ(s.geometry.layers[i], want);
  }
  EXPECT_EQ(s.step_tokens, 8);  // the model's 8, wider than the Sliding(6) layer
  EXPECT_EQ(s.config.max_write, 8);
}

// A step wider than a window is kept (a 128-token window must not hold a prefill to 128-token
// steps); the window's ring widens to W + step - 1 slots instead.
TEST(CacheSetup, AStepWiderThanAWindowIsKeptAndWidensTheRing) {
  Model m = tiny_model(TinySpec{});
  CacheOptions o;
  o.windows = {2};
  o.max_step_tokens = 16;
  CacheSetup s = *plan_cache(m, o);
  EXPECT_EQ(s.step_tokens, 16);
  EXPECT_EQ(*s.config.max_write, 16);
  EXPECT_EQ(sequence_slots(s.geometry.layers[0], s.config), 2 + 16 - 1);
  EXPECT_TRUE(build_cache(s).ok());
}

TEST(CacheSetup, DefaultsComeFromTheModel) {
  Model m = tiny_model(TinySpec{});
  CacheSetup s = *plan_cache(m, CacheOptions{});
  EXPECT_EQ(s.config.capacity, 256);  // min(max_context 256, 4096)
  EXPECT_EQ(s.step_tokens, 8);        // the model's, though its Sliding(4) layer is narrower
  EXPECT_EQ(s.kind, "sequence");
}

TEST(CacheSetup, MaxSeqsReachesTheCellConfigAndDefaultsToTheLayouts) {
  Model m = tiny_model(TinySpec{});
  CacheOptions o;
  o.kind = "cell";
  EXPECT_FALSE(plan_cache(m, o)->config.max_seqs.has_value());  // the layout's default
  o.max_seqs = 12;
  Result<CacheSetup> s = plan_cache(m, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->config.max_seqs, 12);
  EXPECT_TRUE(build_cache(*s).ok());
}

TEST(CacheSetup, InvalidOptionsAreRefusedByName) {
  Model m = tiny_model(TinySpec{});
  CacheOptions o;
  o.windows = {4, -1};
  Result<CacheSetup> s = plan_cache(m, o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("cache options: windows[1] = -1"), std::string::npos);
  o = CacheOptions{};
  o.kind = "paged";
  EXPECT_NE(plan_cache(m, o).status().message().find("cache options: kind = \"paged\""), std::string::npos);
  o = CacheOptions{};
  o.capacity = 0;
  EXPECT_NE(plan_cache(m, o).status().message().find("cache options: capacity = 0"), std::string::npos);
  o = CacheOptions{};
  o.max_step_tokens = -3;
  EXPECT_NE(plan_cache(m, o).status().message().find("cache options: max_step_tokens = -3"),
            std::string::npos);
  o = CacheOptions{};
  o.kind = "cell";
  o.max_seqs = 0;
  EXPECT_EQ(plan_cache(m, o).status().message(), "cache options: max_seqs = 0, expected >= 1");
  o = CacheOptions{};
  o.max_seqs = 4;  // the sequence layout holds one sequence
  EXPECT_EQ(plan_cache(m, o).status().message(),
            "cache options: max_seqs = 4 applies to the cell kind only (kind = sequence)");
  o = CacheOptions{};
  o.windows = {};  // an empty override is no override
  EXPECT_TRUE(plan_cache(m, o).ok());
}

}  // namespace
}  // namespace kvcache::engine::testing
