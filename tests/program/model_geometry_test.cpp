// kvcache.* geometry keys: round trip, and every malformed geometry refused by the reader
// (written raw, bypassing write_model_geometry) and by the writer, naming the key.
#include <gtest/gtest.h>

#include "program/model_geometry.h"

namespace kvcache {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;

ModelGeometry three_layers() {
  ModelGeometry g;
  g.cache.layers = {{8, 64, 64, 0}, {4, 80, 80, 512}, {2, 96, 96, 128}};
  g.layer_cache = {0, 1, 2};
  return g;
}

Result<ModelGeometry> read_back(const GgufWriter& w) {
  auto f = GgufFile::parse(w.bytes());
  if (!f.ok()) return f.status();
  return read_model_geometry(*f);
}

// Raw kvcache keys; each vector empty = key absent.
GgufWriter raw(std::vector<int32_t> heads, std::vector<int32_t> dims, std::vector<int32_t> windows,
               std::vector<int32_t> layer_cache = {}) {
  GgufWriter w;
  if (!heads.empty()) w.set_int32_array("kvcache.cache.kv_heads", heads);
  if (!dims.empty()) w.set_int32_array("kvcache.cache.head_dims", dims);
  if (!windows.empty()) w.set_int32_array("kvcache.cache.windows", windows);
  if (!layer_cache.empty()) w.set_int32_array("kvcache.layer_cache", layer_cache);
  return w;
}

void expect_refused(const GgufWriter& w, const std::string& fragment) {
  auto g = read_back(w);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find(fragment), std::string::npos) << g.status().message();
}

void expect_writer_refuses(const ModelGeometry& g, const std::string& fragment) {
  GgufWriter w;
  Status s = write_model_geometry(g, w);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_EQ(validate_model_geometry(g).code(), StatusCode::kInvalidArgument);
}

TEST(ModelGeometry, RoundTripKeepsHeadsDimsAndPolicies) {
  ModelGeometry g = three_layers();
  g.max_context = 8192;
  g.max_step_tokens = 64;
  GgufWriter w;
  ASSERT_TRUE(write_model_geometry(g, w).ok());
  auto back = read_back(w);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, g);
  EXPECT_FALSE(back->cache.layers[0].sliding());  // Full
  EXPECT_EQ(back->cache.layers[1].window, 512);   // Sliding(512)
  EXPECT_EQ(back->cache.layers[2].window, 128);   // Sliding(128)
}

TEST(ModelGeometry, ValueDimsAndLayerCacheAreOptional) {
  auto g = read_back(raw({8, 4}, {64, 32}, {0, 16}));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->cache.layers[1].value_dim, 32);  // defaults to head_dims
  EXPECT_EQ(g->layer_cache, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(g->max_context, 0);
}

TEST(ModelGeometry, SharedLayersMapToTheirCache) {
  ModelGeometry g = three_layers();
  g.layer_cache = {0, 1, 2, 1, 2};
  GgufWriter w;
  ASSERT_TRUE(write_model_geometry(g, w).ok());
  auto back = read_back(w);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->layer_cache, g.layer_cache);
}

TEST(ModelGeometry, FloatElementsInsteadOfInt32AreRefused) {
  GgufWriter w = raw({}, {64}, {0});
  const float heads[] = {8.0f};
  w.set_float32_array("kvcache.cache.kv_heads", heads);
  expect_refused(w, "kvcache.cache.kv_heads has type ARRAY of FLOAT32, expected ARRAY of INT32");
}

TEST(ModelGeometry, ScalarInsteadOfArrayIsRefused) {
  GgufWriter w = raw({8}, {64}, {});
  w.set_int32("kvcache.cache.windows", 0);
  expect_refused(w, "kvcache.cache.windows has type INT32");
}

TEST(ModelGeometry, MismatchedLengthsAreRefused) {
  expect_refused(raw({8, 4}, {64}, {0, 0}), "kvcache.cache.head_dims has 1 entries, expected 2");
  ModelGeometry g = three_layers();
  g.cache.layers.pop_back();
  g.layer_cache = {0, 1};
  GgufWriter w;
  ASSERT_TRUE(write_model_geometry(g, w).ok());
  const int32_t vd[] = {64};
  w.set_int32_array("kvcache.cache.value_dims", vd);
  expect_refused(w, "kvcache.cache.value_dims has 1 entries, expected 2");
}

