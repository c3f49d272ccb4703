#include "core/geometry.h"
#include "core/cache.h"

#include <gtest/gtest.h>

namespace kvcache {
namespace {

CacheGeometry two_layers() {
  return CacheGeometry{{{8, 64, 64, 0}, {4, 128, 96, 512}}};
}

CacheConfig config(int64_t capacity) {
  CacheConfig c;
  c.capacity = capacity;
  return c;
}

TEST(Geometry, ValidGeometryAndConfigPass) {
  EXPECT_TRUE(valid(two_layers()));
  EXPECT_TRUE(valid(config(16)));
  EXPECT_TRUE(valid(two_layers(), config(16)));
}

TEST(Geometry, EmptyGeometryIsRefusedNamingLayers) {
  auto why = why_invalid(CacheGeometry{});
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->field, "layers");
  EXPECT_EQ(why->message(), "layers = 0, expected at least one layer");
}

TEST(Geometry, EachBadFieldIsNamedWithItsLayer) {
  struct Case {
    LayerGeometry layer;
    const char* field;
    int64_t value;
  };
  const Case cases[] = {
      {{0, 64, 64, 0}, "kv_heads", 0},   {{-2, 64, 64, 0}, "kv_heads", -2},
      {{2, 0, 64, 0}, "head_dim", 0},    {{2, -1, 64, 0}, "head_dim", -1},
      {{2, 64, 0, 0}, "value_dim", 0},   {{2, 64, -5, 0}, "value_dim", -5},
      {{2, 64, 64, -1}, "window", -1},
  };
  for (const auto& c : cases) {
    CacheGeometry g = two_layers();
    g.layers.push_back(c.layer);
    auto why = why_invalid(g);
    ASSERT_TRUE(why.has_value()) << c.field;
    EXPECT_EQ(why->field, c.field);
    EXPECT_EQ(why->layer, 2);
    EXPECT_EQ(why->value, c.value);
    EXPECT_EQ(why->message().rfind("layers[2]." + std::string(c.field), 0), 0u) << why->message();
  }
}

TEST(Geometry, ConfigFieldsAreChecked) {
  auto why = why_invalid(config(0));
  ASSERT_TRUE(why);
  EXPECT_EQ(why->message(), "capacity = 0, expected > 0");

  CacheConfig c = config(8);
  c.initial_capacity = -1;
  why = why_invalid(c);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->field, "initial_capacity");
  EXPECT_EQ(why->value, -1);

  c = config(8);
  c.max_write = 0;
  why = why_invalid(c);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->field, "max_write");
}

TEST(Geometry, ConfigMessagesNameFieldValueAndExpectation) {
  EXPECT_EQ(why_invalid(config(-5))->message(), "capacity = -5, expected > 0");
  CacheConfig c = config(8);
  c.initial_capacity = -3;
  EXPECT_EQ(why_invalid(c)->message(), "initial_capacity = -3, expected >= 0");
  EXPECT_EQ(why_invalid(c)->layer, -1);
  c = config(8);
  c.max_write = -2;
  EXPECT_EQ(why_invalid(c)->message(), "max_write = -2, expected > 0 when set");
  c.max_write = 1;
  EXPECT_FALSE(why_invalid(c).has_value());
  // The combined form reports the geometry first and prefixes the operation.
  CacheGeometry g = two_layers();
  g.layers[0].kv_heads = 0;
  Status st = validate(g, config(0), "build");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "build: layers[0].kv_heads = 0, expected > 0");
  EXPECT_TRUE(validate(two_layers(), config(1), "build").ok());
}

TEST(Geometry, CapacityAboveInt32IsRefused) {
  auto why = why_invalid(config(int64_t{1} << 31));
  ASSERT_TRUE(why);
  EXPECT_EQ(why->field, "capacity");
  EXPECT_TRUE(valid(config(2147483647)));
}

TEST(Geometry, InitialCapacityAboveCapacityIsAccepted) {
  CacheConfig c = config(8);
  c.initial_capacity = 1000;
  EXPECT_TRUE(valid(two_layers(), c));
}

TEST(Geometry, SizeProductsThatOverflowAreRefused) {
  CacheGeometry g{{{1 << 30, 1 << 30, 1 << 30, 0}}};
  auto why = why_invalid(g);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->field, "kv_heads");

  // 2^20 heads * (2^10 + 2^10) dims * 4 bytes = 2^33 per cell; 2^31-1 cells overflows 2^63.
  CacheGeometry big{{{1 << 20, 1 << 10, 1 << 10, 0}}};
  ASSERT_TRUE(valid(big));
  auto why_cfg = why_invalid(big, config(2147483647));
  ASSERT_TRUE(why_cfg);
  EXPECT_EQ(why_cfg->field, "capacity");
  EXPECT_EQ(validate(big, config(2147483647), "build").code(), StatusCode::kInvalidArgument);
}

