// ThreadPool: persistent workers woken per job by a generation counter. Each job owns its task
// counter, so a worker that wakes late finds the counter spent and leaves without touching the
// caller's function, and the caller waits only for tasks that were claimed — never for a
// worker the OS has not scheduled yet (on a loaded machine that wait costs a time slice).
// Workers spin briefly (a decode step dispatches many small jobs microseconds apart), then
// sleep on a condition variable; the caller takes tasks too.
#include "cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVCACHE_CPU_RELAX() _mm_pause()
#else
#define KVCACHE_CPU_RELAX() std::this_thread::yield()
#endif

namespace kvcache::cpu {

namespace {
constexpr int kSpinIterations = 4000;  // ~tens of microseconds before a thread sleeps

// One run_tasks call. Shared with the workers that picked it up; `fn` is called only for a
// claimed task index, and every claimed task finishes before run_tasks returns.
struct Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n_tasks = 0;
  std::atomic<int64_t> next{0};      // next task index to claim
  std::atomic<int64_t> finished{0};  // tasks completed

  // Runs claimed tasks until none are left; true when this thread finished the last one.
  bool drain() {
    bool last = false;
    for (;;) {
      const int64_t task = next.fetch_add(1, std::memory_order_relaxed);
      if (task >= n_tasks) return last;
      (*fn)(task);
      last = finished.fetch_add(1, std::memory_order_acq_rel) + 1 == n_tasks;
    }
  }
  bool complete() const { return finished.load(std::memory_order_acquire) == n_tasks; }
};
}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake;
  std::condition_variable done;
  std::atomic<uint64_t> generation{0};
  bool stop = false;
  std::shared_ptr<Job> job;  // the newest job; guarded by mu

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = generation.load(std::memory_order_acquire);
      for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
        KVCACHE_CPU_RELAX();
        gen = generation.load(std::memory_order_acquire);
      }
      std::shared_ptr<Job> current;
      {
        std::unique_lock lock(mu);
        wake.wait(lock, [&] { return stop || generation.load() != seen; });
        if (stop) return;
        seen = generation.load();
        current = job;
      }
      if (current && current->drain()) {
        std::lock_guard lock(mu);
        done.notify_all();
      }
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  impl_->n_threads = std::max(1, n_threads);
  for (int i = 1; i < impl_->n_threads; ++i)
    impl_->workers.emplace_back([this] { impl_->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  for (auto& w : impl_->workers) w.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::run_tasks(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  Impl& p = *impl_;
  if (p.workers.empty() || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n_tasks = n_tasks;
  {
    std::lock_guard lock(p.mu);
    p.job = job;
    p.generation.fetch_add(1, std::memory_order_release);
  }
  p.wake.notify_all();
  job->drain();
  // Only tasks a worker already claimed can be outstanding; wait for those.
  for (int i = 0; i < kSpinIterations && !job->complete(); ++i) KVCACHE_CPU_RELAX();
  if (!job->complete()) {
    std::unique_lock lock(p.mu);
    p.done.wait(lock, [&] { return job->complete(); });
  }
}
void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t chunks = std::min<int64_t>(n, size());
  run_tasks(chunks, [&](int64_t c) { fn(n * c / chunks, n * (c + 1) / chunks); });
}

namespace {
std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& global_mu() {
  static std::mutex mu;
  return mu;
}
}  // namespace

ThreadPool& global_pool() {
  std::lock_guard lock(global_mu());
  auto& slot = global_slot();
  if (!slot) {
    const unsigned hw = std::thread::hardware_concurrency();
    slot = std::make_unique<ThreadPool>(static_cast<int>(std::clamp(hw, 1u, 8u)));
  }
  return *slot;
}

void set_global_threads(int n_threads) {
  std::lock_guard lock(global_mu());
  global_slot() = std::make_unique<ThreadPool>(std::max(1, n_threads));
}

}  // namespace kvcache::cpu
