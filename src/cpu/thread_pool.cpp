// ThreadPool: persistent workers woken per job by a generation counter. Workers spin briefly
// (a decode step dispatches once per layer, microseconds apart) and then sleep on a condition
// variable; the caller takes tasks too and returns when every task has finished.
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
constexpr int kSpinIterations = 4000;  // ~tens of microseconds before a worker sleeps
}

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake;
  std::condition_variable done;
  std::atomic<uint64_t> generation{0};
  bool stop = false;
  // The current job: read by workers after they observe a new generation.
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t n_tasks = 0;
  std::atomic<int64_t> next{0};
  std::atomic<int> busy{0};  // workers still inside the current job

  void drain() {
    for (;;) {
      const int64_t task = next.fetch_add(1, std::memory_order_relaxed);
      if (task >= n_tasks) return;
      (*fn)(task);
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      uint64_t gen = generation.load(std::memory_order_acquire);
      for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
        KVCACHE_CPU_RELAX();
        gen = generation.load(std::memory_order_acquire);
      }
      if (gen == seen) {
        std::unique_lock lock(mu);
        wake.wait(lock, [&] { return stop || generation.load() != seen; });
        if (stop) return;
        gen = generation.load();
      }
      seen = gen;
      drain();
      if (busy.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mu);
        done.notify_one();
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
  {
    std::lock_guard lock(p.mu);
    p.fn = &fn;
    p.n_tasks = n_tasks;
    p.next.store(0, std::memory_order_relaxed);
    p.busy.store(static_cast<int>(p.workers.size()), std::memory_order_relaxed);
    p.generation.fetch_add(1, std::memory_order_release);
  }
  p.wake.notify_all();
  p.drain();
  // Workers leave drain() once the counter runs out; wait until the last one has.
  for (int i = 0; i < kSpinIterations && p.busy.load(std::memory_order_acquire) != 0; ++i)
    KVCACHE_CPU_RELAX();
  if (p.busy.load(std::memory_order_acquire) != 0) {
    std::unique_lock lock(p.mu);
    p.done.wait(lock, [&] { return p.busy.load(std::memory_order_acquire) == 0; });
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
