// kvcache_quant_bench: weights read in their file format. (1) The matrix-vector kernels per
// type, ISA and thread count over 256 MB of weight bytes (far above the LLC), reporting weight
// bytes read per second and the ratio to a read-bandwidth probe run in this process with the
// same threads right before and after. (2) Decode tok/s and a 512-token prefill of a random
// ~100M-parameter llama (d 768, 12 layers, 12 q / 4 kv heads, ff 2048, vocab 32000, tied)
// stored as F16, Q8_0 and Q4_K_M (the last two made in process by kvcache quantize's code),
// with decode's effective bandwidth: (weight + K/V bytes read per token) * tok/s / probe.
// (3) One prefill product per path (int8 GEMM, f32 tiles + sgemm) against the f32
// multiply-add probe. Output: Google Benchmark (--benchmark_format=json); KVCACHE_ISA caps
// the kernels' level (bench_main.h) and the JSON context names it (isa_ceiling).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "bench_main.h"
#include "cpu/huge_pages.h"
#include "cpu/kv_pool.h"
#include "cpu/thread_pool.h"
#include "engine/model.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_matvec.h"
#include "engine/runtime.h"
#include "program/gguf.h"
#include "program/gguf_quant.h"
#include "program/gguf_quantize.h"
#include "program/model_geometry.h"
#include "bench_model.h"
#include "read_probe.h"


