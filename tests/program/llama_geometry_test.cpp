// Geometry derived from llama.cpp-style keys (no kvcache.* keys): per-architecture sliding
// patterns, per-layer kv head arrays, explicit patterns and Gemma-3n KV sharing.
#include <gtest/gtest.h>

#include "program/model_geometry.h"

namespace kvcache {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;

GgufWriter llama_style(const std::string& arch, uint32_t layers, uint32_t window) {
  GgufWriter w;
  w.set_string("general.architecture", arch);
  const std::string p = arch + ".";
  w.set_uint32(p + "block_count", layers);
  w.set_uint32(p + "embedding_length", 256);
  w.set_uint32(p + "attention.head_count", 8);
  w.set_uint32(p + "attention.head_count_kv", 2);
  w.set_uint32(p + "context_length", 4096);
  if (window > 0) w.set_uint32(p + "attention.sliding_window", window);
  return w;
}

Result<ModelGeometry> derive(const GgufWriter& w) {
  auto f = GgufFile::parse(w.bytes());
  if (!f.ok()) return f.status();
  return read_model_geometry(*f);
}

std::vector<int32_t> windows(const ModelGeometry& g) {
  std::vector<int32_t> out;
  for (const auto& l : g.cache.layers) out.push_back(l.window);
  return out;
}

TEST(LlamaGeometry, PlainLlamaHasFullLayersAndDefaultWidths) {
  auto g = derive(llama_style("llama", 3, 0));
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->cache.layers.size(), 3u);
  // head_dim = embedding_length / head_count = 256 / 8.
  EXPECT_EQ(g->cache.layers[0], (LayerGeometry{2, 32, 32, 0}));
  EXPECT_EQ(g->layer_cache, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(g->max_context, 4096);
}

TEST(LlamaGeometry, QwenWithASlidingWindowButNoPatternStaysFull) {
  auto g = derive(llama_style("qwen2", 2, 4096));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{0, 0}));
}

TEST(LlamaGeometry, Gemma2SlidesOnEveryOtherLayerFromZero) {
  auto w = llama_style("gemma2", 4, 4096);
  w.set_uint32("gemma2.attention.key_length", 128);
  w.set_uint32("gemma2.attention.value_length", 96);
  auto g = derive(w);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{4096, 0, 4096, 0}));
  EXPECT_EQ(g->cache.layers[0].head_dim, 128);
  EXPECT_EQ(g->cache.layers[0].value_dim, 96);
}

TEST(LlamaGeometry, Gemma2WithoutAWindowKeySlidesAtTheGemma2Default4096) {
  auto g = derive(llama_style("gemma2", 3, 0));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{4096, 0, 4096}));
  // gemma3 has no such default: without the key no layer slides.
  auto g3 = derive(llama_style("gemma3", 3, 0));
  ASSERT_TRUE(g3.ok());
  EXPECT_EQ(windows(*g3), (std::vector<int32_t>{0, 0, 0}));
}

TEST(LlamaGeometry, Gemma3SlidesFiveThenOneFull) {
  auto g = derive(llama_style("gemma3", 8, 512));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{512, 512, 512, 512, 512, 0, 512, 512}));
}

TEST(LlamaGeometry, Cohere2SlidesThreeThenOneFull) {
  auto g = derive(llama_style("cohere2", 8, 4096));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{4096, 4096, 4096, 0, 4096, 4096, 4096, 0}));
}

TEST(LlamaGeometry, GptOssAlternatesFromLayerZero) {
  auto g = derive(llama_style("gpt-oss", 4, 128));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{128, 0, 128, 0}));
}

TEST(LlamaGeometry, ExplicitPatternPeriodAndBoolArrayOverrideTheArchitecture) {
  auto w = llama_style("llama", 6, 64);
  w.set_uint32("llama.attention.sliding_window_pattern", 3);
  auto g = derive(w);
  ASSERT_TRUE(g.ok());
  // (i + 1) % 3 != 0 slides.
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{64, 64, 0, 64, 64, 0}));
  auto v = llama_style("gemma3", 3, 64);
  v.set("gemma3.attention.sliding_window_pattern",
        gguf::array_value(gguf::ValueType::kBool,
                          {gguf::bool_value(false), gguf::bool_value(true), gguf::bool_value(true)}));
  auto h = derive(v);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(windows(*h), (std::vector<int32_t>{0, 64, 64}));
  auto bad = llama_style("gemma3", 3, 64);
  bad.set("gemma3.attention.sliding_window_pattern",
          gguf::array_value(gguf::ValueType::kBool, {gguf::bool_value(true)}));
  EXPECT_EQ(derive(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(LlamaGeometry, PerLayerKvHeadArrayGivesPerLayerHeads) {
  auto w = llama_style("llama", 3, 0);
  const int32_t kv[] = {8, 4, 2};
  w.set_int32_array("llama.attention.head_count_kv", kv);
  auto g = derive(w);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->cache.layers[0].kv_heads, 8);
  EXPECT_EQ(g->cache.layers[1].kv_heads, 4);
  EXPECT_EQ(g->cache.layers[2].kv_heads, 2);
}

TEST(LlamaGeometry, ZeroKvHeadsOnALayerIsRefusedClearly) {
  auto w = llama_style("llama", 3, 0);
  const int32_t kv[] = {8, 0, 2};
  w.set_int32_array("llama.attention.head_count_kv", kv);
  auto g = derive(w);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("llama.attention.head_count_kv[1] = 0"), std::string::npos)
      << g.status().message();
  auto short_array = llama_style("llama", 3, 0);
  short_array.set_int32_array("llama.attention.head_count_kv", std::vector<int32_t>{8, 8});
  EXPECT_EQ(derive(short_array).status().code(), StatusCode::kInvalidArgument);
}

