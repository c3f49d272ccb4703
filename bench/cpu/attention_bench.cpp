// Attention benchmarks for the cpu byte layer (SPEC §10): decode (T=1, 32 q heads over 8 kv
// heads, dim 128) at 1K..64K keys for f16/bf16/f32 and 1/2 threads, reporting K/V bytes read
// per second and the ratio to a read-bandwidth probe run in this process with the same thread
// count right before and right after each benchmark; a 512-token chunked prefill over 4K of
// history; and 8 sequences decoding one token each over one interleaved cell pool (bytes
// counted only for each one's own cells). BM_DecodeAttentionIsa: f16 against q8_0 / q4_0 K/V
// at 4K..64K keys with the AVX2 and the AVX-512 workers pinned (quantized: integer dot
// products, VNNI at AVX-512), for the ratio of calls per second at equal context.
// Run with --benchmark_format=json for machine-readable output.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "bench_main.h"
#include "cpu/attention.h"
#include "cpu/kv_pool.h"
#include "cpu/thread_pool.h"
#include "read_probe.h"

namespace kvcache::cpu {
namespace {

constexpr int32_t kQHeads = 32, kKvHeads = 8, kDim = 128;
using bench::kProbeBytes;
using bench::measure_probe;
using bench::ProbeAround;

ThreadPool& pool(int threads) {
  static ThreadPool one(1), two(2);
  return threads == 1 ? one : two;
}

void BM_ReadProbe(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double best = 0;
  for (auto _ : state) {
    const double bps = measure_probe(threads, 5);
    best = std::max(best, bps);
    state.SetIterationTime(double(kProbeBytes) / bps);
  }
  state.counters["bytes_per_second"] = best;
  state.SetBytesProcessed(state.iterations() * kProbeBytes);
}

// A pool of `rows` cells, every row written with cheap pseudo-random values.
LayerPool make_pool(DType dtype, int64_t rows) {
  LayerPool p(LayerGeometry{kKvHeads, kDim, kDim, 0}, dtype, rows);
  if (!p.reserve(rows).ok()) return p;
  std::vector<float> k(kKvHeads * kDim), v(kKvHeads * kDim);
  uint32_t x = 12345;
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < k.size(); ++i) {
      x = x * 1664525u + 1013904223u;
      k[i] = float(int(x >> 9) - (1 << 22)) / float(1 << 22);
      v[i] = -k[i] * 0.5f;
    }
    p.write(r, k.data(), v.data());
  }
  return p;
}

KeySet run(int64_t begin, int64_t size) {
  KeySet ks;
  ks.n_runs = 1;
  ks.run_begin[0] = begin;
  ks.run_size[0] = size;
  return ks;
}

void report(benchmark::State& state, double bytes_per_iter, double probe_bps) {
  using benchmark::Counter;
  state.counters["kv_bytes_per_second"] = Counter(bytes_per_iter, Counter::kIsIterationInvariantRate);
  state.counters["probe_ratio"] =
      Counter(bytes_per_iter / probe_bps, Counter::kIsIterationInvariantRate);
  state.counters["probe_bytes_per_second"] = probe_bps;
}

DType dtype_of(int64_t i) {
  constexpr DType kTypes[] = {DType::kF16, DType::kBF16, DType::kF32, DType::kQ8_0, DType::kQ4_0};
  return kTypes[i];
}

// K and V bytes of `ctx` keys (every kv head) in `dt`.
double kv_bytes(DType dt, int64_t ctx) {
  return double(ctx * kKvHeads * 2 * row_bytes(dt, kDim).value_or(0));
}

void BM_DecodeAttention(benchmark::State& state) {
  const DType dt = dtype_of(state.range(0));
  const int64_t ctx = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  LayerPool kv = make_pool(dt, ctx);
  std::vector<KeySet> keys = {run(0, ctx)};
  std::vector<float> q(kQHeads * kDim, 0.01f), out(kQHeads * kDim);
  AttentionProblem p{1, kQHeads, q.data(), out.data(), 0.088f, 0.0f, kv.view(), keys};
  const ProbeAround probe(threads);
  for (auto _ : state) {
    attend(p, pool(threads));
    benchmark::DoNotOptimize(out.data());
  }
  report(state, kv_bytes(dt, ctx), probe.best());
  state.SetLabel(std::string(to_string(dt)) + " " + std::string(to_string(best_isa())));
}

