// A K/V memory budget sizing the capacity (plan_cache's kv_memory) and the sessions of a cell
// pool (plan_session_pool), on published geometries alone: exact cell and session counts per
// K/V type, the refusals, and the pool sizing rule the executor and inspect share.
#include <gtest/gtest.h>

#include <string>

#include "core/cache.h"
#include "engine/cache_setup.h"

namespace kvcache::engine::testing {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Llama-3-8B's cache: 32 full layers of 8 KV heads x 128.
ModelGeometry llama3_8b() {
  ModelGeometry g;
  for (int32_t i = 0; i < 32; ++i) {
    g.cache.layers.push_back({8, 128, 128, 0});
    g.layer_cache.push_back(i);
  }
  g.max_context = 131072;
  return g;
}

CacheOptions budget(DType k, DType v, int64_t bytes) {
  CacheOptions o;
  o.kv_dtype = k;
  o.v_dtype = v;
  o.kv_memory = bytes;
  return o;
}

int64_t capacity_for(DType k, DType v, int64_t bytes) {
  Result<CacheSetup> s = plan_cache(llama3_8b(), 131072, budget(k, v, bytes));
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? s->config.capacity : -1;
}

TEST(KvMemoryBudget, FourGiBHoldsTheCellsEachTypeAffords) {
  // Bytes per cell: 32 layers x 8 heads x (K row + V row): f16 2 x 256 = 512 -> 131072;
  // q8_0 4 blocks x 34 = 136 per row -> 69632; q4_0 4 x 18 = 72 -> 36864.
  EXPECT_EQ(capacity_for(DType::kF16, DType::kF16, 4 * kGiB), 32768);   // 2^32 / 131072
  EXPECT_EQ(capacity_for(DType::kQ8_0, DType::kQ8_0, 4 * kGiB), 61680);  // floor(2^32 / 69632)
  EXPECT_EQ(capacity_for(DType::kQ4_0, DType::kQ4_0, 4 * kGiB), 116508);  // floor(2^32 / 36864)
  // K q8_0, V f16: 256 x (136 + 256) = 100352 per cell; floor(2^32 / 100352) = 42799.
  EXPECT_EQ(capacity_for(DType::kQ8_0, DType::kF16, 4 * kGiB), 42799);
  EXPECT_GE(61680.0 / 32768.0, 1.85);
}

TEST(KvMemoryBudget, TheChosenCapacityIsTheLargestThatFits) {
  Result<CacheSetup> s = plan_cache(llama3_8b(), 131072, budget(DType::kQ8_0, DType::kQ8_0, 4 * kGiB));
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(kv_bytes(*s), 61680 * int64_t{69632});
  EXPECT_EQ(s->kv_memory, 4 * kGiB);
  CacheConfig one_more = s->config;
  one_more.capacity += 1;
  EXPECT_GT(*kv_bytes_at_capacity(kSequenceKind, s->geometry, one_more), 4 * kGiB);
}

TEST(KvMemoryBudget, ABudgetBeyondTheContextStopsAtTheContext) {
  EXPECT_EQ(capacity_for(DType::kF16, DType::kF16, 1024 * kGiB), 131072);
  // Unknown context: core's bound on cells.
  Result<CacheSetup> s = plan_cache(llama3_8b(), 0, budget(DType::kF16, DType::kF16, int64_t{1} << 62));
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->config.capacity, kMaxCapacity);
}

TEST(KvMemoryBudget, SlidingLayersCountWhatTheirRingsAndPoolsHold) {
  // 1 full + 1 Sliding(8) layer, 1 head x 32, f32: 256 B per cell per layer. Step 4.
  ModelGeometry g;
  g.cache.layers = {{1, 32, 32, 0}, {1, 32, 32, 8}};
  g.layer_cache = {0, 1};
  g.max_step_tokens = 4;
  // Sequence layout: 256 C + 256 min(8 + 4 - 1, C). 10000 B: C = (10000 - 2816) / 256 = 28.
  CacheOptions o = budget(DType::kF32, DType::kF32, 10000);
  EXPECT_EQ(plan_cache(g, 0, o)->config.capacity, 28);
  // Cell layout, 2 sequences: the sliding pool holds min(C, 2 x 7 + 4) = 18 cells once C >= 18:
  // C = (10000 - 18 x 256) / 256 = 21.
  o.kind = "cell";
  o.max_seqs = 2;
  Result<CacheSetup> s = plan_cache(g, 0, o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->config.capacity, 21);
  EXPECT_EQ(kv_bytes(*s), (21 + 18) * 256);
}

