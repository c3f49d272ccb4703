// Cache summary: per-layer bytes, grouping, capacity arithmetic and sliding savings.
#include <gtest/gtest.h>

#include "program/cache_summary.h"

namespace kvcache {
namespace {

TEST(CacheSummary, ExampleGeometryGroupsAndBytes) {
  const ModelGeometry g = example_model_geometry();
  SummaryOptions o;
  o.config.capacity = 4096;
  o.config.kv_dtype = DType::kF16;
  const auto j = cache_summary_json(g, o);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["groups"], "26 layers: 4 full + 22 sliding(512)");
  ASSERT_EQ(j["layers"].size(), 26u);
  // Per layer: 4 heads * (256 + 256) * 2 bytes = 4096.
  EXPECT_EQ(j["layers"][0]["bytes_per_cell"], 4096);
  EXPECT_EQ(j["layers"][0]["window"], 512);
  EXPECT_EQ(j["layers"][5]["window"], 0);
  EXPECT_EQ(j["bytes_per_cell"], 26 * 4096);
  EXPECT_EQ(j["bytes_at_capacity"], int64_t{26} * 4096 * 4096);
  EXPECT_EQ(j["kv_dtype"], "f16");
  EXPECT_EQ(j["capacity"], 4096);
  // Sliding ring: 512 + 512 - 1 = 1023 slots instead of 4096, on 22 layers.
  EXPECT_EQ(j["layers"][0]["slots"], 1023);
  EXPECT_EQ(j["sliding_saving_bytes"], int64_t{22} * (4096 - 1023) * 4096);
  EXPECT_EQ(j["layer_cache"].size(), 26u);
}

TEST(CacheSummary, MixedKeyAndValueTypesCountBytesExactly) {
  // A Llama-3-8B-like cache: 32 full layers of 8 kv heads x 128. f16: 8 x 2 x 256 = 4096 B a
  // layer; q8_0 K and V 8 x 2 x 136 = 2176 (0.53x); q4_0 8 x 2 x 72 = 1152 (0.28x); q8_0 K
  // with f16 V 8 x (136 + 256) = 3136.
  ModelGeometry g;
  g.cache.layers.assign(32, LayerGeometry{8, 128, 128, 0});
  for (int32_t i = 0; i < 32; ++i) g.layer_cache.push_back(i);
  SummaryOptions o;
  o.config.capacity = 8192;
  o.config.kv_dtype = DType::kQ8_0;
  auto j = cache_summary_json(g, o);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["bytes_per_cell"], 32 * 2176);
  EXPECT_EQ(j["bytes_per_cell_f16"], 32 * 4096);
  EXPECT_EQ(j["kv_dtype"], "q8_0");
  o.config.kv_dtype = DType::kQ4_0;
  EXPECT_EQ(cache_summary_json(g, o)["bytes_per_cell"], 32 * 1152);
  o.config.kv_dtype = DType::kF16;
  o.config.k_dtype = DType::kQ8_0;
  j = cache_summary_json(g, o);
  EXPECT_EQ(j["bytes_per_cell"], 32 * 3136);
  EXPECT_EQ(j["kv_dtype"], "k=q8_0,v=f16");
  EXPECT_EQ(j["k_dtype"], "q8_0");
  EXPECT_EQ(j["v_dtype"], "f16");
  EXPECT_EQ(j["pools"][0]["bytes"], int64_t{32} * 3136 * 8192);
  EXPECT_NE(cache_summary_text(g, o).find("K/V bytes per cell 100352 = 0.766x f16 (131072)"),
            std::string::npos)
      << cache_summary_text(g, o);
  // A block type on a 40-wide head: refused, naming layer, width and type.
  g.cache.layers[3].head_dim = 40;
  j = cache_summary_json(g, o);
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"], "cache config: layers[3].head_dim = 40, expected a multiple of 32 for "
                        "k_dtype q8_0");
}

TEST(CacheSummary, SessionsSetTheCapacityWhenItIsUnset) {
  SummaryOptions o;
  o.sessions = 4;
  o.session_tokens = 1000;
  EXPECT_EQ(summary_capacity(o), 4000);
  ModelGeometry g;
  g.cache.layers = {{2, 8, 8, 0}};
  g.layer_cache = {0, 0};  // two model layers read one cache
  const auto j = cache_summary_json(g, o);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["capacity"], 4000);
  EXPECT_EQ(j["bytes_per_session"], 1000 * 2 * 16 * 4);  // f32 by default
  EXPECT_EQ(j["groups"], "2 layers: 2 full");
  EXPECT_EQ(j["layers"][0]["model_layers"], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(j["sliding_saving_bytes"], 0);
}

