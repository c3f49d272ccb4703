// Replays the snapshot fuzz entry (fuzz/snapshot_fuzz.cpp) on the committed corpus
// (fuzz/corpus/snapshot) and on hostile variants of two seeds made here (a sequence-layout
// snapshot of full and sliding layers in f32, a cell-layout one in bf16): every truncation and
// every single-byte corruption. KVCACHE_WRITE_SNAPSHOT_SEEDS=DIR writes the seeds there (how
// the corpus was made).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "cpu/cpu_cache.h"
#include "engine/snapshot.h"
#include "fuzz_replay.h"
#include "fuzz_targets.h"

namespace kvcache::engine {
namespace {

// A cache of `kind` with one sequence of `n` positions of random K/V, as a snapshot.
std::vector<uint8_t> seed(std::string_view kind, DType dt, int64_t n, uint32_t rng_seed) {
  const CacheGeometry g{{LayerGeometry{2, 4, 4, 0}, LayerGeometry{1, 4, 6, 3}}};
  CacheConfig c;
  c.capacity = 32;
  c.kv_dtype = dt;
  c.max_write = 2;
  auto cache = *cpu::make_cpu_cache(kind, g, c);
  const int32_t seq = *cache->open_seq();
  std::mt19937 rng(rng_seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t p = 0; p < n; ++p) {
    const std::vector<int32_t> ids = {seq};
    EXPECT_TRUE(cache->declare_step(ids).ok());
    const std::vector<int64_t> pos = {p};
    for (int32_t l = 0; l < 2; ++l) {
      const LayerGeometry& lg = g.layers[l];
      std::vector<float> q(2 * lg.head_dim), k(lg.kv_heads * lg.head_dim),
          v(lg.kv_heads * lg.value_dim), out(2 * lg.value_dim);
      for (float& x : k) x = u(rng);
      for (float& x : v) x = u(rng);
      AttendArgs a{l, 1, 2, pos, q, k, v, 0.5f, 0.0f, out};
      EXPECT_TRUE(cache->update_and_attend(a).ok());
    }
  }
  std::vector<int32_t> tokens;
  for (int64_t p = 0; p <= n; ++p) tokens.push_back(static_cast<int32_t>(p * 7 % 50));
  return encode_snapshot(*capture_snapshot(*cache, seq, 0x1234abcdULL, tokens));
}

TEST(SnapshotFuzzReplay, CorpusRunsCleanly) {
  EXPECT_GE(kvcache::testing::replay_target(fuzz::snapshot_one, "snapshot"), 2);
}

TEST(SnapshotFuzzReplay, SeedsTheirTruncationsAndCorruptionsRunCleanly) {
  const std::vector<std::vector<uint8_t>> seeds = {seed(kSequenceKind, DType::kF32, 7, 1),
                                                   seed(kCellKind, DType::kBF16, 5, 2)};
  if (const char* dir = std::getenv("KVCACHE_WRITE_SNAPSHOT_SEEDS")) {
    std::filesystem::create_directories(dir);
    for (size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream out(std::filesystem::path(dir) / ("valid_" + std::to_string(i) + ".kvs"),
                        std::ios::binary);
      out.write(reinterpret_cast<const char*>(seeds[i].data()),
                static_cast<std::streamsize>(seeds[i].size()));
    }
  }
  for (const std::vector<uint8_t>& s : seeds) {
    ASSERT_TRUE(decode_snapshot(s).ok());
    EXPECT_EQ(fuzz::snapshot_one(s.data(), s.size()), 0);
    for (size_t n = 0; n < s.size(); ++n) EXPECT_EQ(fuzz::snapshot_one(s.data(), n), 0);
    for (size_t i = 0; i < s.size(); ++i)
      for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
        std::vector<uint8_t> bad = s;
        bad[i] ^= x;
        EXPECT_EQ(fuzz::snapshot_one(bad.data(), bad.size()), 0);
        EXPECT_FALSE(decode_snapshot(bad).ok()) << "byte " << i;
      }
  }
}

}  // namespace
}  // namespace kvcache::engine