TEST(Geometry, BytesPerCellSumsLayers) {
  // layer 0: 8 * (64 + 64) * 2 = 2048; layer 1: 4 * (128 + 96) * 2 = 1792.
  EXPECT_EQ(bytes_per_cell(two_layers(), DType::kF16), 2048 + 1792);
  EXPECT_EQ(bytes_per_cell(two_layers().layers[0], DType::kF32), 4096);
}

TEST(Geometry, StepLimitAndRingSlots) {
  CacheGeometry g{{{1, 4, 4, 0}, {1, 4, 4, 4}}};
  CacheConfig c = config(100);
  EXPECT_EQ(step_limit(g, c), 4);  // max_write unset: W of the narrowest sliding layer
  EXPECT_EQ(sequence_slots(g.layers[1], c), 7);  // W + W - 1
  EXPECT_EQ(sequence_slots(g.layers[0], c), 100);
  c.max_write = 1;
  EXPECT_EQ(step_limit(g, c), 1);
  EXPECT_EQ(sequence_slots(g.layers[1], c), 4);  // W + 1 - 1
  EXPECT_EQ(sequence_slots(g.layers[1], config(3)), 3);  // clamped to capacity
}

TEST(Geometry, KvBytesAtCapacityCountsWhatEachLayoutAllocates) {
  // 1 head x 4 wide, f32: 32 B per cell per layer. Capacity 100, max_write unset (M = W = 4).
  CacheGeometry g{{{1, 4, 4, 0}, {1, 4, 4, 4}}};
  CacheConfig c = config(100);
  // Sequence: 100 slots + a ring of 7.
  EXPECT_EQ(sequence_bytes_at_capacity(g, c), (100 + 7) * 32);
  EXPECT_EQ(kv_bytes_at_capacity(kSequenceKind, g, c), (100 + 7) * 32);
  // Cell, 256 sequences by default: the sliding pool min(100, 256 x 3 + 4) = 100.
  EXPECT_EQ(kv_bytes_at_capacity(kCellKind, g, c), 200 * 32);
  c.max_seqs = 2;  // 2 x 3 + 4 = 10
  EXPECT_EQ(kv_bytes_at_capacity(kCellKind, g, c), (100 + 10) * 32);
  EXPECT_EQ(kv_bytes_at_capacity(kCellKind, g, c), cell_bytes_at_capacity(g, c));
  EXPECT_FALSE(kv_bytes_at_capacity("paged", g, c).has_value());
}

TEST(Geometry, DTypeNamesRoundTrip) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0})
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  EXPECT_FALSE(parse_dtype("q4_1").has_value());
  EXPECT_FALSE(parse_dtype("Q8_0").has_value());
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(static_cast<int>(DType::kQ8_0), 3);  // serialized numbers: append only
  EXPECT_EQ(static_cast<int>(DType::kQ4_0), 4);
  EXPECT_FALSE(known_dtype(static_cast<DType>(5)));
}

TEST(Geometry, BlockTypesSizeRowsInBlocksOf32) {
  // q8_0: 34 bytes per 32 values, q4_0: 18.
  EXPECT_EQ(row_bytes(DType::kQ8_0, 128), 136);
  EXPECT_EQ(row_bytes(DType::kQ4_0, 128), 72);
  EXPECT_EQ(row_bytes(DType::kQ4_0, 40), std::nullopt);
  EXPECT_EQ(row_bytes(DType::kBF16, 40), 80);
  // 8 kv heads of 128: f16 8 x 2 x 256 = 4096 B a cell; q8_0 K + f16 V 8 x (136 + 256) = 3136;
  // q8_0 both 8 x 272 = 2176 (0.53x f16); q4_0 both 8 x 144 = 1152 (0.28x).
  const LayerGeometry l{8, 128, 128, 0};
  EXPECT_EQ(bytes_per_cell(l, DType::kF16), 4096);
  EXPECT_EQ(bytes_per_cell(l, DType::kQ8_0, DType::kF16), 3136);
  EXPECT_EQ(bytes_per_cell(l, DType::kQ8_0), 2176);
  EXPECT_EQ(bytes_per_cell(l, DType::kQ4_0), 1152);
  CacheConfig c = config(10);
  c.kv_dtype = DType::kF16;
  c.k_dtype = DType::kQ8_0;
  EXPECT_EQ(c.key_type(), DType::kQ8_0);
  EXPECT_EQ(c.value_type(), DType::kF16);
  EXPECT_EQ(bytes_per_cell(CacheGeometry{{l, l}}, c), 2 * 3136);
}

