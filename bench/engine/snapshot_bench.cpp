// kvcache_snapshot_bench: session snapshot throughput (engine/snapshot.h) for a 2K-token
// conversation on the ~100M benchmark model (12 full layers, 4 kv heads of 64): capture +
// encode in memory, capture + save to a file, load + restore from a file, decode + restore
// from memory, in f16 and f32 K/V and both cpu layouts. The cache is filled with random
// rows through write_rows (snapshot cost does not depend on the values). Each result reports
// bytes_per_second of snapshot bytes and probe_ratio against the one-thread read probe
// (bench/common/read_probe.h) measured around it in the same process.
// Output: Google Benchmark (--benchmark_format=json).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/cache_setup.h"
#include "engine/snapshot.h"
#include "bench_model.h"
#include "bench_main.h"
#include "read_probe.h"

namespace kvcache::engine {
namespace {

constexpr int64_t kTokens = 2048;

struct Fixture {
  std::shared_ptr<Cache> cache;
  int32_t seq = 0;
  std::vector<int32_t> tokens;
  uint64_t fingerprint = 0;
  int32_t vocab = 0;
  std::string error;
};

// A cache of `kind` / `dt` holding kTokens positions of random rows.
Fixture make_fixture(const char* kind, DType dt) {
  Fixture f;
  const bench::LoadedBenchModel& m = bench::load_bench_model(4096);
  if (!m.error.empty()) {
    f.error = m.error;
    return f;
  }
  CacheOptions o;
  o.kind = kind;
  o.kv_dtype = dt;
  o.capacity = kTokens + 64;
  Result<CacheSetup> setup = plan_cache(*m.model, o);
  Result<std::shared_ptr<Cache>> c =
      setup.ok() ? build_cache(*setup) : Result<std::shared_ptr<Cache>>(setup.status());
  if (!c.ok()) {
    f.error = c.status().to_string();
    return f;
  }
  f.cache = *c;
  f.seq = *f.cache->open_seq();
  std::mt19937 rng(3);
  std::vector<LayerRows> rows;
  for (size_t l = 0; l < f.cache->geometry().layers.size(); ++l) {
    const LayerGeometry& g = f.cache->geometry().layers[l];
    LayerRows r{static_cast<int32_t>(l), 0, kTokens, {}, {}};
    r.k.resize(static_cast<size_t>(kTokens * g.kv_heads * g.head_dim * dtype_size(dt)));
    r.v.resize(static_cast<size_t>(kTokens * g.kv_heads * g.value_dim * dtype_size(dt)));
    for (uint8_t& b : r.k) b = static_cast<uint8_t>(rng());
    for (uint8_t& b : r.v) b = static_cast<uint8_t>(rng());
    rows.push_back(std::move(r));
  }
  Status st = f.cache->write_rows(f.seq, 0, kTokens, rows);
  if (!st.ok()) f.error = st.to_string();
  for (int64_t i = 0; i <= kTokens; ++i) f.tokens.push_back(static_cast<int32_t>(i * 7919 % 32000));
  f.fingerprint = m.model->fingerprint();
  f.vocab = m.model->hparams().vocab;
  return f;
}

std::string temp_path() {
  return "/tmp/kvcache_snapshot_bench_" + std::to_string(getpid()) + ".kvs";
}

enum class Op { kEncode, kSave, kLoad, kDecode };

void BM_Snapshot(benchmark::State& bs, const char* kind, DType dt, Op op) {
  Fixture f = make_fixture(kind, dt);
  if (!f.error.empty()) {
    bs.SkipWithError(f.error.c_str());
    return;
  }
  const std::string path = temp_path();
  Result<Snapshot> snap = capture_snapshot(*f.cache, f.seq, f.fingerprint, f.tokens);
  const std::vector<uint8_t> bytes = encode_snapshot(*snap);
  if (op == Op::kLoad && !save_snapshot(path, *snap).ok()) {
    bs.SkipWithError("writing the snapshot file failed");
    return;
  }
  bench::ProbeAround probe(1);
  Status st;
  for (auto _ : bs) {
    if (op == Op::kEncode || op == Op::kSave) {
      Result<Snapshot> s = capture_snapshot(*f.cache, f.seq, f.fingerprint, f.tokens);
      if (op == Op::kEncode) benchmark::DoNotOptimize(encode_snapshot(*s).data());
      else st = save_snapshot(path, *s);
    } else {
      bs.PauseTiming();
      (void)f.cache->rewind(f.seq, 0);
      bs.ResumeTiming();
      Result<Snapshot> s = op == Op::kLoad ? load_snapshot(path) : decode_snapshot(bytes);
      st = s.ok() ? restore_snapshot(*f.cache, f.seq, *s, f.fingerprint, f.vocab) : s.status();
    }
    if (!st.ok()) {
      bs.SkipWithError(st.to_string().c_str());
      break;
    }
  }
  std::remove(path.c_str());
  const double per_iter = static_cast<double>(bytes.size());
  const double p = probe.best();
  bs.counters["bytes_per_second"] =
      benchmark::Counter(per_iter, benchmark::Counter::kIsIterationInvariantRate);
  bs.counters["probe_ratio"] =
      benchmark::Counter(per_iter / p, benchmark::Counter::kIsIterationInvariantRate);
  bs.counters["probe_bytes_per_second"] = p;
  bs.counters["snapshot_bytes"] = per_iter;
  bs.counters["bytes_per_token"] = per_iter / static_cast<double>(kTokens);
}

void register_all() {
  struct Case { const char* name; Op op; };
  const Case ops[] = {{"encode", Op::kEncode}, {"save_file", Op::kSave},
                      {"load_file", Op::kLoad}, {"decode", Op::kDecode}};
  struct Cfg { const char* kind; DType dt; };
  const Cfg cfgs[] = {{"sequence", DType::kF16}, {"sequence", DType::kF32}, {"cell", DType::kF16}};
  for (const Cfg& c : cfgs)
    for (const Case& o : ops) {
      const std::string name = std::string("Snapshot2K/") + c.kind + "/" +
                               std::string(to_string(c.dt)) + "/" + o.name;
      const Cfg cfg = c;
      const Op op = o.op;
      benchmark::RegisterBenchmark(name.c_str(), [cfg, op](benchmark::State& s) {
        BM_Snapshot(s, cfg.kind, cfg.dt, op);
      })->Iterations(8)->Unit(benchmark::kMillisecond)->UseRealTime();
    }
}

}  // namespace
}  // namespace kvcache::engine

int main(int argc, char** argv) {
  if (!kvcache::bench::apply_isa_ceiling_from_env()) return 2;
  benchmark::Initialize(&argc, argv);
  kvcache::engine::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