TEST(KvMemoryBudget, ABudgetBelowOneCellIsRefusedWithTheBytesNeeded) {
  Result<CacheSetup> s = plan_cache(llama3_8b(), 131072, budget(DType::kF16, DType::kF16, 131071));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.status().message(),
            "cache options: kv_memory = 131071 bytes holds no cache: capacity 1 (sequence layout, "
            "k_dtype f16, v_dtype f16) needs 131072 bytes of K/V");
  EXPECT_EQ(capacity_for(DType::kF16, DType::kF16, 131072), 1);
}

TEST(KvMemoryBudget, ABudgetWithACapacityOrNotPositiveIsRefusedByName) {
  CacheOptions o = budget(DType::kF16, DType::kF16, kGiB);
  o.capacity = 100;
  Result<CacheSetup> s = plan_cache(llama3_8b(), 131072, o);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "cache options: capacity = 100 and kv_memory = 1073741824 are both set; give one");
  o = budget(DType::kF16, DType::kF16, 0);
  EXPECT_EQ(plan_cache(llama3_8b(), 131072, o).status().message(),
            "cache options: kv_memory = 0, expected > 0 bytes");
}

TEST(SessionPool, TheExecutorsRuleSizesCapacityAndSequenceIds) {
  // Gemma-like: 1 full + 1 Sliding(16), step 4. 3 sessions of 100 tokens, 5 checkpoints.
  ModelGeometry g;
  g.cache.layers = {{1, 32, 32, 0}, {1, 32, 32, 16}};
  g.layer_cache = {0, 1};
  g.max_step_tokens = 4;
  SessionPool p;
  p.max_sessions = 3;
  p.max_session_tokens = 100;
  p.retained_seqs = 5;
  Result<SessionPlan> s = plan_session_pool(g, 1000, CacheOptions{}, p);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->setup.kind, "cell");
  EXPECT_EQ(s->setup.config.capacity, 300);
  EXPECT_EQ(s->setup.config.max_seqs, 11);  // 2 x 3 + 5
  const std::vector<CellPool> pools = cell_pools(s->setup.geometry, s->setup.config);
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[1].cells, 11 * 15 + 4);  // max_seqs x (W - 1) + step
  p.max_sessions = 129;
  EXPECT_EQ(plan_session_pool(g, 1000, CacheOptions{}, p).status().message(),
            "session pool: max_sessions = 129, expected 1..128");
  p.max_sessions = 3;
  p.max_session_tokens = 2000;
  EXPECT_EQ(plan_session_pool(g, 1000, CacheOptions{}, p).status().message(),
            "session pool: max_session_tokens = 2000 is above the model's max_context 1000");
}

TEST(SessionPool, ABudgetBuysWholeSessions) {
  // 4096-token sessions of Llama-3-8B: f16 4096 x 131072 = 512 MiB each, q8_0 4096 x 69632.
  SessionPool p;
  p.max_session_tokens = 4096;
  p.kv_memory = 4 * kGiB;
  CacheOptions o;
  o.kv_dtype = DType::kF16;
  Result<SessionPlan> f16 = plan_session_pool(llama3_8b(), 131072, o, p);
  ASSERT_TRUE(f16.ok()) << f16.status().message();
  EXPECT_EQ(f16->max_sessions, 8);
  EXPECT_EQ(f16->setup.config.capacity, 8 * 4096);
  EXPECT_EQ(f16->setup.kv_memory, 4 * kGiB);
  o.kv_dtype = DType::kQ8_0;
  Result<SessionPlan> q8 = plan_session_pool(llama3_8b(), 131072, o, p);
  ASSERT_TRUE(q8.ok()) << q8.status().message();
  EXPECT_EQ(q8->max_sessions, 15);  // floor(61680 cells / 4096)
  // Never more than the executor's bound.
  p.kv_memory = 1024 * kGiB;
  EXPECT_EQ(plan_session_pool(llama3_8b(), 131072, o, p)->max_sessions, kMaxPoolSessions);
  p.kv_memory = 4096 * int64_t{69632} - 1;
  Result<SessionPlan> none = plan_session_pool(llama3_8b(), 131072, o, p);
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(none.status().message(),
            "session pool: kv_memory = 285212671 bytes holds no session: one session of 4096 "
            "tokens (k_dtype q8_0, v_dtype q8_0) needs 285212672 bytes of K/V");
  p.kv_memory = kGiB;
  p.pool_cells = 8192;
  EXPECT_EQ(plan_session_pool(llama3_8b(), 131072, o, p).status().message(),
            "session pool: pool_cells = 8192 and kv_memory = 1073741824 are both set; give one");
}

}  // namespace
}  // namespace kvcache::engine::testing
