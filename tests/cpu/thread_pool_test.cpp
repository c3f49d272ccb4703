// ThreadPool: every task runs exactly once, chunks cover [0, n) disjointly, the pool is
// reusable many times in a row (as a decode step does per layer).
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "cpu/thread_pool.h"

namespace kvcache::cpu {
namespace {

TEST(ThreadPool, RunTasksRunsEachTaskOnce) {
  for (int n_threads : {1, 2, 3, 4}) {
    ThreadPool pool(n_threads);
    EXPECT_EQ(pool.size(), n_threads);
    for (int round = 0; round < 200; ++round) {
      std::vector<std::atomic<int>> hits(37);
      pool.run_tasks(37, [&](int64_t t) { hits[t].fetch_add(1); });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "threads " << n_threads;
    }
  }
}

TEST(ThreadPool, ParallelForCoversRangeWithAtMostSizeChunks) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  std::atomic<int> chunks{0};
  pool.parallel_for(1000, [&](int64_t b, int64_t e) {
    chunks.fetch_add(1);
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(chunks.load(), 3);
  pool.parallel_for(2, [&](int64_t b, int64_t e) { EXPECT_EQ(e - b, 1); });
  pool.parallel_for(0, [&](int64_t, int64_t) { ADD_FAILURE() << "no work for n = 0"; });
}

TEST(ThreadPool, NonPositiveSizeRunsInline) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), 1);
  int sum = 0;
  pool.run_tasks(4, [&](int64_t t) { sum += static_cast<int>(t); });
  EXPECT_EQ(sum, 6);
}

TEST(ThreadPool, GlobalPoolCanBeResized) {
  set_global_threads(2);
  EXPECT_EQ(global_pool().size(), 2);
  set_global_threads(1);
  EXPECT_EQ(global_pool().size(), 1);
}

}  // namespace
}  // namespace kvcache::cpu
