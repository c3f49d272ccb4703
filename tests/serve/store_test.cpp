// The shared prefix-block store against a real Redis (started by the test, see
// redis_server.h): two executors — two replicas — share one Redis. A prompt prefilled on one is
// a store hit on the other (its prefill drops to the unshared suffix) with identical greedy
// output; an outage only means recompute and hits resume after it; damaged blocks (flipped,
// truncated, swapped) are refused, counted, deleted, recomputed, never used; another model,
// geometry, dtype or block size never hits.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../engine/test_model.h"
#include "redis_server.h"
#include "serve/block_codec.h"
#include "serve/executor.h"
#include "serve/prefix_index.h"
#include "serve_test_util.h"

namespace kvcache::serve {
namespace {

using testing::alone;
using testing::drain;
using testing::ids;
using testing::make;
using testing::RedisServer;
using testing::tiny;

// 150 bytes = 150 tokens of the byte tokenizer.
const std::string kLong =
    "In the beginning God created the heaven and the earth. And the earth was without form, "
    "and void; and darkness was upon the face of the deep. And the S";
// Another 150 tokens that share no block with kLong.
const std::string kOther =
    "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: he "
    "leadeth me beside the still waters. He restoreth my soul: he";
constexpr int32_t kNew = 24;

#define START_REDIS(r) \
  ASSERT_TRUE((r).start()) << "needs Debian's redis-server at /usr/bin (scripts/setup.sh)"

ExecutorOptions store_options(const RedisServer& redis, int32_t block = 16) {
  ExecutorOptions o;
  o.kv_store = redis.url();
  o.block_tokens = block;
  o.store_wait_ms = 5000;  // a loaded test machine must not turn a hit into a timeout
  return o;
}

RequestResult run_one(Executor& ex, const std::vector<int32_t>& prompt, int32_t n = kNew) {
  GenerateParams p;
  p.max_new_tokens = n;
  const int64_t id = *ex.submit(prompt, p);
  auto results = drain(ex);
  EXPECT_TRUE(ex.flush_store(std::chrono::seconds(10)));
  return results.at(id);
}

// Keys of the prompt's full blocks as `ex` names them.
std::vector<std::string> store_keys(const Executor& ex, const std::vector<int32_t>& prompt,
                                    int32_t block = 16) {
  const uint64_t ns = block_namespace(tiny().fingerprint(), ex.setup().geometry,
                                      ex.setup().config.kv_dtype, block);
  std::vector<std::string> out;
  for (uint64_t k : PrefixIndex(block, ns).keys(prompt)) out.push_back(block_store_key(k));
  return out;
}

class TwoReplicas : public ::testing::TestWithParam<int32_t> {};

TEST_P(TwoReplicas, APromptPrefilledOnOneIsAStoreHitOnTheOther) {
  const int32_t b = GetParam();
  RedisServer redis;
  START_REDIS(redis);
  auto one = make(store_options(redis, b));
  auto two = make(store_options(redis, b));
  const std::vector<int32_t> prompt = ids(kLong);
  ASSERT_EQ(prompt.size(), 150u);
  const RequestResult r1 = run_one(*one, prompt);
  const ExecutorStats s1 = one->stats();
  // Every full block of the prompt is written: 150 / b of them (the sliding layers' rows of
  // each were still held when its step ended).
  const int64_t blocks = 150 / b;
  EXPECT_EQ(s1.store.puts, blocks);
  EXPECT_EQ(s1.store.lookups, 1);
  EXPECT_EQ(s1.store.misses, 1);
  EXPECT_EQ(s1.store.hit_blocks, 0);
  EXPECT_EQ(static_cast<int64_t>(redis.keys().size()), blocks);
  EXPECT_GT(s1.store.bytes_out, 0);

  // Replica two: the same prompt plus its own question.
  std::vector<int32_t> longer = prompt;
  for (int32_t t : ids(" And God said")) longer.push_back(t);
  const int64_t hit = blocks * b;  // the full blocks of the shared 150 tokens
  const RequestResult r2 = run_one(*two, longer);
  const ExecutorStats s2 = two->stats();
  EXPECT_EQ(r2.cached_prompt_tokens, hit);
  EXPECT_EQ(s2.store_hit_tokens, hit);
  EXPECT_EQ(s2.store.hit_blocks, blocks);
  EXPECT_EQ(s2.prefix_hit_tokens, hit);
  // Prefilled: the unshared suffix but its last token, which this sliding model feeds alone
  // (it keeps the prompt's window tail first, see snapshot_prompt) and counts as a decode.
  EXPECT_EQ(s2.prefill_tokens, static_cast<int64_t>(longer.size()) - 1 - hit);
  EXPECT_EQ(s2.store.checksum_failures + s2.store.rejected_blocks + s2.store.errors, 0);
  EXPECT_EQ(r2.completions[0].tokens, alone(longer, kNew));
  // The same prompt on replica two: identical greedy output to replica one's.
  auto three = make(store_options(redis, b));
  const RequestResult r3 = run_one(*three, prompt);
  EXPECT_EQ(r3.cached_prompt_tokens, (149 / b) * b);
  EXPECT_EQ(r3.completions[0].tokens, r1.completions[0].tokens);
  EXPECT_EQ(r1.completions[0].tokens, alone(prompt, kNew));
  // A replica holding the first 70 tokens locally (one full block of 64 or four of 16, then
  // 6 more) clones those and imports the rest from the store, starting inside a block.
  auto four = make(store_options(redis, b));
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 70);
  run_one(*four, head, 1);
  const int64_t before = four->stats().store_hit_tokens;
  const RequestResult r4 = run_one(*four, prompt);
  EXPECT_EQ(r4.cached_prompt_tokens, (149 / b) * b);
  EXPECT_EQ(four->stats().store_hit_tokens - before, (149 / b) * b - 70);
  EXPECT_EQ(r4.completions[0].tokens, r1.completions[0].tokens);
}

// 16: blocks shorter than the sliding window (32); 64: longer than it (31 rows kept).
INSTANTIATE_TEST_SUITE_P(BlockSizes, TwoReplicas, ::testing::Values(16, 64));

TEST(Store, AnOutageMeansRecomputeAndHitsResumeAfterIt) {
  RedisServer redis;
  START_REDIS(redis);
  auto one = make(store_options(redis));
  auto two = make(store_options(redis));
  GenerateParams p;
  p.max_new_tokens = kNew;
  // Requests in flight on replica one when Redis dies.
  std::vector<std::vector<int32_t>> prompts;
  for (const char* tail : {" Alpha", " Beta", " Gamma"}) prompts.push_back(ids(kLong + tail));
  std::vector<int64_t> id;
  for (const auto& pr : prompts) id.push_back(*one->submit(pr, p));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(one->step().ok());
  redis.stop();
  auto results = drain(*one);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(results.at(id[i]).completions[0].tokens, alone(prompts[i], kNew)) << i;
    EXPECT_EQ(results.at(id[i]).completions[0].finish, Finish::kLength);
  }
  one->flush_store(std::chrono::seconds(10));
  // Replica two during the outage: recompute, no failed request.
  const std::vector<int32_t> other = ids(kLong + " Delta");
  const RequestResult r = run_one(*two, other);
  EXPECT_EQ(r.completions[0].tokens, alone(other, kNew));
  EXPECT_EQ(r.completions[0].finish, Finish::kLength);
  EXPECT_EQ(two->stats().store_hit_tokens, 0);
  EXPECT_GT(two->stats().store.errors, 0);
  // Redis back (empty: it kept nothing): once the retry interval passed, writes and hits resume.
  ASSERT_TRUE(redis.start());
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const std::vector<int32_t> again = ids(kOther);
  ASSERT_EQ(again.size(), 150u);
  const int64_t puts = one->stats().store.puts;
  run_one(*one, again);
  EXPECT_EQ(one->stats().store.puts - puts, 9);  // blocks of [0, 144) written after the outage
  auto fresh = make(store_options(redis));  // no local prefix: only the store can help
  const RequestResult hit = run_one(*fresh, again);
  EXPECT_EQ(hit.cached_prompt_tokens, 144);
  EXPECT_EQ(hit.completions[0].tokens, alone(again, kNew));
}

struct Damage {
  const char* name;
  int64_t hits;               // blocks accepted before the damaged one
  int64_t checksum_failures;
  int64_t rejected;
};

class DamagedBlocks : public ::testing::TestWithParam<Damage> {};

TEST_P(DamagedBlocks, AreRefusedCountedAndRecomputedNeverUsed) {
  const Damage d = GetParam();
  RedisServer redis;
  START_REDIS(redis);
  auto one = make(store_options(redis));
  const std::vector<int32_t> prompt = ids(kLong);
  run_one(*one, prompt);
  const std::vector<std::string> keys = store_keys(*one, prompt);
  ASSERT_EQ(keys.size(), 9u);
  const std::string k3 = keys[3], k5 = keys[5];
  std::string v3 = *redis.get(k3), v5 = *redis.get(k5);
  const std::string name = d.name;
  if (name == "flipped") {
    v3[v3.size() / 2] = static_cast<char>(v3[v3.size() / 2] ^ 1);  // one bit of K/V payload
    ASSERT_TRUE(redis.set(k3, v3));
  } else if (name == "truncated") {
    ASSERT_TRUE(redis.set(k3, v3.substr(0, v3.size() - 100)));
  } else {  // swapped: intact values under each other's key
    ASSERT_TRUE(redis.set(k3, v5));
    ASSERT_TRUE(redis.set(k5, v3));
  }
  auto two = make(store_options(redis));
  const RequestResult r = run_one(*two, prompt);
  const ExecutorStats s = two->stats();
  EXPECT_EQ(s.store.hit_blocks, d.hits);
  EXPECT_EQ(r.cached_prompt_tokens, d.hits * 16);
  EXPECT_EQ(s.store.checksum_failures, d.checksum_failures);
  EXPECT_EQ(s.store.rejected_blocks, d.rejected);
  EXPECT_EQ(r.completions[0].tokens, alone(prompt, kNew));
  // The damaged value was deleted and replica two wrote block 3 afresh: a third replica hits
  // up to block 5 (still swapped in that case) or the whole prompt.
  auto three = make(store_options(redis));
  const RequestResult r3 = run_one(*three, prompt);
  EXPECT_EQ(r3.cached_prompt_tokens, name == "swapped" ? 5 * 16 : 144);
  EXPECT_EQ(r3.completions[0].tokens, alone(prompt, kNew));
}

INSTANTIATE_TEST_SUITE_P(Kinds, DamagedBlocks,
                         ::testing::Values(Damage{"flipped", 3, 1, 0},
                                           Damage{"truncated", 3, 1, 0},
                                           Damage{"swapped", 3, 0, 1}),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Store, AnotherModelGeometryDtypeOrBlockSizeNeverHits) {
  RedisServer redis;
  START_REDIS(redis);
  engine::testing::TinySpec spec;  // 3 cache layers, one sliding(4); byte-sized vocabulary
  const engine::Model a = engine::testing::tiny_model(spec);
  spec.seed = 2;
  const engine::Model other_weights = engine::testing::tiny_model(spec);
  spec.seed = 1;
  spec.cache_windows = {0, 6, 0};
  const engine::Model other_windows = engine::testing::tiny_model(spec);
  ASSERT_NE(a.fingerprint(), other_weights.fingerprint());
  const std::vector<int32_t> prompt = ids(kLong.substr(0, 100));
  auto on = [&](const engine::Model& m, DType dtype, int32_t block) {
    ExecutorOptions o = store_options(redis, block);
    o.kv_dtype = dtype;
    auto ex = Executor::create(m, nullptr, o);
    EXPECT_TRUE(ex.ok()) << ex.status().to_string();
    run_one(**ex, prompt, 4);
    return (*ex)->stats();
  };
  EXPECT_EQ(on(a, DType::kF32, 16).store.puts, 6);  // 100 / 16 blocks written
  for (const ExecutorStats& s : {on(other_weights, DType::kF32, 16), on(other_windows, DType::kF32, 16),
                                 on(a, DType::kF16, 16), on(a, DType::kF32, 20)}) {
    EXPECT_EQ(s.store.hit_blocks, 0);
    EXPECT_EQ(s.store_hit_tokens, 0);
    EXPECT_EQ(s.store.misses, 1);
    EXPECT_EQ(s.store.checksum_failures + s.store.rejected_blocks, 0);
  }
  // The same model, geometry, dtype and block size does hit (the control).
  EXPECT_EQ(on(a, DType::kF32, 16).store.hit_blocks, 6);
}

TEST(Store, ChunksStopWhereTheSlidingRowsOfABlockAreStillHeld) {
  // Window 8, steps of 8, blocks of 12: a step [8, 16) would complete block 0 and leave only
  // positions [9, 16) in the sliding pool, but block 0 keeps [5, 12). Chunks therefore end at
  // 12 (max(0 + 8 - 1, 12)), and every block is written whole.
  RedisServer redis;
  START_REDIS(redis);
  engine::testing::TinySpec spec;
  spec.cache_windows = {0, 8, 0};
  spec.max_step_tokens = 8;
  const engine::Model m = engine::testing::tiny_model(spec);
  const std::vector<int32_t> prompt = ids(kLong.substr(0, 100));
  auto one = Executor::create(m, nullptr, store_options(redis, 12));
  auto two = Executor::create(m, nullptr, store_options(redis, 12));
  ASSERT_TRUE(one.ok() && two.ok());
  ASSERT_EQ((*one)->setup().step_tokens, 8);
  const RequestResult r1 = run_one(**one, prompt);
  EXPECT_EQ((*one)->stats().store.puts, 8);  // 100 / 12
  const RequestResult r2 = run_one(**two, prompt);
  EXPECT_EQ(r2.cached_prompt_tokens, 96);     // 99 / 12 blocks
  EXPECT_EQ(r2.completions[0].tokens, r1.completions[0].tokens);
  // Without a store the same prompt gives the same tokens (the chunking changed nothing).
  ExecutorOptions plain;
  auto three = Executor::create(m, nullptr, plain);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(run_one(**three, prompt).completions[0].tokens, r1.completions[0].tokens);
}

TEST(Store, AHungStoreCostsAtMostTheWaitThenTheRequestPrefills) {
  RedisServer redis;
  START_REDIS(redis);
  auto one = make(store_options(redis));
  const std::vector<int32_t> prompt = ids(kLong);
  run_one(*one, prompt);  // the store holds the prompt's blocks
  ExecutorOptions o = store_options(redis);
  o.store_wait_ms = 100;
  auto two = make(o);
  redis.pause();  // the lookup's connection hangs (the command timeout is 2 s)
  GenerateParams p;
  p.max_new_tokens = kNew;
  const auto start = std::chrono::steady_clock::now();
  const int64_t id = *two->submit(prompt, p);
  auto results = drain(*two);
  const auto took = std::chrono::steady_clock::now() - start;
  redis.resume();
  // It waited its 100 ms, not the hung store's 2 s command timeout: the prefill and 24 steps of
  // the tiny model take milliseconds, so the whole request stays far below 2 s.
  EXPECT_GE(took, std::chrono::milliseconds(100));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  EXPECT_EQ(two->stats().store_timeouts, 1);
  EXPECT_EQ(two->stats().store_hit_tokens, 0);
  EXPECT_EQ(results.at(id).cached_prompt_tokens, 0);
  EXPECT_EQ(results.at(id).completions[0].tokens, alone(prompt, kNew));
}

TEST(Store, AnUnreachableStoreNeverFailsARequest) {
  ExecutorOptions o;
  o.kv_store = "redis://127.0.0.1:1";  // nothing listens on port 1
  auto ex = make(o);
  const std::vector<int32_t> prompt = ids(kLong);
  const RequestResult r = run_one(*ex, prompt);
  EXPECT_EQ(r.completions[0].tokens, alone(prompt, kNew));
  EXPECT_EQ(r.cached_prompt_tokens, 0);
  EXPECT_GE(ex->stats().store.errors, 1);
}

TEST(Store, BadOptionsAreRefusedByName) {
  ExecutorOptions o;
  o.kv_store = "redis://host";
  auto ex = Executor::create(tiny(), nullptr, o);
  EXPECT_EQ(ex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex.status().message(),
            "kv_store = \"redis://host\": expected HOST:PORT after redis://");
  o.kv_store = "redis://127.0.0.1:6379";
  o.prefix_cache = false;
  EXPECT_EQ(Executor::create(tiny(), nullptr, o).status().code(), StatusCode::kInvalidArgument);
  o.prefix_cache = true;
  o.store_wait_ms = -1;
  EXPECT_EQ(Executor::create(tiny(), nullptr, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcache::serve
