#include "server/engine_loop.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <utility>

#include "core/str_cat.h"

namespace kvcache::server {

RequestChannel::News RequestChannel::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  auto has_news = [&] {
    return (accepted_ && !accepted_told_) || refused_ || !pieces_.empty() || result_;
  };
  cv_.wait_for(lk, timeout, has_news);
  News n;
  n.accepted = accepted_;
  accepted_told_ = accepted_;
  n.refused = refused_;
  n.pieces.swap(pieces_);
  if (result_) {
    n.result = std::move(result_);
    result_.reset();
  }
  return n;
}

void RequestChannel::push(StreamPiece p) {
  std::lock_guard<std::mutex> lk(mu_);
  pieces_.push_back(std::move(p));
  cv_.notify_all();
}

void RequestChannel::accept(int64_t id) {
  id_ = id;
  std::lock_guard<std::mutex> lk(mu_);
  accepted_ = true;
  cv_.notify_all();
}

void RequestChannel::refuse(Status s) {
  std::lock_guard<std::mutex> lk(mu_);
  refused_ = std::move(s);
  cv_.notify_all();
}

void RequestChannel::finish(serve::RequestResult r) {
  std::lock_guard<std::mutex> lk(mu_);
  result_ = std::move(r);
  cv_.notify_all();
}

EngineLoop::EngineLoop(serve::Executor& executor, int64_t max_queue)
    : ex_(executor), max_queue_(std::max<int64_t>(1, max_queue)),
      empty_free_cells_(executor.cache().free_cells()) {
  ex_.set_on_token([this](const serve::TokenEvent& e) {
    auto it = live_.find(e.request);
    if (it == live_.end() || !it->second->stream_) return;
    StreamPiece piece{e.completion, std::string(e.piece), e.finish, std::nullopt};
    if (e.logprob != nullptr) piece.logprob = *e.logprob;
    it->second->push(std::move(piece));
  });
  publish();
}

EngineLoop::~EngineLoop() { stop(); }

// A call() waiting for the engine thread; `done` under the loop's mutex.
struct EngineLoop::Task {
  std::function<Status(serve::Executor&)> fn;
  Status status;
  bool done = false;
  std::condition_variable cv;
};

void EngineLoop::start() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    started_ = true;
  }
  thread_ = std::thread([this] { run(); });
}

Status EngineLoop::call(std::function<Status(serve::Executor&)> fn) {
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  std::unique_lock<std::mutex> lk(mu_);
  if (stopping_ || !started_) return failed_precondition("the engine is not running");
  tasks_.push_back(task);
  cv_.notify_all();
  // Every task pushed before stopping_ is set is run by the engine's last turn, so this ends.
  task->cv.wait(lk, [&] { return task->done; });
  return task->status;
}

void EngineLoop::run_tasks(std::vector<std::shared_ptr<Task>>& tasks) {
  if (tasks.empty()) return;
  for (auto& t : tasks) t->status = t->fn(ex_);
  deliver_finished();
  publish();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& t : tasks) {
    t->done = true;
    t->cv.notify_all();
  }
}

Result<std::shared_ptr<RequestChannel>> EngineLoop::submit(std::vector<int32_t> prompt,
                                                           const serve::GenerateParams& params,
                                                           bool stream) {
  auto ch = std::make_shared<RequestChannel>();
  ch->prompt_ = std::move(prompt);
  ch->params_ = params;
  ch->stream_ = stream;
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) return failed_precondition("the server is shutting down");
  // waiting_ counts what the engine took from the inbox too (run()), so requests submitted
  // during a step cannot slip past the limit.
  if (waiting_ + static_cast<int64_t>(inbox_.size()) >= max_queue_)
    return resource_exhausted(str_cat("the queue of requests waiting for a session is full (",
                                      max_queue_, ", max_queue)"));
  inbox_.push_back(ch);
  cv_.notify_all();
  return ch;
}

void EngineLoop::cancel(const std::shared_ptr<RequestChannel>& ch) {
  std::lock_guard<std::mutex> lk(mu_);
  cancels_.push_back(ch);
  cv_.notify_all();
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

EngineSnapshot EngineLoop::snapshot() const {
  EngineSnapshot s;
  {
    std::lock_guard<std::mutex> lk(snap_mu_);
    s = snap_;
  }
  s.stats.store = ex_.store_stats();  // live: blocks are written after the step that made them
  return s;
}

void EngineLoop::deliver_finished() {
  for (serve::RequestResult& r : ex_.take_finished()) {
    auto it = live_.find(r.id);
    if (it == live_.end()) continue;
    counters_.prompt_tokens += r.prompt_tokens;
    counters_.cached_tokens += r.cached_prompt_tokens;
    for (const serve::Completion& c : r.completions) {
      counters_.generated_tokens += static_cast<int64_t>(c.tokens.size());
      const auto f = static_cast<size_t>(c.finish);
      if (f < std::size(counters_.finished)) ++counters_.finished[f];
    }
    std::shared_ptr<RequestChannel> ch = std::move(it->second);
    live_.erase(it);
    ch->finish(std::move(r));
  }
}

void EngineLoop::publish() {
  EngineSnapshot s = counters_;
  s.stats = ex_.stats();
  s.capacity = empty_free_cells_;
  s.free_cells = ex_.cache().free_cells();
  s.allocated_bytes = ex_.cache().allocated_bytes();
  {
    std::lock_guard<std::mutex> lk(mu_);
    waiting_ = s.stats.waiting;
    s.queued = static_cast<int64_t>(inbox_.size());
  }
  std::lock_guard<std::mutex> lk(snap_mu_);
  snap_ = s;
}

void EngineLoop::run() {
  for (;;) {
    std::vector<std::shared_ptr<RequestChannel>> inbox, cancels;
    std::vector<std::shared_ptr<Task>> tasks;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      const bool busy = !ex_.idle();
      cv_.wait(lk, [&] {
        return busy || stopping_ || !inbox_.empty() || !cancels_.empty() || !tasks_.empty();
      });
      inbox.swap(inbox_);
      waiting_ += static_cast<int64_t>(inbox.size());  // queued in the executor until publish()
      cancels.swap(cancels_);
      tasks.swap(tasks_);
      stopping = stopping_;
    }
    for (auto& ch : inbox) {
      Result<int64_t> id = ex_.submit(std::move(ch->prompt_), ch->params_);
      if (!id.ok()) {
        ch->refuse(id.status());
        continue;
      }
      live_[*id] = ch;
      ch->accept(*id);
    }
    if (stopping) {
      for (auto& [id, ch] : live_) cancels.push_back(ch);
    }
    for (auto& ch : cancels)
      if (ch->id_ >= 0 && live_.count(ch->id_)) (void)ex_.close(ch->id_);
    deliver_finished();
    run_tasks(tasks);
    if (stopping) {
      publish();
      return;
    }
    if (!ex_.idle()) {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = ex_.step();
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      size_t b = 0;
      while (b < kStepBucketCount && dt > kStepBuckets[b]) ++b;
      ++counters_.step_counts[b];
      counters_.step_seconds_sum += dt;
      if (!st.ok()) {
        ++counters_.step_failures;
        std::fprintf(stderr, "kvcache serve: engine step failed: %s\n", st.to_string().c_str());
      }
      deliver_finished();
    }
    publish();
  }
}

}  // namespace kvcache::server