void BM_DecodeAttentionIsa(benchmark::State& state) {
  const DType dt = dtype_of(state.range(0));
  const int64_t ctx = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const Isa isa = state.range(3) == 2 ? Isa::kAvx512 : Isa::kAvx2;
  const KernelFamily family = is_block_type(dt) ? KernelFamily::kInt8Dot : KernelFamily::kFloat;
  if (!isa_supported(isa, family)) return state.SkipWithError("ISA not supported here");
  LayerPool kv = make_pool(dt, ctx);
  std::vector<KeySet> keys = {run(0, ctx)};
  std::vector<float> q(kQHeads * kDim, 0.01f), out(kQHeads * kDim);
  AttentionProblem p{1, kQHeads, q.data(), out.data(), 0.088f, 0.0f, kv.view(), keys};
  const ProbeAround probe(threads);
  for (auto _ : state) {
    attend(p, pool(threads), isa);
    benchmark::DoNotOptimize(out.data());
  }
  report(state, kv_bytes(dt, ctx), probe.best());
  state.counters["calls_per_second"] =
      benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(to_string(dt)) + " " + std::string(to_string(isa)));
}

void BM_ChunkedPrefill(benchmark::State& state) {
  // 512 new tokens over 4096 of history: token t sees 4096 + t + 1 keys (causal band).
  const DType dt = dtype_of(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  constexpr int64_t kHistory = 4096, kChunk = 512;
  LayerPool kv = make_pool(dt, kHistory + kChunk);
  std::vector<KeySet> keys;
  double key_rows = 0;
  for (int64_t t = 0; t < kChunk; ++t) {
    keys.push_back(run(0, kHistory + t + 1));
    key_rows += double(kHistory + t + 1);
  }
  std::vector<float> q(kChunk * kQHeads * kDim, 0.01f), out(q.size());
  AttentionProblem p{int32_t{kChunk}, kQHeads, q.data(), out.data(), 0.088f, 0.0f, kv.view(), keys};
  for (auto _ : state) {
    attend(p, pool(threads));
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens_per_second"] =
      benchmark::Counter(double(kChunk), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["kv_rows_per_second"] =
      benchmark::Counter(key_rows * kKvHeads, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(to_string(dt)));
}

void BM_MultiSequenceDecode(benchmark::State& state) {
  // 8 sequences share one cell pool, their cells interleaved in runs of `run` cells (run 1:
  // cell c belongs to sequence c % 8, as after concurrent decoding; run 512: chunked prompts). One step decodes one token per sequence; each sees
  // only its own `ctx` cells, so bytes are counted for 8 * ctx rows — foreign cells are never
  // visited and must not lower the rate compared with BM_DecodeAttention.
  const DType dt = dtype_of(state.range(0));
  const int64_t ctx = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  constexpr int32_t kSeqs = 8;
  LayerPool kv = make_pool(dt, ctx * kSeqs);
  std::vector<std::vector<int32_t>> cells(kSeqs);
  const int64_t run_len = state.range(3);
  for (int64_t c = 0; c < ctx * kSeqs; ++c)
    cells[(c / run_len) % kSeqs].push_back(static_cast<int32_t>(c));
  std::vector<KeySet> keys(kSeqs);
  for (int32_t s = 0; s < kSeqs; ++s) keys[s].cells = cells[s];
  std::vector<float> q(kSeqs * kQHeads * kDim, 0.01f), out(q.size());
  AttentionProblem p{kSeqs, kQHeads, q.data(), out.data(), 0.088f, 0.0f, kv.view(), keys};
  const ProbeAround probe(threads);
  for (auto _ : state) {
    attend(p, pool(threads));
    benchmark::DoNotOptimize(out.data());
  }
  report(state, double(kSeqs * ctx * kKvHeads * 2 * kDim * dtype_size(dt)), probe.best());
  state.SetLabel(std::string(to_string(dt)) + " 8 seqs");
}

BENCHMARK(BM_ReadProbe)->Arg(1)->Arg(2)->UseManualTime()->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"dtype", "ctx", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1024, 4096, 16384, 65536}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeAttentionIsa)
    ->ArgNames({"dtype", "keys", "threads", "isa"})
    ->ArgsProduct({{0, 3, 4}, {4096, 16384, 65536}, {1, 2}, {1, 2}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_ChunkedPrefill)
    ->ArgNames({"dtype", "threads"})
    ->ArgsProduct({{0}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MultiSequenceDecode)
    ->ArgNames({"dtype", "ctx", "threads", "run"})
    ->ArgsProduct({{0}, {4096}, {1, 2}, {1, 512}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvcache::cpu

KVCACHE_BENCHMARK_MAIN();
