// A small fixed thread pool for the byte layer's kernels and the engine's matrix products.
// Layer: cpu. parallel_for blocks until every chunk ran; the caller's thread takes part.
// Thread-safety: parallel_for may be called from one thread at a time per pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kvcache::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1 (1 = run inline)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Calls fn(begin, end) over disjoint chunks covering [0, n); at most size() chunks run at once.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);
  // Calls fn(task) for task in [0, n_tasks), tasks shared out dynamically.
  void run_tasks(int64_t n_tasks, const std::function<void(int64_t task)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The process-wide pool used by the cpu caches (default: hardware threads, at most 8).
ThreadPool& global_pool();
// Replaces the process-wide pool. Not thread-safe with concurrent kernel calls.
void set_global_threads(int n_threads);

}  // namespace kvcache::cpu
