// kvcache_executor_bench: the batching executor on the ~100M-parameter benchmark model (f16
// weights, f16 K/V, the process's threads), each figure against two bounds measured in this
// process: the bandwidth bound, (weight bytes + K/V bytes read per step) ÷ the read probe, and
// the arithmetic bound, (multiply-adds per step) ÷ the multiply-add probe. A batched step
// multiplies every weight by every session's row: from a few sessions on, the arithmetic bound
// is the lower one on a CPU whose cores stream faster than they multiply (roofline_ratio is
// against the lower of the two).
//   BM_BatchedDecode/ctx/sessions: aggregate decode tokens/s of S sessions at a context of
//     ctx tokens each (distinct prompts, prefilled once as needed and retained; the timed
//     requests clone them and decode kDecode tokens). 16 sessions at 4K are left out: their
//     prefill (64K tokens) takes longer than the rest of the run.
//   BM_PrefixTtft/index/concurrent: mean time to first token of requests 2..8 that share a
//     1K-token prefix (16 own tokens each), with or without the prefix index, submitted one
//     after another or all at once.
//   BM_SharedPrefixDecode/shared/prefix: 8 forks (n = 8, temperature 1) of one prompt of
//     `prefix` tokens decoding together, with the shared prefix read once per step (1) or once
//     per fork (0); the saving grows with the prefix, the ratio of the two is the speed-up.
// Output: Google Benchmark (--benchmark_format=json); counters tokens_per_s, bound_tokens_per_s,
// tokens_per_cpu_s (tokens per CPU-second of the process per thread: the rate when the threads
// have the cores, for a loaded machine), bound_ratio, fma_bound_tokens_per_s, roofline_ratio
// (wall-clock rate ÷ the lower bound), ttft_ms, probe_bytes_per_second, fma_per_second.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "bench_main.h"
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

// CPU seconds this process has used (every thread, user + system).
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Times `run` by the wall clock and by this process's CPU time divided by the threads: on a
// machine shared with other jobs the second says how fast the step is when its threads have
// the cores (a worker spinning for work counts as busy, so it never flatters).
struct StepClock {
  double wall = 0, cpu = 0;
  template <class F>
  void time(F&& run) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    cpu += (process_cpu_seconds() - c0) / static_cast<double>(cpu::global_pool().size());
  }
};

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

// Multiply-adds of one decode token at a context of ctx: every matrix once (the tied output
// included), then ctx keys for each query head of every layer (logits and values).
double token_macs(double ctx) {
  return static_cast<double>(loaded().model->n_params()) +
         ctx * BenchModel::kLayers * BenchModel::kHeads * 2.0 * BenchModel::kHeadDim;
}

// The counters every decode benchmark reports: `bytes` and `macs` are one step's, `tokens` the
// tokens a step yields, `generated` the tokens the clock timed.
void report_decode(benchmark::State& bs, const StepClock& clock, double generated, double tokens,
                   double bytes, double macs, double bps, double fps) {
  const double bound = tokens * bps / bytes, fma_bound = tokens * fps / macs;
  const double tps = generated / clock.wall;
  bs.counters["tokens_per_s"] = tps;
  bs.counters["tokens_per_cpu_s"] = generated / clock.cpu;
  bs.counters["bound_tokens_per_s"] = bound;
  bs.counters["bound_ratio"] = tps / bound;
  bs.counters["fma_bound_tokens_per_s"] = fma_bound;
  bs.counters["roofline_ratio"] = tps / std::min(bound, fma_bound);
  bs.counters["probe_bytes_per_second"] = bps;
  bs.counters["fma_per_second"] = fps;
  bs.counters["threads"] = static_cast<double>(cpu::global_pool().size());
}

// One executor per context, holding as many prefilled prompts of that length (retained) as
// the largest session count asked for so far.
Executor* decode_executor(int64_t ctx, int32_t sessions, std::string& error) {
  struct Prefilled {
    std::unique_ptr<Executor> ex;
    int32_t prompts = 0;
  };
  static std::map<int64_t, Prefilled> by_ctx;
  Prefilled& pre = by_ctx[ctx];
  if (!pre.ex) {
    auto ex = make(ctx + kDecode + 16, kMaxSessions, true);
    if (!ex.ok()) {
      error = ex.status().to_string();
      by_ctx.erase(ctx);
      return nullptr;
    }
    pre.ex = std::move(*ex);
  }
  if (pre.prompts < sessions) {
    GenerateParams p;
    p.max_new_tokens = 0;
    for (int32_t s = pre.prompts; s < sessions; ++s)
      if (!pre.ex->submit(random_prompt(ctx, 100 + s), p).ok()) error = "submit failed";
    Status st = pre.ex->run();
    if (!st.ok()) error = st.to_string();
    (void)pre.ex->take_finished();
    pre.prompts = sessions;
  }
  return pre.ex.get();
}

