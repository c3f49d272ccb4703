// The engine thread on the embedded tiny model: concurrent submissions stream pieces and
// finish with what `kvcache run` generates alone; cancel frees cells; the queue limit and the
// executor's refusals reach the caller; stop() ends everything in flight.
#include "server/engine_loop.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "../serve/serve_test_util.h"

namespace kvcache::server {
namespace {

using namespace std::chrono_literals;
using serve::testing::alone;
using serve::testing::ids;
using serve::testing::make;

serve::GenerateParams greedy(int32_t max_new) {
  serve::GenerateParams p;
  p.max_new_tokens = max_new;
  return p;
}

// Collects a channel's news until its result (bounded).
struct Collected {
  bool accepted = false;
  std::optional<Status> refused;
  std::string streamed;
  std::optional<serve::RequestResult> result;
};
Collected collect(RequestChannel& ch) {
  Collected c;
  for (int i = 0; i < 600 && !c.result && !c.refused; ++i) {
    RequestChannel::News n = ch.wait(50ms);
    c.accepted |= n.accepted;
    if (n.refused) c.refused = n.refused;
    for (const StreamPiece& p : n.pieces) c.streamed += p.text;
    if (n.result) c.result = std::move(n.result);
  }
  return c;
}

TEST(EngineLoop, ConcurrentRequestsStreamAndMatchARunAlone) {
  serve::ExecutorOptions o;
  o.max_sessions = 4;
  auto ex = make(o);
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 16);
  loop.start();
  const std::vector<std::string> prompts = {"The LORD", "And it came", "In the beginning", "x"};
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const std::string& p : prompts) {
    Result<std::shared_ptr<RequestChannel>> ch = loop.submit(ids(p), greedy(24), /*stream=*/true);
    ASSERT_TRUE(ch.ok()) << ch.status().to_string();
    chans.push_back(*ch);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    Collected c = collect(*chans[i]);
    ASSERT_TRUE(c.result) << prompts[i];
    EXPECT_TRUE(c.accepted);
    ASSERT_EQ(c.result->completions.size(), 1u);
    EXPECT_EQ(c.result->completions[0].tokens, alone(ids(prompts[i]), 24)) << prompts[i];
    EXPECT_EQ(c.streamed, c.result->completions[0].text);
  }
  loop.stop();
  const EngineSnapshot s = loop.snapshot();
  EXPECT_EQ(s.prompt_tokens, 8 + 11 + 16 + 1);
  EXPECT_EQ(s.generated_tokens, 4 * 24);
  EXPECT_EQ(s.stats.running, 0);
}

TEST(EngineLoop, CancelEndsTheRequestAndFreesItsCells) {
  serve::ExecutorOptions o;
  o.max_sessions = 2;
  o.prefix_cache = false;
  auto ex = make(o);
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 16);
  loop.start();
  serve::GenerateParams p = greedy(200);
  p.ignore_eos = true;
  auto ch = loop.submit(ids("cancel me"), p, /*stream=*/true);
  ASSERT_TRUE(ch.ok());
  // Wait for the first piece, then cancel.
  bool streaming = false;
  for (int i = 0; i < 200 && !streaming; ++i) streaming = !(*ch)->wait(20ms).pieces.empty();
  ASSERT_TRUE(streaming);
  loop.cancel(*ch);
  Collected c = collect(**ch);
  ASSERT_TRUE(c.result);
  EXPECT_EQ(c.result->completions[0].finish, serve::Finish::kCancelled);
  EXPECT_LT(c.result->completions[0].tokens.size(), 200u);
  EngineSnapshot s;
  for (int i = 0; i < 100; ++i) {  // the snapshot is published after the delivery
    s = loop.snapshot();
    if (s.free_cells == s.capacity) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(s.free_cells, s.capacity);
  EXPECT_EQ(s.finished[static_cast<size_t>(serve::Finish::kCancelled)], 1);
}