namespace kvcache::kernels {
namespace {

using gguf::TensorType;
using benchmark::Counter;

// ---- read probe (bench/common, the same stream as every benchmark's) --------------------

using bench::kProbeBytes;
// Bytes per second the probe streams with the global pool's thread count (best of `passes`).
double measure_probe(int passes) {
  return bench::measure_probe(static_cast<int>(cpu::global_pool().size()), passes);
}

void report(benchmark::State& bs, double bytes_per_iter, double probe_before) {
  const double probe = std::max(probe_before, measure_probe(3));
  bs.counters["bytes_per_second"] = Counter(bytes_per_iter, Counter::kIsIterationInvariantRate);
  bs.counters["probe_ratio"] = Counter(bytes_per_iter / probe, Counter::kIsIterationInvariantRate);
  bs.counters["probe_bytes_per_second"] = probe;
}

void BM_ReadProbe(benchmark::State& bs) {
  cpu::set_global_threads(static_cast<int>(bs.range(0)));
  double best = 0;
  for (auto _ : bs) {
    const double bps = measure_probe(5);
    best = std::max(best, bps);
    bs.SetIterationTime(double(kProbeBytes) / bps);
  }
  bs.counters["bytes_per_second"] = best;
}

// ---- matrix-vector kernels --------------------------------------------------------------

constexpr int64_t kCols = 4096, kWeightBytes = int64_t{256} << 20;

// 256 MB of `type` rows: 512 quantized random rows repeated (the kernels' cost does not depend
// on the values; the bytes must not fit in any cache).
const Weight& big_weight(TensorType type) {
  static std::map<TensorType, Weight> cache;
  auto it = cache.find(type);
  if (it != cache.end()) return it->second;
  const int64_t rb = *gguf::row_bytes(type, kCols), seed_rows = 512;
  std::vector<float> x(static_cast<size_t>(seed_rows * kCols));
  std::mt19937_64 g(3);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (float& v : x) v = d(g);
  std::vector<uint8_t> seed(static_cast<size_t>(seed_rows * rb));
  (void)gguf::quantize(type, x, seed);
  const int64_t rows = kWeightBytes / rb;
  std::vector<uint8_t> all(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(all.data() + r * rb, seed.data() + (r % seed_rows) * rb, static_cast<size_t>(rb));
  return cache.emplace(type, Weight::from_bytes(type, rows, kCols, std::move(all))).first->second;
}

void BM_Matvec(benchmark::State& bs) {
  const auto type = static_cast<TensorType>(bs.range(0));
  const auto isa = static_cast<cpu::Isa>(bs.range(1));
  if (!matvec_isa_supported(isa)) {
    bs.SkipWithError("ISA not supported here");
    return;
  }
  cpu::set_global_threads(static_cast<int>(bs.range(2)));
  const Weight& w = big_weight(type);
  std::vector<float> x(kCols, 0.5f), y(static_cast<size_t>(w.rows));
  const double probe = measure_probe(3);
  for (auto _ : bs) {
    matvec(w, x.data(), y.data(), false, isa);
    benchmark::DoNotOptimize(y.data());
  }
  report(bs, double(w.bytes.size()), probe);
  bs.SetLabel(gguf::to_string(type) + "/" + std::string(cpu::to_string(isa)));
}

void matvec_args(benchmark::internal::Benchmark* b) {
  for (TensorType t : {TensorType::kF16, TensorType::kBF16, TensorType::kQ8_0, TensorType::kQ4_0,
                       TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kMXFP4})
    for (cpu::Isa isa : {cpu::Isa::kAvx2, cpu::Isa::kAvx512})
      for (int threads : {1, 2})
        b->Args({static_cast<int64_t>(t), static_cast<int64_t>(isa), threads});
}

// n zero bytes whose whole 2 MiB pages are advised as huge pages before they are first touched,
// as the engine's weights are (FileBytes::read_huge).
std::vector<uint8_t> huge_page_bytes(int64_t n) {
  std::vector<uint8_t> v;
  v.reserve(static_cast<size_t>(n));
  cpu::advise_huge_pages(v.data(), n);
  v.resize(static_cast<size_t>(n));
  return v;
}

// Decode-shaped products (matvec, T = 1): copies of one rows x cols matrix of the type
// range(0) holding range(3) MiB of weight bytes on huge pages (as the engine's are), each
// multiplied in turn, 64 / range(3) passes per iteration, on range(4) threads. 64 MiB is past
// the last-level cache, as a decode step's weights are (bytes per second and the ratio to
// the read probe as BM_Matvec); 1 MiB stays in L2 and times the kernel's arithmetic alone.
// Shapes: the benchmark model's up (2048 x 768) and down (768 x 2048) projections, and for
// MXFP4 a gpt-oss-20b expert matrix (2880 x 2880).
void BM_MatvecShape(benchmark::State& bs) {
  const auto type = static_cast<TensorType>(bs.range(0));
  const int64_t rows = bs.range(1), cols = bs.range(2), mib = bs.range(3);
  cpu::set_global_threads(static_cast<int>(bs.range(4)));
  const int64_t rb = *gguf::row_bytes(type, cols), one = rows * rb;
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  std::mt19937_64 g(9);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (float& v : dense) v = d(g);
  std::vector<uint8_t> seed(static_cast<size_t>(one));
  (void)gguf::quantize(type, dense, seed);
  const int64_t n = std::max<int64_t>(1, (mib << 20) / one);
  const int64_t passes = std::max<int64_t>(1, 64 / mib);
  std::vector<uint8_t> all = huge_page_bytes(n * one);
  for (int64_t m = 0; m < n; ++m) std::memcpy(all.data() + m * one, seed.data(), seed.size());
  std::vector<Weight> ws;
  for (int64_t m = 0; m < n; ++m) {
    Weight w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.bytes = std::span<const uint8_t>(all.data() + m * one, static_cast<size_t>(one));
    ws.push_back(w);
  }
  std::vector<float> x(static_cast<size_t>(cols), 0.5f), y(static_cast<size_t>(rows));
  const double probe = measure_probe(3);
  for (auto _ : bs) {
    for (int64_t p = 0; p < passes; ++p)
      for (const Weight& w : ws) matvec(w, x.data(), y.data(), false);
    benchmark::DoNotOptimize(y.data());
  }
  report(bs, double(passes * n * one), probe);
  bs.SetLabel(gguf::to_string(type) + "/" + std::string(cpu::to_string(matvec_isa())));
}

void matvec_shape_args(benchmark::internal::Benchmark* b) {
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                       TensorType::kQ5_1, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
                       TensorType::kMXFP4})
    for (int64_t mib : {64, 1})
      for (int threads : {1, 2}) {
        b->Args({static_cast<int64_t>(t), 2048, 768, mib, threads});
        b->Args({static_cast<int64_t>(t), 768, 2048, mib, threads});
        if (t == TensorType::kMXFP4)  // a gpt-oss-20b expert: 90 blocks a row, 8 per step + 2
          b->Args({static_cast<int64_t>(t), 2880, 2880, mib, threads});
      }
}

// ---- the 100M model as F16, Q8_0 and Q4_K_M ---------------------------------------------

// ---- prefill products ---------------------------------------------------------------------

// One product of a 512-token chunk, Y[512, 2048] = X[512, 768] W^T (the benchmark model's FFN
// up projection), through matmul's dispatch. range(0): the weight type — Q8_0 and MXFP4 take
// the int8 GEMM at AVX2 and AVX-512 VNNI, Q4_K and Q6_K at AVX2 (quant_gemm.h; KVCACHE_ISA
// picks the level), F16 the tiles decoded to f32 + sgemm that every other case takes (the
// label says which); range(1): threads. Multiply-adds per second and their ratio to the
// f32 multiply-add probe of this process (the int8 GEMM may pass 1).
void BM_PrefillProduct(benchmark::State& bs) {
  constexpr int64_t kT = 512, kIn = 768, kOut = 2048;
  const auto type = static_cast<TensorType>(bs.range(0));
  const int threads = static_cast<int>(bs.range(1));
  cpu::set_global_threads(threads);
  std::mt19937_64 g(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> dense(static_cast<size_t>(kOut * kIn)), x(static_cast<size_t>(kT * kIn));
  for (float& v : dense) v = d(g);
  for (float& v : x) v = d(g);
  std::vector<uint8_t> bytes(static_cast<size_t>(kOut * *gguf::row_bytes(type, kIn)));
  (void)gguf::quantize(type, dense, bytes);
  const Weight w = Weight::from_bytes(type, kOut, kIn, std::move(bytes));
  std::vector<float> y(static_cast<size_t>(kT * kOut));
  const double fps = bench::measure_fma_probe(threads, 3);
  for (auto _ : bs) {
    matmul(x, w, y, kT);
    benchmark::DoNotOptimize(y.data());
  }
  const double macs = double(kT) * kIn * kOut;
  bs.counters["macs_per_s"] = Counter(macs, Counter::kIsIterationInvariantRate);
  bs.counters["fma_probe_ratio"] = Counter(macs / fps, Counter::kIsIterationInvariantRate);
  bs.SetLabel(gguf::to_string(type) +
              (q8_gemm_available(w) ? " int8 gemm " + std::string(cpu::to_string(matvec_isa()))
                                    : std::string(" f32 tiles + sgemm")));
}

void prefill_product_args(benchmark::internal::Benchmark* b) {
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K,
                          TensorType::kMXFP4, TensorType::kF16})
    for (int threads : {1, 2}) b->Args({static_cast<int64_t>(type), threads});
}