TEST(CacheSummary, InvalidInputsGiveAnErrorObject) {
  ModelGeometry g;
  g.cache.layers = {{0, 8, 8, 0}};
  SummaryOptions o;
  o.config.capacity = 16;
  EXPECT_TRUE(cache_summary_json(g, o).contains("error"));
  g.cache.layers = {{1, 8, 8, 0}};
  o.config.capacity = 0;
  EXPECT_TRUE(cache_summary_json(g, o).contains("error"));
  EXPECT_NE(cache_summary_text(g, o).find("capacity"), std::string::npos);
}

TEST(CacheSummary, TextHasATableAndHumanUnits) {
  SummaryOptions o;
  o.config.capacity = 1024;
  o.config.kv_dtype = DType::kBF16;
  const std::string t = cache_summary_text(example_model_geometry(), o);
  EXPECT_NE(t.find("26 layers: 4 full + 22 sliding(512)"), std::string::npos) << t;
  EXPECT_NE(t.find("sliding(512)"), std::string::npos);
  EXPECT_NE(t.find("104.00 KiB"), std::string::npos) << t;  // 26 * 4096 bytes per cell
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(1536), "1.50 KiB");
  EXPECT_EQ(human_bytes(int64_t{3} << 30), "3.00 GiB");
}

TEST(CacheSummary, CellLayoutReportsItsPoolsAndTheirRealMaximum) {
  // Example: 22 sliding(512) + 4 full layers, 4096 bytes per cell per layer (f16). 8 sessions
  // x 4096 tokens = 32768 cells; steps of 512: the sliding pool holds 8 * 511 + 512 = 4600.
  SummaryOptions o;
  o.sessions = 8;
  o.session_tokens = 4096;
  o.config.kv_dtype = DType::kF16;
  o.config.max_write = 512;
  o.config.max_seqs = 8;
  const auto j = cache_summary_json(example_model_geometry(), o);
  ASSERT_FALSE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["kind"], "cell");
  ASSERT_EQ(j["pools"].size(), 2u);
  EXPECT_EQ(j["pools"][0]["window"], 0);
  EXPECT_EQ(j["pools"][0]["layers"], (std::vector<int32_t>{5, 11, 17, 23}));
  EXPECT_EQ(j["pools"][0]["cells"], 32768);
  EXPECT_EQ(j["pools"][0]["bytes"], int64_t{4} * 32768 * 4096);
  EXPECT_EQ(j["pools"][1]["window"], 512);
  EXPECT_EQ(j["pools"][1]["cells"], 4600);
  EXPECT_EQ(j["pools"][1]["bytes"], int64_t{22} * 4600 * 4096);
  EXPECT_EQ(j["bytes_at_capacity"], int64_t{4} * 32768 * 4096 + int64_t{22} * 4600 * 4096);
  EXPECT_EQ(j["all_positions_bytes_at_capacity"], int64_t{26} * 32768 * 4096);
  EXPECT_EQ(j["max_seqs"], 8);
  // One undo checkpoint: 511 cells of each of the 22 sliding layers.
  EXPECT_EQ(j["checkpoint_bytes"], int64_t{22} * 511 * 4096);
  o.kind = "sequence";
  const auto q = cache_summary_json(example_model_geometry(), o);
  EXPECT_FALSE(q.contains("pools"));
  EXPECT_EQ(q["bytes_at_capacity"], q["sequence_bytes_at_capacity"]);
  o.kind = "paged";
  EXPECT_EQ(cache_summary_json(example_model_geometry(), o)["error"],
            "kind = 'paged', expected cell or sequence");
}

TEST(CacheSummary, MixedWindowsAreGroupedByWindow) {
  ModelGeometry g;
  g.cache.layers = {{1, 8, 8, 0}, {1, 8, 8, 128}, {1, 8, 8, 512}, {1, 8, 8, 512}};
  g.layer_cache = {0, 1, 2, 3};
  EXPECT_EQ(policy_groups(g), "4 layers: 1 full + 2 sliding(512) + 1 sliding(128)");
}

}  // namespace
}  // namespace kvcache
