// Decode through the cell layout's per-window pools (issue: sliding windows in the cell layout):
// a Gemma-3-like geometry — 5 Sliding(1024) cache layers then 1 full, 8 kv heads x 128, 32 q
// heads, f16 K/V — serving 4 sessions whose contexts (4096) are well past the window, filled
// in turns of `run` tokens per session (512: chunked prefills side by side; 16: close to
// decoding side by side, where each pool interleaves the sessions cell by cell). One
// decode step (one token per session) goes through the real Cache::update_and_attend of every
// layer; each layer's call is timed and its K/V bytes read (each session's visible keys: its
// whole context on the full layer, its last W positions on a sliding one) are summed per layer
// kind. Reports bytes/s per kind and each as a ratio to the read probe run in this process
// with the same threads, plus sliding_over_full; and the same ratio from process CPU time
// (sliding_over_full_cpu), which a shared machine's load disturbs far less than wall time.
// Run with --benchmark_format=json.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include <time.h>

#include "bench_main.h"
#include "cpu/cpu_cache.h"
#include "cpu/thread_pool.h"
#include "read_probe.h"

namespace kvcache::cpu {
namespace {

constexpr int32_t kSessions = 4, kQHeads = 32, kKvHeads = 8, kDim = 128, kWindow = 1024;
constexpr int32_t kSliding = 5, kLayers = 6;  // layers 0..4 sliding, layer 5 full
constexpr int64_t kContext = 4096, kChunk = 512, kMaxSteps = 512;  // kChunk: the largest run
constexpr int64_t kRowBytes = int64_t{kKvHeads} * kDim * 2 /* K and V */ * 2 /* f16 */;

void must(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "cell_decode_bench: %s\n", s.to_string().c_str());
    std::abort();
  }
}

std::vector<float> noise(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(int(seed >> 9) - (1 << 22)) / float(1 << 22);
  }
  return v;
}

// The cache after every session prefilled kContext tokens in chunks of `run` taken in turn
// (so the pools interleave the sessions in runs of `run` cells). Built once per run length;
// decode steps then advance every session (capacity leaves kMaxSteps of room).
struct Fixture {
  std::shared_ptr<Cache> cache;
  std::vector<float> q, k, v, out;
  int64_t steps_left = kMaxSteps;

  explicit Fixture(int64_t run) {
    CacheGeometry g;
    for (int32_t l = 0; l < kLayers; ++l)
      g.layers.push_back({kKvHeads, kDim, kDim, l < kSliding ? kWindow : 0});
    CacheConfig c;
    c.capacity = kSessions * (kContext + kMaxSteps);
    c.kv_dtype = DType::kF16;
    c.max_write = static_cast<int32_t>(kChunk);
    c.max_seqs = kSessions;
    Result<std::shared_ptr<Cache>> made = make_cpu_cache(kCellKind, g, c);
    must(made.status());
    cache = *made;
    for (int32_t s = 0; s < kSessions; ++s) must(cache->seq_new().status());
    k = noise(size_t{kChunk} * kKvHeads * kDim, 7);
    v = noise(k.size(), 11);
    q = noise(size_t{kChunk} * kQHeads * kDim, 13);
    out.resize(q.size());
    std::vector<int32_t> ids(run);
    std::vector<int64_t> pos(run);
    const size_t qn = size_t(run) * kKvHeads * kDim;
    for (int64_t done = 0; done < kContext; done += run)
      for (int32_t s = 0; s < kSessions; ++s) {
        std::fill(ids.begin(), ids.end(), s);
        for (int64_t i = 0; i < run; ++i) pos[i] = done + i;
        must(cache->declare_step(ids));
        // Prefill with one q head per kv head: the K/V written is what matters here.
        for (int32_t l = 0; l < kLayers; ++l)
          must(cache->update_and_attend(AttendArgs{
              l, static_cast<int32_t>(run), kKvHeads, pos, std::span<const float>(q).first(qn),
              std::span<const float>(k).first(qn), std::span<const float>(v).first(qn), 0.088f,
              0.0f, std::span<float>(out).first(qn)}));
      }
  }
};

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

Fixture& fixture(int64_t run) {
  static std::map<int64_t, std::unique_ptr<Fixture>> built;
  std::unique_ptr<Fixture>& f = built[run];
  if (!f) f = std::make_unique<Fixture>(run);
  return *f;
}

void BM_CellDecodeSlidingVsFull(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t run = state.range(1);
  set_global_threads(threads);
  Fixture& f = fixture(run);
  Cache& cache = *f.cache;
  std::vector<int32_t> ids(kSessions);
  std::vector<int64_t> pos(kSessions);
  for (int32_t s = 0; s < kSessions; ++s) ids[s] = s;
  const size_t qn = size_t{kSessions} * kQHeads * kDim, kvn = size_t{kSessions} * kKvHeads * kDim;
  double seconds[2] = {0, 0}, cpu[2] = {0, 0}, bytes[2] = {0, 0};  // [0] sliding, [1] full
  const bench::ProbeAround probe(threads);
  for (auto _ : state) {
    if (f.steps_left-- <= 0) {
      state.SkipWithError("the fixture's room for decode steps is used up");
      break;
    }
    for (int32_t s = 0; s < kSessions; ++s) pos[s] = cache.pos(s);
    must(cache.declare_step(ids));
    for (int32_t l = 0; l < kLayers; ++l) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      must(cache.update_and_attend(AttendArgs{
          l, kSessions, kQHeads, pos, std::span<const float>(f.q).first(qn),
          std::span<const float>(f.k).first(kvn), std::span<const float>(f.v).first(kvn), 0.088f,
          0.0f, std::span<float>(f.out).first(qn)}));
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const bool full = l >= kSliding;
      seconds[full] += dt;
      cpu[full] += cpu_seconds() - c0;
      for (int32_t s = 0; s < kSessions; ++s)
        bytes[full] += double(full ? pos[s] + 1 : std::min<int64_t>(kWindow, pos[s] + 1)) * kRowBytes;
    }
    benchmark::DoNotOptimize(f.out.data());
  }
  if (seconds[0] <= 0 || seconds[1] <= 0) return;
  const double probe_bps = probe.best();
  const double sliding_bps = bytes[0] / seconds[0], full_bps = bytes[1] / seconds[1];
  state.counters["sliding_bytes_per_second"] = sliding_bps;
  state.counters["full_bytes_per_second"] = full_bps;
  state.counters["sliding_probe_ratio"] = sliding_bps / probe_bps;
  state.counters["full_probe_ratio"] = full_bps / probe_bps;
  state.counters["sliding_over_full"] = sliding_bps / full_bps;
  if (cpu[0] > 0 && cpu[1] > 0)
    state.counters["sliding_over_full_cpu"] = (bytes[0] / cpu[0]) / (bytes[1] / cpu[1]);
  state.counters["probe_bytes_per_second"] = probe_bps;
  state.counters["context"] = double(cache.pos(0));
  state.SetLabel("f16, 4 sessions in runs of " + std::to_string(run) +
                 ", 5 x sliding(1024) + 1 full");
}

// 64 steps a repetition, 2 x 3 of them per fixture: the contexts grow from 4096 to at most
// 4480 (bytes are counted from the actual positions).
BENCHMARK(BM_CellDecodeSlidingVsFull)
    ->ArgNames({"threads", "run"})
    ->ArgsProduct({{1, 2}, {kChunk, 16}})
    ->Iterations(64)
    ->Repetitions(3)
    ->ReportAggregatesOnly(false)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvcache::cpu

KVCACHE_BENCHMARK_MAIN();
