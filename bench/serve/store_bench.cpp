// kvcache_store_bench: the shared prefix store on the ~100M-parameter benchmark model (f16
// weights, f16 K/V). The benchmark starts its own Debian redis-server on a free loopback port
// (tests/serve/redis_server.h) and stops it at exit.
//   BM_StoreTtft/block_tokens: time to first token of a request whose 2K-token prefix (plus 16
//     own tokens) is (a) cold — prefilled, (b) a local prefix hit — cloned from a retained
//     sequence, (c) a Redis hit — written by another executor, fetched and imported by this
//     one. All three run in each iteration, one after another, so the ratios compare like
//     with like on a shared machine. Both executors allocate their pools up front and the
//     reader runs one short request first, so no timing includes a first allocation.
// Counters: cold_ms, local_ms, redis_ms; local_speedup and redis_speedup (cold ÷ each);
// store_bytes_per_token (value bytes written ÷ tokens they hold); saved_ms (cold − redis) and
// store_mb_per_saved_s (megabytes fetched per second of prefill saved).
// Output: Google Benchmark (--benchmark_format=json).
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_main.h"
#include "bench_model.h"
#include "redis_server.h"
#include "serve/executor.h"

namespace kvcache::serve {
namespace {

using bench::BenchModel;
using Clock = std::chrono::steady_clock;
constexpr int64_t kPrefix = 2048, kOwn = 16;

std::vector<int32_t> random_prompt(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % BenchModel::kVocab);
  return t;
}

testing::RedisServer& redis() {
  static testing::RedisServer r;
  static const bool started = r.start();
  (void)started;
  return r;
}

Result<std::unique_ptr<Executor>> make(const engine::Model& m, int32_t block, bool store) {
  ExecutorOptions o;
  o.max_sessions = 2;
  o.max_session_tokens = kPrefix + 2 * kOwn;
  o.initial_capacity = 2 * o.max_session_tokens;  // no pool growth inside a timed request
  o.kv_dtype = DType::kF16;
  o.block_tokens = block;
  o.store_wait_ms = 10000;
  if (store) o.kv_store = redis().url();
  return Executor::create(m, nullptr, o);
}

// Milliseconds from submit to the first sampled token.
double ttft_ms(Executor& ex, const std::vector<int32_t>& prompt) {
  GenerateParams p;
  p.max_new_tokens = 1;
  Clock::time_point first{};
  ex.set_on_token([&](const TokenEvent&) {
    if (first == Clock::time_point{}) first = Clock::now();
  });
  const Clock::time_point t0 = Clock::now();
  (void)ex.submit(prompt, p);
  (void)ex.run();
  (void)ex.take_finished();
  ex.set_on_token(nullptr);
  return std::chrono::duration<double, std::milli>(first - t0).count();
}

std::vector<int32_t> with_own(const std::vector<int32_t>& prefix, uint64_t seed) {
  std::vector<int32_t> p = prefix;
  const std::vector<int32_t> own = random_prompt(kOwn, seed);
  p.insert(p.end(), own.begin(), own.end());
  return p;
}

void BM_StoreTtft(benchmark::State& bs) {
  const auto block = static_cast<int32_t>(bs.range(0));
  const bench::LoadedBenchModel& b = bench::load_bench_model(kPrefix + 256);
  if (!b.error.empty()) return bs.SkipWithError(b.error.c_str());
  if (redis().port() == 0 || !redis().start())
    return bs.SkipWithError("no redis-server (install it: scripts/setup.sh)");
  double cold = 0, local = 0, remote = 0;
  int64_t bytes_out = 0, stored_tokens = 0, bytes_in = 0;
  uint64_t seed = 1;
  for (auto _ : bs) {
    redis().flushall();
    const std::vector<int32_t> prefix = random_prompt(kPrefix, 1000 + seed);
    auto writer = make(*b.model, block, true);
    auto reader = make(*b.model, block, true);
    if (!writer.ok() || !reader.ok()) return bs.SkipWithError("executor refused");
    (void)ttft_ms(**reader, random_prompt(kOwn, 7));  // warm its buffers (no full block)
    // (a) cold: the writer prefills the prefix (and writes its blocks to Redis).
    cold += ttft_ms(**writer, with_own(prefix, ++seed));
    (void)(*writer)->flush_store(std::chrono::seconds(60));
    // (b) local: the writer holds the prefix (retained) and clones it.
    local += ttft_ms(**writer, with_own(prefix, ++seed));
    // (c) Redis: the reader has never seen the prefix.
    remote += ttft_ms(**reader, with_own(prefix, ++seed));
    const ExecutorStats w = (*writer)->stats(), r = (*reader)->stats();
    if (r.store_hit_tokens < (kPrefix / block) * block)
      return bs.SkipWithError(("the reader hit only " + std::to_string(r.store_hit_tokens) +
                               " tokens").c_str());
    bytes_out += w.store.bytes_out;
    stored_tokens += w.store.puts * block;
    bytes_in += r.store.bytes_in;
  }
  const auto n = static_cast<double>(bs.iterations());
  bs.counters["cold_ms"] = cold / n;
  bs.counters["local_ms"] = local / n;
  bs.counters["redis_ms"] = remote / n;
  bs.counters["local_speedup"] = cold / local;
  bs.counters["redis_speedup"] = cold / remote;
  bs.counters["store_bytes_per_token"] =
      static_cast<double>(bytes_out) / static_cast<double>(stored_tokens);
  bs.counters["saved_ms"] = (cold - remote) / n;
  bs.counters["store_mb_per_saved_s"] =
      static_cast<double>(bytes_in) / 1e6 / ((cold - remote) / 1e3);
}

BENCHMARK(BM_StoreTtft)->Arg(16)->Arg(64)->Arg(256)->Iterations(2)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvcache::serve

KVCACHE_BENCHMARK_MAIN();