// A random F16 matrix (normal entries) whose bytes lie on huge pages.
Weight random_half_weight(int64_t rows, int64_t cols, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (float& v : dense) v = d(g);
  std::vector<uint8_t> bytes = huge_page_bytes(rows * *gguf::row_bytes(TensorType::kF16, cols));
  (void)gguf::quantize(TensorType::kF16, dense, bytes);
  return Weight::from_bytes(TensorType::kF16, rows, cols, std::move(bytes));
}

// Multiplies every matrix of `ws` in turn against t activation rows (matvec_batch) on
// `threads` threads; reports multiply-adds per second and their ratio to the f32 multiply-add
// probe of this process.
void time_products(benchmark::State& bs, const std::vector<Weight>& ws, int64_t t,
                   int threads, std::mt19937_64& g) {
  cpu::set_global_threads(threads);
  int64_t rows = 0, cols = 0, macs = 0;
  for (const Weight& w : ws) {
    rows = std::max(rows, w.rows), cols = std::max(cols, w.cols);
    macs += w.rows * w.cols * t;
  }
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(t * cols)), y(static_cast<size_t>(t * rows));
  for (float& v : x) v = d(g);
  const double fps = bench::measure_fma_probe(threads, 3);
  for (auto _ : bs) {
    for (const Weight& w : ws) matvec_batch(w, x.data(), y.data(), t, false);
    benchmark::DoNotOptimize(y.data());
  }
  const auto n = static_cast<double>(macs);
  bs.counters["macs_per_s"] = Counter(n, Counter::kIsIterationInvariantRate);
  bs.counters["fma_probe_ratio"] = Counter(n / fps, Counter::kIsIterationInvariantRate);
}

