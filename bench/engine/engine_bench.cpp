// kvcache_engine_bench: prefill and decode tokens/s of the engine on a ~100M-parameter
// random-weight llama model (f16 weights in the file, d=768, 12 layers, 12 q / 4 kv heads,
// ff 2048, vocab 32000, tied), generated into a temp file at start. Contexts 1K, 4K, 16K.
// The context is filled cheaply: random K/V written straight into the cache through
// update_and_attend (q_heads = kv_heads, output discarded) instead of full forwards, growing
// one cache from 1K to 16K; each timed step is rewound so the context stays fixed.
// BM_Verify: the forward that checks K drafts (K + 1 rows, logits for every row) at 1K of
// context, for K = 0 (a plain decode step), 1, 2, 4, 8: its counter step_cost is its time
// in units of the K = 0 step measured in the same process (the v of docs/speculative.md).
// Output: Google Benchmark (--benchmark_format=json); counter tokens_per_s.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "bench_main.h"
#include "engine/runtime.h"
#include "program/model_geometry.h"
#include "bench_model.h"

namespace kvcache::engine {
namespace {

using bench::BenchModel;
constexpr int kLayers = BenchModel::kLayers, kKvHeads = BenchModel::kKvHeads;
constexpr int kHeadDim = BenchModel::kHeadDim, kVocab = BenchModel::kVocab;
constexpr int kChunk = BenchModel::kChunk;
constexpr int kMaxContext = 16384 + 1024;

// One model + engine + f16 sequence cache shared by every benchmark, in registration order.
struct State {
  const Model* model = nullptr;  // owned by bench::load_bench_model
  std::shared_ptr<Cache> cache;
  std::unique_ptr<Engine> engine;
  std::string error;
};

State& state() {
  static State* s = [] {
    auto* st = new State();
    const bench::LoadedBenchModel& b = bench::load_bench_model(kMaxContext);
    st->error = b.error;
    st->model = b.model.get();
    if (st->model == nullptr) return st;
    CacheOptions o;
    o.capacity = kMaxContext;
    o.kv_dtype = DType::kF16;
    Result<CachedEngine> c = build_engine(*st->model, o);
    if (!c.ok()) {
      st->error = c.status().to_string();
      return st;
    }
    st->cache = c->cache;
    st->engine = std::move(c->engine);
    return st;
  }();
  return *s;
}

// Grows (or rewinds) the cache to `ctx` positions with random K/V, kChunk tokens per step.
Status fill_to(Cache& cache, int64_t ctx) {
  if (cache.pos(0) > ctx) return cache.rewind(0, ctx);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> kv(kChunk * kKvHeads * kHeadDim), out(kv.size());
  for (float& x : kv) x = u(rng);
  std::vector<int32_t> ids;
  std::vector<int64_t> pos;
  while (cache.pos(0) < ctx) {
    const int64_t n = std::min<int64_t>(kChunk, ctx - cache.pos(0));
    ids.assign(n, 0);
    pos.resize(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = cache.pos(0) + i;
    KVCACHE_RETURN_IF_ERROR(cache.declare_step(ids));
    const size_t len = static_cast<size_t>(n) * kKvHeads * kHeadDim;
    for (int32_t l = 0; l < kLayers; ++l) {
      AttendArgs a;
      a.layer = l;
      a.n_tokens = static_cast<int32_t>(n);
      a.q_heads = kKvHeads;
      a.positions = pos;
      a.q = std::span<const float>(kv.data(), len);
      a.k = a.q;
      a.v = a.q;
      a.scale = 0.125f;
      a.out = std::span<float>(out.data(), len);
      KVCACHE_RETURN_IF_ERROR(cache.update_and_attend(a));
    }
  }
  return ok_status();
}

// Times forwards of `tokens_per_step` tokens at context bs.range(0) (or `context` when set);
// returns the seconds spent in them.
double run_steps(benchmark::State& bs, int64_t tokens_per_step,
                 LogitsMode mode = LogitsMode::kLast, int64_t context = -1) {
  State& s = state();
  if (!s.error.empty()) {
    bs.SkipWithError(s.error.c_str());
    return 0;
  }
  const int64_t ctx = context >= 0 ? context : bs.range(0);
  Status st = fill_to(*s.cache, ctx);
  if (!st.ok()) {
    bs.SkipWithError(st.to_string().c_str());
    return 0;
  }
  std::vector<int32_t> tokens(tokens_per_step), ids(tokens_per_step, 0);
  std::vector<int64_t> pos(tokens_per_step);
  for (int64_t i = 0; i < tokens_per_step; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % kVocab);
    pos[i] = ctx + i;
  }
  Logits out;
  double seconds = 0;
  for (auto _ : bs) {
    const auto t0 = std::chrono::steady_clock::now();
    st = s.engine->forward({tokens, ids, pos}, mode, out);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      bs.SkipWithError(st.to_string().c_str());
      break;
    }
    bs.PauseTiming();
    (void)s.cache->rewind(0, ctx);
    bs.ResumeTiming();
  }
  bs.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens_per_step) * static_cast<double>(bs.iterations()),
      benchmark::Counter::kIsRate);
  bs.counters["context"] = static_cast<double>(ctx);
  bs.counters["params_m"] = static_cast<double>(s.model->n_params()) / 1e6;
  return seconds;
}

void BM_Prefill512(benchmark::State& bs) { (void)run_steps(bs, kChunk); }

// Seconds per verification forward of K + 1 rows, by K, in this process (BM_Verify/0 first).
std::map<int64_t, double>& verify_seconds() {
  static std::map<int64_t, double> m;
  return m;
}

void BM_Verify(benchmark::State& bs) {
  const int64_t k = bs.range(0);
  const double total = run_steps(bs, k + 1, LogitsMode::kAll, 1024);
  if (bs.iterations() == 0 || bs.error_occurred()) return;
  const double seconds = total / static_cast<double>(bs.iterations());
  verify_seconds()[k] = seconds;
  if (auto it = verify_seconds().find(0); it != verify_seconds().end())
    bs.counters["step_cost"] = seconds / it->second;
}
void BM_Decode(benchmark::State& bs) { (void)run_steps(bs, 1); }

// Decode and prefill alternate per context so the cache grows once: 1K, 4K, 16K.
BENCHMARK(BM_Verify)->Arg(0)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Iterations(24)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode)->Arg(1024)->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill512)->Arg(1024)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode)->Arg(4096)->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill512)->Arg(4096)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode)->Arg(16384)->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill512)->Arg(16384)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvcache::engine

KVCACHE_BENCHMARK_MAIN();