TEST(ModelGeometry, ZeroHeadsNegativeDimsAndNegativeWindowsAreRefusedBothWays) {
  expect_refused(raw({8, 0}, {64, 64}, {0, 0}), "kvcache.cache.kv_heads[1] = 0, expected > 0");
  expect_refused(raw({8, 8, 8}, {64, 64, -1}, {0, 0, 0}),
                 "kvcache.cache.head_dims[2] = -1, expected > 0");
  expect_refused(raw({8}, {64}, {-5}), "kvcache.cache.windows[0] = -5, expected >= 0");
  ModelGeometry g = three_layers();
  g.cache.layers[1].kv_heads = 0;
  expect_writer_refuses(g, "kvcache.cache.kv_heads[1] = 0, expected > 0");
  g = three_layers();
  g.cache.layers[2].head_dim = -1;
  expect_writer_refuses(g, "kvcache.cache.head_dims[2] = -1, expected > 0");
  g = three_layers();
  g.cache.layers[0].window = -5;
  expect_writer_refuses(g, "kvcache.cache.windows[0] = -5");
  g = three_layers();
  g.cache.layers[0].value_dim = 0;
  expect_writer_refuses(g, "kvcache.cache.value_dims[0] = 0");
}

TEST(ModelGeometry, EmptyArraysAreRefusedBothWays) {
  GgufWriter w;
  w.set_int32_array("kvcache.cache.kv_heads", std::vector<int32_t>{});
  w.set_int32_array("kvcache.cache.head_dims", std::vector<int32_t>{});
  w.set_int32_array("kvcache.cache.windows", std::vector<int32_t>{});
  expect_refused(w, "kvcache.cache.kv_heads is empty");
  expect_writer_refuses(ModelGeometry{}, "kvcache.cache.kv_heads is empty");
  ModelGeometry g = three_layers();
  g.layer_cache.clear();
  expect_writer_refuses(g, "kvcache.layer_cache is empty");
}

TEST(ModelGeometry, LayerCacheEntryOutOfRangeIsRefusedBothWays) {
  expect_refused(raw({8, 8}, {64, 64}, {0, 0}, {0, 1, 2}),
                 "kvcache.layer_cache[2] = 2, expected in [0, 2)");
  ModelGeometry g = three_layers();
  g.layer_cache = {0, -1, 2};
  expect_writer_refuses(g, "kvcache.layer_cache[1] = -1, expected in [0, 3)");
}

TEST(ModelGeometry, MissingCompanionArrayIsRefused) {
  expect_refused(raw({8}, {64}, {}), "kvcache.cache.windows is missing");
  expect_refused(raw({}, {64}, {0}), "kvcache.cache.kv_heads is missing");
  GgufWriter w;
  w.set_int32_array("kvcache.layer_cache", std::vector<int32_t>{0});
  expect_refused(w, "is missing");
}

TEST(ModelGeometry, MoreThanTheLayerCapIsRefused) {
  const std::vector<int32_t> ones(kMaxModelLayers + 1, 1);
  expect_refused(raw(ones, ones, std::vector<int32_t>(ones.size(), 0)),
                 "kvcache.cache.kv_heads has 4097 entries, expected <= 4096");
}

TEST(ModelGeometry, MaxContextMustBeUint32) {
  GgufWriter w = raw({8}, {64}, {0});
  w.set_int32("kvcache.max_context", 100);
  expect_refused(w, "kvcache.max_context has type INT32, expected UINT32");
}

TEST(ModelGeometry, LayerCountMustMatchBlockCount) {
  GgufWriter w = raw({8, 8}, {64, 64}, {0, 0});
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", 3);
  expect_refused(w, "block_count = 3");
  GgufWriter v = raw({8, 8}, {64, 64}, {0, 0}, {0, 1});
  v.set_string("general.architecture", "llama");
  v.set_uint32("llama.block_count", 3);
  expect_refused(v, "kvcache.layer_cache has 2 entries, expected 3");
}

TEST(ModelGeometry, WindowOverrideReplacesOnlyPoliciesAndRefusesBadLists) {
  ModelGeometry g = three_layers();
  g.max_step_tokens = 1000;
  const int32_t pattern[] = {0, 256};
  ModelGeometry w = *with_windows(g, pattern);
  EXPECT_EQ(w.cache.layers[0].window, 0);
  EXPECT_EQ(w.cache.layers[1].window, 256);
  EXPECT_EQ(w.cache.layers[2].window, 0);  // cycled
  EXPECT_EQ(w.cache.layers[2].kv_heads, 2);  // only policies change
  EXPECT_EQ(w.max_step_tokens, 1000);  // kept: a step may be wider than a window
  Result<ModelGeometry> empty = with_windows(g, {});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.status().message(),
            "windows = {}, expected a non-empty list, e.g. {0, 512} (0 = Full)");
  const int32_t negative[] = {4, -1};
  EXPECT_EQ(with_windows(g, negative).status().message(),
            "windows[1] = -1, expected >= 0 (0 = Full)");
}

}  // namespace
}  // namespace kvcache
