// Metrics text: Prometheus lines with the snapshot's values, requests by endpoint and status,
// and a cumulative step histogram whose count equals the +Inf bucket.
#include "server/metrics.h"

#include <gtest/gtest.h>

namespace kvcache::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Metrics, TextHoldsEverySnapshotNumber) {
  EngineSnapshot s;
  s.stats.running = 3;
  s.stats.waiting = 2;
  s.queued = 1;
  s.stats.prefix_hit_tokens = 48;
  s.stats.preemptions = 4;
  s.capacity = 2048;
  s.free_cells = 2000;
  s.allocated_bytes = 122880;
  s.prompt_tokens = 100;
  s.generated_tokens = 250;
  s.finished[static_cast<size_t>(serve::Finish::kCancelled)] = 2;
  s.step_counts[0] = 5;  // <= 1 ms
  s.step_counts[3] = 2;  // <= 10 ms
  s.step_counts[kStepBucketCount] = 1;  // above 2.5 s
  s.step_seconds_sum = 3.5;
  RequestCounters rc;
  rc.add("/v1/completions", 200);
  rc.add("/v1/completions", 200);
  rc.add("/v1/completions", 400);
  const std::string t = metrics_text(s, rc.counts());
  EXPECT_TRUE(has_line(t, "kvcache_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2"));
  EXPECT_TRUE(has_line(t, "kvcache_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1"));
  EXPECT_TRUE(has_line(t, "kvcache_sessions_running 3"));
  EXPECT_TRUE(has_line(t, "kvcache_sessions_waiting 3"));  // 2 in the executor + 1 queued
  EXPECT_TRUE(has_line(t, "kvcache_prefix_cache_hit_tokens_total 48"));
  EXPECT_TRUE(has_line(t, "kvcache_preemptions_total 4"));
  EXPECT_TRUE(has_line(t, "kvcache_cache_cells_used 48"));  // 2048 - 2000
  EXPECT_TRUE(has_line(t, "kvcache_cache_cells_free 2000"));
  EXPECT_TRUE(has_line(t, "kvcache_cache_allocated_bytes 122880"));
  EXPECT_TRUE(has_line(t, "kvcache_prompt_tokens_total 100"));
  EXPECT_TRUE(has_line(t, "kvcache_generated_tokens_total 250"));
  EXPECT_TRUE(has_line(t, "kvcache_completions_total{reason=\"cancelled\"} 2"));
  EXPECT_TRUE(has_line(t, "kvcache_step_seconds_bucket{le=\"0.001\"} 5"));
  EXPECT_TRUE(has_line(t, "kvcache_step_seconds_bucket{le=\"0.005\"} 5"));
  EXPECT_TRUE(has_line(t, "kvcache_step_seconds_bucket{le=\"0.01\"} 7"));
  EXPECT_TRUE(has_line(t, "kvcache_step_seconds_bucket{le=\"+Inf\"} 8"));
  EXPECT_TRUE(has_line(t, "kvcache_step_seconds_count 8"));
  EXPECT_TRUE(has_line(t, "kvcache_step_seconds_sum 3.5"));
  EXPECT_TRUE(has_line(t, "# TYPE kvcache_step_seconds histogram"));
}

}  // namespace
}  // namespace kvcache::server