// A batched decode step's product (quant_matvec.h matvec_batch): F16 weights against t
// activation rows, the tiles of weight rows x activation rows the executor's steps run. 16
// matrices of the benchmark model's up projection (2048 x 768, 48 MiB: past the last-level
// cache, as a step's weights are; on huge pages, as the engine's are) are multiplied in turn.
// range(0): t, range(1): threads, range(2): the input width (768: the up projection; 2048: the
// down projection, 768 x 2048, the same bytes).
void BM_BatchedHalfProduct(benchmark::State& bs) {
  const int64_t in = bs.range(2), out = 768 * 2048 / in;
  std::mt19937_64 g(6);
  std::vector<Weight> ws;
  for (int m = 0; m < 16; ++m) ws.push_back(random_half_weight(out, in, g));
  time_products(bs, ws, bs.range(0), static_cast<int>(bs.range(1)), g);
}

// Every product of one decode step of the benchmark model (per layer q, k, v, o, gate, up,
// down, then the tied output matrix), F16 on huge pages, against t = range(0) activation
// rows on range(1) threads.
void BM_StepProducts(benchmark::State& bs) {
  using M = bench::BenchModel;
  constexpr int64_t kQ = M::kHeads * M::kHeadDim, kKv = M::kKvHeads * M::kHeadDim;
  const int64_t shapes[][2] = {{kQ, M::kD}, {kKv, M::kD}, {kKv, M::kD}, {M::kD, kQ},
                               {M::kFf, M::kD}, {M::kFf, M::kD}, {M::kD, M::kFf}};
  std::mt19937_64 g(7);
  std::vector<Weight> ws;
  for (int l = 0; l < M::kLayers; ++l)
    for (const auto& s : shapes) ws.push_back(random_half_weight(s[0], s[1], g));
  ws.push_back(random_half_weight(M::kVocab, M::kD, g));
  time_products(bs, ws, bs.range(0), static_cast<int>(bs.range(1)), g);
}

using bench::BenchModel;
constexpr int kLayers = BenchModel::kLayers, kKvHeads = BenchModel::kKvHeads;
constexpr int kHeadDim = BenchModel::kHeadDim, kVocab = BenchModel::kVocab;
constexpr int kCtx = 2048, kChunk = BenchModel::kChunk;

// The benchmark model of every engine/serve benchmark (bench/common/bench_model.h).
std::vector<uint8_t> f16_model_bytes() { return bench::bench_model_bytes(kCtx); }

struct Loaded {
  std::unique_ptr<engine::Model> model;
  std::shared_ptr<Cache> cache;
  std::unique_ptr<engine::Engine> engine;
  int64_t weight_bytes_per_token = 0;  // every matrix once, the embedding as one row
  std::string error;
};

