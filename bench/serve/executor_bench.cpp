// kvcache_executor_bench: the batching executor on the ~100M-parameter benchmark model (f16
// weights, f16 K/V, the process's threads), each figure against the bandwidth bound measured
// in this process: (weight bytes + K/V bytes read per step) ÷ the read probe.
//   BM_BatchedDecode/ctx/sessions: aggregate decode tokens/s of S sessions at a context of
//     ctx tokens each (distinct prompts, prefilled once and retained; the timed requests clone
//     them and decode kDecode tokens).
//   BM_PrefixTtft/index/concurrent: mean time to first token of requests 2..8 that share a
//     1K-token prefix (16 own tokens each), with or without the prefix index, submitted one
//     after another or all at once.
//   BM_SharedPrefixDecode/shared: 8 forks (n = 8) of one 1K prompt decoding together, with
//     the shared prefix read once per step (1) or once per fork (0).
// Output: Google Benchmark (--benchmark_format=json); counters tokens_per_s, bound_tokens_per_s,
// bound_ratio, ttft_ms, probe_bytes_per_second.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_model.h"
#include "cpu/attention.h"
#include "cpu/thread_pool.h"
#include "engine/model.h"
#include "program/gguf.h"
#include "read_probe.h"
#include "serve/executor.h"

namespace kvcache::serve {
namespace {

using bench::BenchModel;
constexpr int32_t kDecode = 32;
constexpr int32_t kMaxSessions = 16;
constexpr int64_t kMaxContext = 4096 + 256;
// K/V bytes one position holds across the model's layers at f16.
constexpr double kKvBytesPerToken = 2.0 * 2 * BenchModel::kLayers * BenchModel::kKvHeads *
                                    BenchModel::kHeadDim;

struct Loaded {
  const engine::Model* model = nullptr;
  double weight_bytes = 0;  // matrix bytes read per step (f16; the tied output once)
  std::string error;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded s;
    const bench::LoadedBenchModel& b = bench::load_bench_model(kMaxContext);
    s.error = b.error;
    s.model = b.model.get();
    if (s.model != nullptr) s.weight_bytes = 2.0 * static_cast<double>(s.model->n_params());
    return s;
  }();
  return l;
}

std::vector<int32_t> random_prompt(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % BenchModel::kVocab);
  return t;
}

Result<std::unique_ptr<Executor>> make(int64_t session_tokens, int32_t sessions, bool index) {
  ExecutorOptions o;
  o.max_sessions = sessions;
  o.max_session_tokens = session_tokens;
  o.kv_dtype = DType::kF16;
  o.prefix_cache = index;
  return Executor::create(*loaded().model, nullptr, o);
}

// One executor per context, holding kMaxSessions prefilled prompts of that length (retained).
Executor* decode_executor(int64_t ctx, std::string& error) {
  static std::map<int64_t, std::unique_ptr<Executor>> by_ctx;
  auto it = by_ctx.find(ctx);
  if (it != by_ctx.end()) return it->second.get();
  auto ex = make(ctx + kDecode + 16, kMaxSessions, true);
  if (!ex.ok()) {
    error = ex.status().to_string();
    return nullptr;
  }
  GenerateParams p;
  p.max_new_tokens = 0;
  for (int32_t s = 0; s < kMaxSessions; ++s)
    if (!(*ex)->submit(random_prompt(ctx, 100 + s), p).ok()) error = "submit failed";
  Status st = (*ex)->run();
  if (!st.ok()) error = st.to_string();
  (void)(*ex)->take_finished();
  return (by_ctx[ctx] = std::move(*ex)).get();
}

void BM_BatchedDecode(benchmark::State& bs) {
  const int64_t ctx = bs.range(0);
  const auto sessions = static_cast<int32_t>(bs.range(1));
  if (!loaded().error.empty()) return bs.SkipWithError(loaded().error.c_str());
  std::string error;
  Executor* ex = decode_executor(ctx, error);
  if (ex == nullptr || !error.empty()) return bs.SkipWithError(error.c_str());
  const bench::ProbeAround probe(static_cast<int>(cpu::global_pool().size()));
  GenerateParams p;
  p.max_new_tokens = kDecode;
  double seconds = 0;
  int64_t tokens = 0;
  for (auto _ : bs) {
    for (int32_t s = 0; s < sessions; ++s) (void)ex->submit(random_prompt(ctx, 100 + s), p);
    const auto t0 = std::chrono::steady_clock::now();
    Status st = ex->run();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) return bs.SkipWithError(st.to_string().c_str());
    for (const RequestResult& r : ex->take_finished()) {
      tokens += static_cast<int64_t>(r.completions[0].tokens.size());
      (void)ex->close(r.id);  // keep only the prefilled prompts retained
    }
  }
  const double bps = probe.best();
  // Each step reads every weight once and each session's whole context (ctx .. ctx + kDecode).
  const double kv = sessions * (static_cast<double>(ctx) + kDecode / 2.0) * kKvBytesPerToken;
  const double bound = sessions * bps / (loaded().weight_bytes + kv);
  const double tps = static_cast<double>(tokens) / seconds;
  bs.counters["tokens_per_s"] = tps;
  bs.counters["bound_tokens_per_s"] = bound;
  bs.counters["bound_ratio"] = tps / bound;
  bs.counters["probe_bytes_per_second"] = bps;
  bs.counters["threads"] = static_cast<double>(cpu::global_pool().size());
}