void BM_BatchedDecode(benchmark::State& bs) {
  const int64_t ctx = bs.range(0);
  const auto sessions = static_cast<int32_t>(bs.range(1));
  if (!loaded().error.empty()) return bs.SkipWithError(loaded().error.c_str());
  std::string error;
  Executor* ex = decode_executor(ctx, sessions, error);
  if (ex == nullptr || !error.empty()) return bs.SkipWithError(error.c_str());
  const int threads = static_cast<int>(cpu::global_pool().size());
  const bench::ProbeAround probe(threads);
  const double fps = bench::measure_fma_probe(threads, 3);
  GenerateParams p;
  p.max_new_tokens = kDecode;
  StepClock clock;
  int64_t tokens = 0;
  for (auto _ : bs) {
    for (int32_t s = 0; s < sessions; ++s) (void)ex->submit(random_prompt(ctx, 100 + s), p);
    Status st;
    clock.time([&] { st = ex->run(); });
    if (!st.ok()) return bs.SkipWithError(st.to_string().c_str());
    for (const RequestResult& r : ex->take_finished()) {
      tokens += static_cast<int64_t>(r.completions[0].tokens.size());
      (void)ex->close(r.id);  // keep only the prefilled prompts retained
    }
  }
  // Each step reads every weight once and each session's whole context (ctx .. ctx + kDecode).
  const double mean_ctx = static_cast<double>(ctx) + kDecode / 2.0;
  report_decode(bs, clock, static_cast<double>(tokens), sessions,
                loaded().weight_bytes + sessions * mean_ctx * kKvBytesPerToken,
                sessions * token_macs(mean_ctx), probe.best(), fps);
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
  const int64_t prefix = bs.range(1);
  cpu::set_shared_prefix_attention(shared_reads);
  const int threads = static_cast<int>(cpu::global_pool().size());
  const bench::ProbeAround probe(threads);
  const double fps = bench::measure_fma_probe(threads, 3);
  auto ex = make(prefix + kDecode + 16, 8, true);
  if (!ex.ok()) return bs.SkipWithError(ex.status().to_string().c_str());
  GenerateParams p;
  p.max_new_tokens = kDecode;
  p.n = 8;
  p.sampling.temperature = 1.0f;
  StepClock clock;
  int64_t tokens = 0;
  for (auto _ : bs) {
    // Prefill once (not timed): a first request with max_new_tokens 0 leaves the prompt
    // retained; the timed request clones it and forks 8 ways.
    GenerateParams warm;
    warm.max_new_tokens = 0;
    (void)(*ex)->submit(random_prompt(prefix, 9), warm);
    (void)(*ex)->run();
    (void)(*ex)->take_finished();
    Status st;
    clock.time([&] {
      (void)(*ex)->submit(random_prompt(prefix, 9), p);
      st = (*ex)->run();
    });
    if (!st.ok()) return bs.SkipWithError(st.to_string().c_str());
    for (const RequestResult& r : (*ex)->take_finished())
      for (const Completion& c : r.completions) tokens += static_cast<int64_t>(c.tokens.size());
  }
  // Read once, the shared prefix costs `prefix` positions per step (read per fork, 8 times
  // that); the multiply-adds are the same either way.
  const double own = kDecode / 2.0;
  report_decode(bs, clock, static_cast<double>(tokens), 8,
                loaded().weight_bytes + (static_cast<double>(prefix) + 8 * own) * kKvBytesPerToken,
                8 * token_macs(static_cast<double>(prefix) + own), probe.best(), fps);
  cpu::set_shared_prefix_attention(true);
}

BENCHMARK(BM_BatchedDecode)
    ->ArgsProduct({{1024}, {1, 2, 4, 8, 16}})
    ->ArgsProduct({{4096}, {1, 2, 4, 8, 16}})
    ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefixTtft)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SharedPrefixDecode)
    ->ArgsProduct({{0, 1}, {1024, 2048, 4096}})
    ->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvcache::serve

KVCACHE_BENCHMARK_MAIN();