TEST(EngineLoop, QueueLimitRefusesWithResourceExhausted) {
  auto ex = make(serve::ExecutorOptions{});
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 2);  // not started: everything stays in the inbox
  ASSERT_TRUE(loop.submit(ids("a"), greedy(4), false).ok());
  ASSERT_TRUE(loop.submit(ids("b"), greedy(4), false).ok());
  Result<std::shared_ptr<RequestChannel>> third = loop.submit(ids("c"), greedy(4), false);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(), "the queue of requests waiting for a session is full (2, max_queue)");
}

TEST(EngineLoop, CallRunsBetweenStepsAndReturnsTheStatus) {
  auto ex = make(serve::ExecutorOptions{});
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 4);
  loop.start();
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  Status st = loop.call([&](serve::Executor& e) {
    ran_on = std::this_thread::get_id();
    return e.idle() ? not_found("idle") : ok_status();
  });
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "idle");
  EXPECT_NE(ran_on, caller);
  loop.stop();
  bool ran = false;
  st = loop.call([&](serve::Executor&) {
    ran = true;
    return ok_status();
  });
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(ran);
}

TEST(EngineLoop, ExecutorRefusalArrivesOnTheChannel) {
  auto ex = make(serve::ExecutorOptions{});
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 4);
  loop.start();
  auto ch = loop.submit({1, 100000}, greedy(4), false);  // a token outside the vocabulary
  ASSERT_TRUE(ch.ok());
  Collected c = collect(**ch);
  ASSERT_TRUE(c.refused);
  EXPECT_EQ(c.refused->code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(c.result);
}

TEST(EngineLoop, StopCancelsInFlightAndRefusesNewWork) {
  serve::ExecutorOptions o;
  o.max_sessions = 1;
  auto ex = make(o);
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 8);
  loop.start();
  serve::GenerateParams p = greedy(200);
  p.ignore_eos = true;
  auto a = loop.submit(ids("first"), p, true);
  auto b = loop.submit(ids("second, queued"), p, true);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 200 && (*a)->wait(20ms).pieces.empty(); ++i) {
  }
  loop.stop();
  Collected ca = collect(**a), cb = collect(**b);
  ASSERT_TRUE(ca.result && cb.result);
  EXPECT_EQ(ca.result->completions[0].finish, serve::Finish::kCancelled);
  EXPECT_EQ(cb.result->completions[0].finish, serve::Finish::kCancelled);
  Result<std::shared_ptr<RequestChannel>> late = loop.submit(ids("late"), greedy(4), false);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kFailedPrecondition);
}

TEST(EngineLoop, CallRunsOnTheEngineThreadBetweenStepsAndClearsTheRetainedPrefixes) {
  serve::ExecutorOptions o;
  o.max_sessions = 2;
  auto ex = make(o);
  ASSERT_TRUE(ex);
  EngineLoop loop(*ex, 8);
  EXPECT_EQ(loop.call([](serve::Executor&) { return ok_status(); }).code(), StatusCode::kFailedPrecondition);
  loop.start();
  auto ch = loop.submit(ids("In the beginning"), greedy(6), /*stream=*/false);
  ASSERT_TRUE(ch.ok());
  ASSERT_TRUE(collect(**ch).result);
  std::thread::id ran_on;
  int32_t retained = -1;
  int64_t free_after = -1;
  ASSERT_TRUE(loop.call([&](serve::Executor& e) {
                    ran_on = std::this_thread::get_id();
                    retained = e.stats().retained;
                    e.clear_prefix_cache();
                    free_after = e.cache().free_cells();
                    return ok_status();
                  }).ok());
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(retained, 1);  // the finished request was kept for its prefix
  const EngineSnapshot s = loop.snapshot();  // published by call() before it returned
  EXPECT_EQ(s.stats.retained, 0);
  EXPECT_EQ(s.free_cells, s.capacity);
  EXPECT_EQ(free_after, s.capacity);
  loop.stop();
  EXPECT_EQ(loop.call([](serve::Executor&) { return ok_status(); }).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvcache::server