// Time from submit to the first token of each of 8 requests sharing a 1K prefix.
void BM_PrefixTtft(benchmark::State& bs) {
  const bool index = bs.range(0) != 0, concurrent = bs.range(1) != 0;
  if (!loaded().error.empty()) return bs.SkipWithError(loaded().error.c_str());
  const std::vector<int32_t> prefix = random_prompt(1024, 7);
  double later_ms = 0, first_ms = 0;
  for (auto _ : bs) {
    auto ex = make(1024 + 64, 8, index);
    if (!ex.ok()) return bs.SkipWithError(ex.status().to_string().c_str());
    std::vector<std::chrono::steady_clock::time_point> submitted(8), first(8);
    std::vector<bool> seen(8, false);
    std::map<int64_t, int> which;
    (*ex)->set_on_token([&](const TokenEvent& e) {
      const int i = which.at(e.request);
      if (!seen[i]) first[i] = std::chrono::steady_clock::now();
      seen[i] = true;
    });
    GenerateParams p;
    p.max_new_tokens = 1;
    auto submit = [&](int i) {
      std::vector<int32_t> prompt = prefix;
      const std::vector<int32_t> own = random_prompt(16, 1000 + i);
      prompt.insert(prompt.end(), own.begin(), own.end());
      submitted[i] = std::chrono::steady_clock::now();
      which[*(*ex)->submit(prompt, p)] = i;
    };
    if (concurrent) {
      for (int i = 0; i < 8; ++i) submit(i);
      (void)(*ex)->run();
    } else {
      for (int i = 0; i < 8; ++i) {
        submit(i);
        (void)(*ex)->run();
      }
    }
    auto ms = [&](int i) {
      return std::chrono::duration<double, std::milli>(first[i] - submitted[i]).count();
    };
    first_ms += ms(0);
    for (int i = 1; i < 8; ++i) later_ms += ms(i) / 7.0;
  }
  const auto n = static_cast<double>(bs.iterations());
  bs.counters["ttft_first_ms"] = first_ms / n;
  bs.counters["ttft_ms"] = later_ms / n;  // mean over requests 2..8
}

void BM_SharedPrefixDecode(benchmark::State& bs) {
  if (!loaded().error.empty()) return bs.SkipWithError(loaded().error.c_str());
  const bool shared_reads = bs.range(0) != 0;
  cpu::set_shared_prefix_attention(shared_reads);
  const bench::ProbeAround probe(static_cast<int>(cpu::global_pool().size()));
  auto ex = make(1024 + kDecode + 16, 8, true);
  if (!ex.ok()) return bs.SkipWithError(ex.status().to_string().c_str());
  GenerateParams p;
  p.max_new_tokens = kDecode;
  p.n = 8;
  p.sampling.temperature = 1.0f;
  double seconds = 0;
  int64_t tokens = 0;
  for (auto _ : bs) {
    // Prefill once (not timed): a first request with max_new_tokens 0 leaves the prompt
    // retained; the timed request clones it and forks 8 ways.
    GenerateParams warm;
    warm.max_new_tokens = 0;
    (void)(*ex)->submit(random_prompt(1024, 9), warm);
    (void)(*ex)->run();
    (void)(*ex)->take_finished();
    const auto t0 = std::chrono::steady_clock::now();
    (void)(*ex)->submit(random_prompt(1024, 9), p);
    Status st = (*ex)->run();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) return bs.SkipWithError(st.to_string().c_str());
    for (const RequestResult& r : (*ex)->take_finished())
      for (const Completion& c : r.completions) tokens += static_cast<int64_t>(c.tokens.size());
  }
  const double bps = probe.best();
  // Read once, the shared 1K prefix would cost 1K positions per step; read per session, 8K.
  const double kv_once = (1024.0 + 8 * kDecode / 2.0) * kKvBytesPerToken;
  const double bound = 8 * bps / (loaded().weight_bytes + kv_once);
  const double tps = static_cast<double>(tokens) / seconds;
  bs.counters["tokens_per_s"] = tps;
  bs.counters["bound_tokens_per_s"] = bound;
  bs.counters["bound_ratio"] = tps / bound;
  bs.counters["probe_bytes_per_second"] = bps;
  cpu::set_shared_prefix_attention(true);
}

BENCHMARK(BM_BatchedDecode)
    ->ArgsProduct({{1024, 4096}, {1, 2, 4, 8, 16}})
    ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefixTtft)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SharedPrefixDecode)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvcache::serve

BENCHMARK_MAIN();