TEST(LlamaGeometry, Gemma3nSharedLayersReadTheLastEarlierLayerOfTheirType) {
  // 35 layers, period 5 (4 sliding then 1 full), last 15 share: caches are layers 0..19.
  auto w = llama_style("gemma3n", 35, 512);
  w.set_uint32("gemma3n.attention.shared_kv_layers", 15);
  auto g = derive(w);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->cache.layers.size(), 20u);
  ASSERT_EQ(g->layer_cache.size(), 35u);
  for (int32_t i = 0; i < 20; ++i) EXPECT_EQ(g->layer_cache[i], i);
  for (int32_t i = 20; i < 35; ++i) {
    const bool sliding = (i + 1) % 5 != 0;
    // Layer 18 is the last sliding owner, layer 19 the last full owner.
    EXPECT_EQ(g->layer_cache[i], sliding ? 18 : 19) << "layer " << i;
  }
  EXPECT_EQ(g->cache.layers[19].window, 0);
  EXPECT_EQ(g->cache.layers[18].window, 512);
}

// gpt-oss's learned attention sinks: a cache layer has the flag exactly when its owning model
// layer carries blk.N.attn_sinks.weight, whether the geometry comes from llama.cpp's keys or
// from kvcache.* keys.
TEST(LlamaGeometry, AttnSinksTensorsSetTheSinksFlagOfTheirCacheLayers) {
  auto w = llama_style("gpt-oss", 4, 128);
  const std::vector<float> sinks(8, 0.5f);
  for (int layer : {0, 1, 3})
    ASSERT_TRUE(w.add_tensor_f32(sink_tensor_name(layer), {8}, sinks).ok());
  auto g = derive(w);
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::vector<bool> flags;
  for (const auto& l : g->cache.layers) flags.push_back(l.sinks);
  EXPECT_EQ(flags, (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(windows(*g), (std::vector<int32_t>{128, 0, 128, 0}));
  EXPECT_EQ(sink_tensor_name(3), "blk.3.attn_sinks.weight");
  ModelGeometry keyed = *g;
  for (auto& l : keyed.cache.layers) l.sinks = false;  // the keys carry no flags
  ASSERT_TRUE(write_model_geometry(keyed, w).ok());
  auto again = derive(w);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->cache, g->cache);
}

// Two model layers reading one cache layer must agree on sinks: the cache applies one flag.
TEST(LlamaGeometry, SharedLayersDisagreeingOnSinksAreRefusedNamingBothTensors) {
  // Period 5: layers 0-3 and 5 slide; the shared layer 5 reads layer 3, the last sliding owner.
  auto w = llama_style("gemma3n", 6, 512);
  w.set_uint32("gemma3n.attention.shared_kv_layers", 1);
  const std::vector<float> sinks(8, 0.0f);
  ASSERT_TRUE(w.add_tensor_f32(sink_tensor_name(5), {8}, sinks).ok());
  auto g = derive(w);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(),
            "gguf: blk.5.attn_sinks.weight is present but blk.3.attn_sinks.weight is absent; "
            "model layers 3 and 5 read cache layer 3, which applies one sinks flag");
}

TEST(LlamaGeometry, SharedLayerCountMustLeaveAnOwner) {
  auto w = llama_style("gemma3n", 4, 0);
  w.set_uint32("gemma3n.attention.shared_kv_layers", 4);
  auto g = derive(w);
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("shared_kv_layers = 4"), std::string::npos);
}

TEST(LlamaGeometry, AbsurdLayerCountsAreRefusedBeforeBuildingLayers) {
  auto g = derive(llama_style("llama", 5000, 0));
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("block_count = 5000, expected 1..4096"), std::string::npos)
      << g.status().message();
}

TEST(LlamaGeometry, MissingArchitectureOrBlockCountIsAnError) {
  GgufWriter w;
  w.set_uint32("k", 1);
  EXPECT_EQ(derive(w).status().code(), StatusCode::kNotFound);
  GgufWriter v;
  v.set_string("general.architecture", "llama");
  EXPECT_EQ(derive(v).status().code(), StatusCode::kNotFound);
  auto no_width = llama_style("llama", 2, 0);
  no_width.set_uint32("llama.embedding_length", 0);
  EXPECT_EQ(derive(no_width).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcache
