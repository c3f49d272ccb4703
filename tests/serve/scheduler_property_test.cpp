// Property test of the scheduler against a simple model of what must happen: random arrivals,
// forks, cancellations, closes, opens and clones under pool pressure (preemption). Every
// request ends exactly once with a reason that fits what was done to it; greedy requests that
// ran to their end produce what running alone produces; nothing leaks.
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "serve/executor.h"
#include "serve_test_util.h"

namespace kvcache::serve {
namespace {

struct Expect {
  std::vector<int32_t> prompt;
  GenerateParams params;
  bool greedy_checkable = false;  // a plain greedy request (not a clone)
  bool cancelled = false;
};

class SchedulerProperty : public ::testing::TestWithParam<uint64_t> {};

TEST_P(SchedulerProperty, EveryRequestEndsOnceAndNothingLeaks) {
  std::mt19937_64 rng(GetParam());
  ExecutorOptions o;
  o.max_sessions = 4;
  o.max_session_tokens = 64;
  o.pool_cells = 90;  // far below 4 x 64: preemption and eviction happen
  o.block_tokens = 4;
  o.step_tokens = 8;
  auto ex = testing::make(o);
  const int64_t empty_free = ex->cache().free_cells();  // every pool empty
  ASSERT_NE(ex, nullptr);
  const std::vector<std::string> stems = {"In the beginning God ", "And God said, ", "The LORD ", "Let"};
  std::map<int64_t, Expect> open;     // submitted, not yet finished
  std::map<int64_t, RequestResult> done;
  std::map<std::pair<std::vector<int32_t>, int32_t>, std::vector<int32_t>> alone_cache;
  auto collect = [&] {
    for (RequestResult& r : ex->take_finished()) {
      ASSERT_EQ(done.count(r.id), 0u) << "request " << r.id << " finished twice";
      ASSERT_EQ(open.count(r.id), 1u) << "unknown request " << r.id;
      done[r.id] = std::move(r);
    }
  };
  std::map<int64_t, Expect> all;
  for (int op = 0; op < 400; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 3) {  // submit
      Expect e;
      std::string text = stems[rng() % stems.size()];
      for (int k = static_cast<int>(rng() % 12); k > 0; --k) text += static_cast<char>('a' + rng() % 26);
      e.prompt = testing::ids(text);
      e.params.max_new_tokens = static_cast<int32_t>(rng() % 20);
      e.params.n = 1 + static_cast<int32_t>(rng() % 3);
      e.params.sampling.temperature = rng() % 2 ? 0.0f : 0.8f;
      e.params.sampling.seed = rng();
      e.greedy_checkable = e.params.sampling.temperature == 0.0f;
      Result<int64_t> id = kind == 0 && e.params.n == 1 ? ex->open(e.prompt, e.params)
                                                        : ex->submit(e.prompt, e.params);
      if (id.ok()) {
        open[*id] = e;
        all[*id] = e;
      } else {
        EXPECT_EQ(id.status().code(), StatusCode::kResourceExhausted) << id.status().to_string();
      }
    } else if (kind == 3 && !open.empty()) {  // cancel or close an unfinished request
      auto it = std::next(open.begin(), static_cast<long>(rng() % open.size()));
      if (done.count(it->first)) continue;
      const Status s = rng() % 2 ? ex->cancel(it->first) : ex->close(it->first);
      EXPECT_TRUE(s.ok()) << s.to_string();
      all[it->first].cancelled = true;
    } else if (kind == 4 && !all.empty()) {  // clone any request that still holds cells
      auto it = std::next(all.begin(), static_cast<long>(rng() % all.size()));
      GenerateParams p;
      p.max_new_tokens = static_cast<int32_t>(rng() % 8);
      Result<int64_t> id = ex->clone(it->first, 1 + static_cast<int64_t>(rng() % 20), p);
      if (id.ok()) {
        Expect e;
        e.params = p;
        open[*id] = e;
        all[*id] = e;
      } else {
        const StatusCode c = id.status().code();
        EXPECT_TRUE(c == StatusCode::kNotFound || c == StatusCode::kInvalidArgument ||
                    c == StatusCode::kResourceExhausted) << id.status().to_string();
      }
    } else {  // step
      ASSERT_TRUE(ex->step().ok());
    }
    collect();
    const ExecutorStats s = ex->stats();
    ASSERT_LE(s.running, o.max_sessions);
    ASSERT_GE(ex->cache().free_cells(), 0);
  }
  for (int guard = 0; !ex->idle() && guard < 100000; ++guard) {
    ASSERT_TRUE(ex->step().ok());
    collect();
  }
  collect();
  ASSERT_EQ(done.size(), open.size());
  for (const auto& [id, r] : done) {
    const Expect& e = all.at(id);
    ASSERT_EQ(r.completions.size(), static_cast<size_t>(e.params.n));
    for (const Completion& c : r.completions) {
      ASSERT_NE(c.finish, Finish::kNone);
      ASSERT_LE(c.tokens.size(), static_cast<size_t>(e.params.max_new_tokens));
      if (c.finish == Finish::kCancelled) {
        EXPECT_TRUE(e.cancelled) << "request " << id;
      }
      if (c.finish == Finish::kLength) {
        EXPECT_EQ(c.tokens.size(), static_cast<size_t>(e.params.max_new_tokens));
      }
      EXPECT_NE(c.finish, Finish::kCacheFull);  // the pool holds one whole session
      if (e.greedy_checkable && c.finish == Finish::kLength) {
        auto key = std::make_pair(e.prompt, e.params.max_new_tokens);
        if (!alone_cache.count(key)) alone_cache[key] = testing::alone(e.prompt, e.params.max_new_tokens);
        EXPECT_EQ(c.tokens, alone_cache.at(key)) << "request " << id;
      }
    }
  }
  ex->clear_prefix_cache();
  EXPECT_EQ(ex->cache().free_cells(), empty_free);
  EXPECT_EQ(ex->cache().used_end(), 0);
  EXPECT_GT(ex->stats().preemptions + ex->stats().evictions, 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerProperty, ::testing::Values(1u, 2u, 3u, 4u));

}  // namespace
}  // namespace kvcache::serve