TEST(Geometry, BlockTypeNeedsWidthsThatAreWholeBlocks) {
  CacheGeometry g{{{2, 64, 64, 0}, {2, 64, 64, 0}, {2, 64, 64, 0}, {2, 40, 64, 0}}};
  CacheConfig c = config(10);
  c.kv_dtype = DType::kQ8_0;
  auto why = why_invalid(g, c);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->message(), "layers[3].head_dim = 40, expected a multiple of 32 for k_dtype q8_0");
  c.k_dtype = DType::kF16;  // keys in f16 are fine at 40; values stay q8_0 at 64
  EXPECT_FALSE(why_invalid(g, c).has_value());
  g.layers[1].value_dim = 80;
  c.v_dtype = DType::kQ4_0;
  why = why_invalid(g, c);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->message(), "layers[1].value_dim = 80, expected a multiple of 32 for v_dtype q4_0");
  c.v_dtype = static_cast<DType>(9);
  why = why_invalid(c);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->message(), "v_dtype = 9, expected one of f32, f16, bf16, q8_0 or q4_0");
}

}  // namespace
}  // namespace kvcache

namespace kvcache {
namespace {

TEST(CellPools, LayersSharingAWindowShareAPoolSizedForItsSequences) {
  // Windows 0, 4, 0, 2, 4: pools full {0, 2}, sliding(2) {3}, sliding(4) {1, 4}.
  // Sliding(W): max_seqs * (W - 1) + max_write = 3 * 1 + 5 = 8 and 3 * 3 + 5 = 14.
  CacheGeometry g{{{1, 4, 4, 0}, {1, 4, 4, 4}, {1, 4, 4, 0}, {1, 4, 4, 2}, {1, 4, 4, 4}}};
  CacheConfig c;
  c.capacity = 100;
  c.max_write = 5;
  c.max_seqs = 3;
  const std::vector<CellPool> pools = cell_pools(g, c);
  ASSERT_EQ(pools.size(), 3u);
  EXPECT_EQ(pools[0], (CellPool{0, {0, 2}, 100}));
  EXPECT_EQ(pools[1], (CellPool{2, {3}, 8}));
  EXPECT_EQ(pools[2], (CellPool{4, {1, 4}, 14}));
  // f32, 1 head x (4 + 4) = 32 bytes per cell per layer: (2 * 100 + 8 + 2 * 14) * 32.
  EXPECT_EQ(cell_bytes_at_capacity(g, c), (2 * 100 + 8 + 2 * 14) * 32);
  // Unset max_seqs (256) and max_write (= W): 256 * 3 + 4 = 772 > 100, clamped to capacity.
  c.max_seqs.reset();
  c.max_write.reset();
  EXPECT_EQ(cell_pools(g, c)[2].cells, 100);
  EXPECT_EQ(cell_max_seqs(c), kDefaultCellSeqs);
}

TEST(CellPools, MaxSeqsIsValidated) {
  CacheConfig c;
  c.capacity = 8;
  c.max_seqs = 0;
  auto why = why_invalid(c);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->message(), "max_seqs = 0, expected >= 1 when set");
}

TEST(CellPools, GemmaThreeTwentySevenBLikeGeometryAtEightSessionsOf32K) {
  // 62 layers, 5 sliding(1024) then 1 full: 52 sliding + 10 full; 16 kv heads x 128, f16:
  // 16 * (128 + 128) * 2 = 8192 bytes per cell per layer. 8 sessions x 32768 = 262144 cells,
  // steps of at most 512 tokens.
  CacheGeometry g;
  for (int i = 0; i < 62; ++i) g.layers.push_back({16, 128, 128, i % 6 == 5 ? 0 : 1024});
  CacheConfig c;
  c.capacity = 8 * 32768;
  c.kv_dtype = DType::kF16;
  c.max_write = 512;
  c.max_seqs = 8;
  const std::vector<CellPool> pools = cell_pools(g, c);
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].layers.size(), 10u);
  EXPECT_EQ(pools[1].layers.size(), 52u);
  EXPECT_EQ(pools[1].cells, 8 * 1023 + 512);  // every session's last W - 1, plus one step
  const int64_t full = int64_t{10} * 262144 * 8192;     // 21,474,836,480
  const int64_t sliding = int64_t{52} * 8696 * 8192;    //  3,704,356,864
  EXPECT_EQ(cell_bytes_at_capacity(g, c), full + sliding);  // 25,179,193,344 (23.45 GiB)
  // Every position in every layer: 62 * 262144 * 8192 = 133,143,986,176 (124 GiB), 5.29x.
  EXPECT_EQ(*bytes_per_cell(g, DType::kF16) * c.capacity, int64_t{133143986176});
  // The bound, sessions * (W + max_write - 1) per sliding layer, counts one step per
  // session: 21,474,836,480 + 52 * 8 * 1535 * 8192 = 26,705,920,000; we allocate 5.7% less.
  EXPECT_LT(full + sliding, full + int64_t{52} * 8 * 1535 * 8192);
}

}  // namespace
}  // namespace kvcache