// mix < 0: the F16 file itself. Files are parsed from memory (the reader copies the bytes).
Loaded& loaded(int mix) {
  static std::map<int, Loaded> all;
  auto it = all.find(mix);
  if (it != all.end()) return it->second;
  Loaded& l = all[mix];
  static const std::vector<uint8_t> f16 = f16_model_bytes();
  std::vector<uint8_t> bytes = f16;
  if (mix >= 0) {
    gguf::GgufFile src = gguf::GgufFile::parse(f16).value();
    gguf::GgufWriter w;
    auto r = gguf::quantize_model(src, static_cast<gguf::QuantMix>(mix), w);
    if (!r.ok()) {
      l.error = r.status().to_string();
      return l;
    }
    bytes = w.bytes();
  }
  Result<engine::LoadedModel> m = engine::load_model(engine::ModelSource::memory(bytes));
  if (!m.ok()) {
    l.error = m.status().to_string();
    return l;
  }
  l.model = std::move(m->model);
  for (const engine::LayerWeights& lw : l.model->layers())
    for (const Weight* x : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
      l.weight_bytes_per_token += static_cast<int64_t>(x->bytes.size());
  l.weight_bytes_per_token += static_cast<int64_t>(l.model->output().bytes.size());
  engine::CacheOptions o;
  o.capacity = kCtx;
  o.kv_dtype = DType::kF16;
  engine::CachedEngine c = engine::build_engine(*l.model, o).value();
  l.cache = c.cache;
  l.engine = std::move(c.engine);
  return l;
}

// range(0): mix (-1 = F16), range(1): tokens per step (1 = decode, 512 = prefill),
// range(2): threads. The context holds 16 prompt tokens; each timed step is rewound.
void BM_Model(benchmark::State& bs) {
  const int mix = static_cast<int>(bs.range(0));
  const int64_t t = bs.range(1);
  cpu::set_global_threads(static_cast<int>(bs.range(2)));
  Loaded& l = loaded(mix);
  if (!l.error.empty()) {
    bs.SkipWithError(l.error.c_str());
    return;
  }
  constexpr int64_t kDepth = 16;
  engine::Logits out;
  std::vector<int32_t> tokens(kDepth + t), ids(kDepth + t, 0);
  std::vector<int64_t> pos(kDepth + t);
  for (int64_t i = 0; i < kDepth + t; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % kVocab);
    pos[i] = i;
  }
  (void)l.cache->rewind(0, 0);
  auto span_of = [&](auto& v, int64_t b, int64_t n) { return std::span(v).subspan(b, n); };
  if (!l.engine->forward({span_of(tokens, 0, kDepth), span_of(ids, 0, kDepth),
                          span_of(pos, 0, kDepth)}, engine::LogitsMode::kLast, out).ok()) {
    bs.SkipWithError("prompt forward failed");
    return;
  }
  const double probe = measure_probe(3);
  for (auto _ : bs) {
    Status st = l.engine->forward({span_of(tokens, kDepth, t), span_of(ids, kDepth, t),
                                   span_of(pos, kDepth, t)}, engine::LogitsMode::kLast, out);
    if (!st.ok()) {
      bs.SkipWithError(st.to_string().c_str());
      break;
    }
    bs.PauseTiming();
    (void)l.cache->rewind(0, kDepth);
    bs.ResumeTiming();
  }
  bs.counters["tokens_per_s"] =
      Counter(double(t) * double(bs.iterations()), Counter::kIsRate);
  if (t == 1) {  // K and V of every layer at the depth, f16
    const double kv = double(kLayers) * kDepth * kKvHeads * kHeadDim * 2 * 2;
    report(bs, double(l.weight_bytes_per_token) + kv, probe);
    bs.counters["weight_mb"] = double(l.weight_bytes_per_token) / 1e6;
  }
  bs.SetLabel(mix < 0 ? "f16" : std::string(gguf::to_string(static_cast<gguf::QuantMix>(mix))));
}

void model_args(benchmark::internal::Benchmark* b) {
  for (int mix : {-1, static_cast<int>(gguf::QuantMix::kQ8_0),
                  static_cast<int>(gguf::QuantMix::kQ4_K_M)})
    for (int threads : {1, 2}) {
      b->Args({mix, 1, threads});
      b->Args({mix, kChunk, threads});
    }
}

BENCHMARK(BM_ReadProbe)->Arg(1)->Arg(2)->UseManualTime()->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matvec)->Apply(matvec_args)->Iterations(8)->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_MatvecShape)->Apply(matvec_shape_args)->Iterations(10)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefillProduct)->Apply(prefill_product_args)->Iterations(10)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_BatchedHalfProduct)->ArgsProduct({{8, 16}, {1, 2}, {768, 2048}})->Iterations(20)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StepProducts)->ArgsProduct({{1, 8, 16}, {2}})->Iterations(20)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Model)->Apply(model_args)->Iterations(8)->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvcache::kernels

KVCACHE_BENCHMARK_MAIN();
