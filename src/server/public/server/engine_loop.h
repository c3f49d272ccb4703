// The engine thread: the one thread that owns an Executor. HTTP threads hand it submissions
// and cancellations through a mutex-protected inbox; it steps the executor while any work is
// left, and delivers token pieces and finished results to each request's channel (a condition
// variable per request). Idle, it sleeps on a condition variable. Layer: server.
// It does not parse HTTP or JSON; metrics read its published snapshot.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "serve/executor.h"

namespace kvcache::server {

struct StreamPiece {
  int32_t completion = 0;
  std::string text;                        // raw bytes released by the token (may split a
                                           // UTF-8 character; see Utf8Stream)
  serve::Finish finish = serve::Finish::kNone;
  std::optional<engine::TokenLogprob> logprob;  // the token's, when the request asked
};

// One request's mailbox. Thread-safety: the engine thread writes, one HTTP thread reads.
class RequestChannel {
 public:
  struct News {
    bool accepted = false;                 // the executor queued it
    std::optional<Status> refused;         // the executor refused it (nothing queued)
    std::vector<StreamPiece> pieces;       // new since the last call (streaming only)
    std::optional<serve::RequestResult> result;  // set once, when it finished
  };
  // Waits up to `timeout` for something new, then moves out what is new.
  News wait(std::chrono::milliseconds timeout);

 private:
  friend class EngineLoop;
  void push(StreamPiece p);
  void accept(int64_t id);
  void refuse(Status s);
  void finish(serve::RequestResult r);

  std::mutex mu_;
  std::condition_variable cv_;
  bool accepted_ = false, accepted_told_ = false;
  std::optional<Status> refused_;
  std::vector<StreamPiece> pieces_;
  std::optional<serve::RequestResult> result_;
  // Engine-thread only:
  int64_t id_ = -1;
  bool stream_ = false;
  std::vector<int32_t> prompt_;
  serve::GenerateParams params_;
};

// Upper bounds (seconds) of the step-time histogram buckets; +Inf is implicit.
inline constexpr double kStepBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,   0.25,   0.5,   1.0,  2.5};
inline constexpr size_t kStepBucketCount = sizeof(kStepBuckets) / sizeof(kStepBuckets[0]);

// What the engine thread published after its last step.
struct EngineSnapshot {
  serve::ExecutorStats stats;
  int64_t capacity = 0;          // cells a step may claim with no session (the smallest pool:
                                 // sliding-window pools are smaller than the full one)
  int64_t free_cells = 0;
  int64_t allocated_bytes = 0;
  int64_t queued = 0;            // submissions not yet handed to the executor
  int64_t prompt_tokens = 0;     // of finished requests
  int64_t generated_tokens = 0;  // of finished requests
  int64_t cached_tokens = 0;     // prompt tokens of finished requests taken from the pool
  int64_t step_failures = 0;
  int64_t finished[5] = {};      // completions by serve::Finish (kNone unused)
  uint64_t step_counts[kStepBucketCount + 1] = {};  // per bucket (not cumulative); last = +Inf
  double step_seconds_sum = 0.0;
};

// Thread-safety: every public method may be called from any thread.
class EngineLoop {
 public:
  // `max_queue` (>= 1): submissions waiting for a session beyond which submit() refuses.
  EngineLoop(serve::Executor& executor, int64_t max_queue);
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void start();
  // ResourceExhausted when max_queue requests wait already; FailedPrecondition once stopping. The
  // executor's own checks arrive later on the channel (News::refused).
  Result<std::shared_ptr<RequestChannel>> submit(std::vector<int32_t> prompt,
                                                 const serve::GenerateParams& params,
                                                 bool stream);
  // Ends the request and frees its cells at the engine's next turn (idempotent).
  void cancel(const std::shared_ptr<RequestChannel>& ch);
  // Refuses new submissions, closes every request in flight (their channels get a cancelled
  // result) and joins the thread. Bounded by one engine step.
  void stop();
  bool stopping() const { return stopping_.load(); }
  EngineSnapshot snapshot() const;
  // Runs `fn` on the engine thread between two steps (the executor is the engine's only then),
  // waits for it, publishes a fresh snapshot and returns fn's status. FailedPrecondition (fn
  // not run) once stopping or before start(). For whole-executor actions outside a request:
  // clearing the prefix cache, saving and restoring prefixes. Never call it from the engine
  // thread (e.g. inside `fn`): it would wait for itself.
  Status call(std::function<Status(serve::Executor&)> fn);

 private:
  struct Task;
  void run();
  void run_tasks(std::vector<std::shared_ptr<Task>>& tasks);
  void deliver_finished();
  void publish();

  serve::Executor& ex_;
  const int64_t max_queue_;
  const int64_t empty_free_cells_;  // free cells of the empty cache (see EngineSnapshot)
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;  // guards the inbox and the published numbers below
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestChannel>> inbox_, cancels_;
  std::vector<std::shared_ptr<Task>> tasks_;  // call()s waiting for the engine's next turn
  bool started_ = false;
  int64_t waiting_ = 0;    // executor's waiting sessions after the last step

  mutable std::mutex snap_mu_;
  EngineSnapshot snap_;

  // Engine-thread only:
  std::unordered_map<int64_t, std::shared_ptr<RequestChannel>> live_;  // by executor id
  EngineSnapshot counters_;
};

}  // namespace kvcache::server
