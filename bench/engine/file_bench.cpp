// kvcache_file_bench FILE.gguf [FILE.gguf ...] [--benchmark_*]: decode and 512-token prefill of
// model files on disk — the same files another engine is run on in the same sitting, for a
// side-by-side. Per file: decode tok/s at depth 0 / 2K / 8K / 16K (and 32K with
// KVCACHE_BENCH_MAX_DEPTH=32768) and a 512-token prefill at depth 0 and 4K (sequence layout;
// K/V type from KVCACHE_BENCH_KV, default f16, e.g. q8_0 or q4_0 with the rotation's default;
// threads from KVCACHE_BENCH_THREADS, default 2), with decode's effective bandwidth: (weight
// bytes — of a mixture of experts, the routers and the experts they chose — + K/V bytes read
// per token) * tok/s, and its ratio to the read probe run in this
// process. The file is read into huge pages as
// `kvcache run` does; KVCACHE_BENCH_MAPPED=1 maps it in place instead (the --map-weights
// comparison). Output: Google Benchmark JSON.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "engine/cache_setup.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "program/gguf.h"
#include "bench_main.h"
#include "read_probe.h"

namespace kvcache::engine {
namespace {

constexpr int64_t kChunk = 512;

// The run's K/V type and deepest decode, from the environment (read once in main).
struct Settings {
  DType kv = DType::kF16;
  int64_t max_depth = 16384;
};
Settings g_settings;

struct Loaded {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Model> model;
  std::shared_ptr<Cache> cache;
  std::unique_ptr<Engine> engine;
  int64_t weight_bytes = 0;  // every matrix once per token, the output once
  int64_t kv_bytes_per_pos = 0;
  int64_t filled = 0;        // positions held
  int64_t step = 0;          // the widest step the cache takes (a sliding window caps it)
  std::string error;
};

Loaded load(const std::string& path) {
  Loaded l;
  const char* mapped = std::getenv("KVCACHE_BENCH_MAPPED");
  const bool map_it = mapped != nullptr && std::string(mapped) == "1";
  Result<gguf::GgufFile> f = gguf::GgufFile::open(
      path, map_it ? gguf::GgufFile::Placement::kMapped : gguf::GgufFile::Placement::kHugePages);
  if (!f.ok()) return l.error = f.status().to_string(), std::move(l);
  l.file = std::make_unique<gguf::GgufFile>(std::move(*f));
  Result<Model> m = Model::load(*l.file);
  if (!m.ok()) return l.error = m.status().to_string(), std::move(l);
  l.model = std::make_unique<Model>(std::move(*m));
  for (const LayerWeights& lw : l.model->layers())
    for (const kernels::Weight* x :
         {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
      l.weight_bytes += static_cast<int64_t>(x->bytes.size());
  l.weight_bytes += static_cast<int64_t>(l.model->output().bytes.size());
  CacheOptions o;
  o.capacity = g_settings.max_depth + kChunk;
  o.kv_dtype = g_settings.kv;
  Result<CacheSetup> setup = plan_cache(*l.model, o);
  if (!setup.ok()) return l.error = setup.status().to_string(), std::move(l);
  Result<std::shared_ptr<Cache>> cache = build_cache(*setup);
  if (!cache.ok()) return l.error = cache.status().to_string(), std::move(l);
  l.cache = *cache;
  l.step = setup->step_tokens;
  l.kv_bytes_per_pos = bytes_per_cell(setup->geometry, setup->config).value_or(0);
  Result<std::unique_ptr<Engine>> e = Engine::create(*l.model, l.cache);
  if (!e.ok()) return l.error = e.status().to_string(), std::move(l);
  l.engine = std::move(*e);
  return l;
}

int32_t token_at(int64_t i, int64_t vocab) { return static_cast<int32_t>((i * 7919) % vocab); }

// Runs positions [from, from + n) through the engine, in steps of at most l.step tokens (as
// `kvcache run` prefills: a model with a sliding window narrower than 512, gpt-oss's 128,
// prefills 512 tokens in four steps).
Status feed(Loaded& l, int64_t from, int64_t n, Logits& out) {
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(l.step, n - done);
    std::vector<int32_t> tokens(m), ids(m, 0);
    std::vector<int64_t> pos(m);
    for (int64_t i = 0; i < m; ++i) {
      tokens[i] = token_at(from + done + i, l.model->hparams().vocab);
      pos[i] = from + done + i;
    }
    if (Status st = l.engine->forward({tokens, ids, pos}, LogitsMode::kLast, out); !st.ok())
      return st;
    done += m;
  }
  return ok_status();
}

// Holds exactly `depth` positions (prefills what is missing in chunks, or rewinds).
Status reach(Loaded& l, int64_t depth) {
  Logits out;
  if (l.filled > depth) {
    if (Status st = l.cache->rewind(0, depth); !st.ok()) return st;
    l.filled = depth;
  }
  while (l.filled < depth) {
    const int64_t n = std::min(kChunk, depth - l.filled);
    if (Status st = feed(l, l.filled, n, out); !st.ok()) return st;
    l.filled += n;
  }
  return ok_status();
}

void run(benchmark::State& bs, Loaded& l, int64_t depth, int64_t tokens) {
  if (!l.error.empty()) return bs.SkipWithError(l.error.c_str());
  if (Status st = reach(l, depth); !st.ok()) return bs.SkipWithError(st.to_string().c_str());
  const int threads = static_cast<int>(cpu::global_pool().size());
  bench::ProbeAround probe(threads);
  Logits out;
  l.engine->reset_moe_stats();
  for (auto _ : bs) {
    if (Status st = feed(l, depth, tokens, out); !st.ok())
      return bs.SkipWithError(st.to_string().c_str());
    bs.PauseTiming();
    (void)l.cache->rewind(0, depth);
    bs.ResumeTiming();
  }
  using benchmark::Counter;
  bs.counters["tokens_per_s"] = Counter(double(tokens) * double(bs.iterations()),
                                        Counter::kIsRate);
  if (tokens == 1) {
    // A mixture of experts reads its routers and the experts they chose (MoeStats).
    const MoeStats& ms = l.engine->moe_stats();
    const double moe = double(ms.router_bytes + ms.expert_bytes) / double(bs.iterations());
    const double bytes =
        double(l.weight_bytes) + moe + double(l.kv_bytes_per_pos) * double(depth);
    bs.counters["bytes_per_second"] = Counter(bytes, Counter::kIsIterationInvariantRate);
    bs.counters["probe_ratio"] =
        Counter(bytes / probe.best(), Counter::kIsIterationInvariantRate);
    bs.counters["probe_bytes_per_second"] = probe.best();
  }
  bs.counters["threads"] = threads;
  bs.counters["step_tokens"] = static_cast<double>(l.step);
}

}  // namespace
}  // namespace kvcache::engine

int main(int argc, char** argv) {
  using namespace kvcache::engine;
  if (!kvcache::bench::apply_isa_ceiling_from_env()) return 2;
  benchmark::Initialize(&argc, argv);  // removes the --benchmark_* flags
  if (argc < 2) {
    std::fprintf(stderr, "usage: kvcache_file_bench FILE.gguf [FILE.gguf ...] [--benchmark_*]\n");
    return 2;
  }
  if (const char* kv = std::getenv("KVCACHE_BENCH_KV"); kv != nullptr) {
    const std::optional<kvcache::DType> d = kvcache::parse_dtype(kv);
    if (!d) return std::fprintf(stderr, "KVCACHE_BENCH_KV = '%s': not a dtype\n", kv), 2;
    g_settings.kv = *d;
  }
  if (const char* md = std::getenv("KVCACHE_BENCH_MAX_DEPTH"); md != nullptr)
    g_settings.max_depth = std::max<int64_t>(16384, std::atoll(md));
  const char* t = std::getenv("KVCACHE_BENCH_THREADS");
  kvcache::cpu::set_global_threads(t != nullptr ? std::atoi(t) : 2);
  static std::vector<std::unique_ptr<Loaded>> files;
  for (int i = 1; i < argc; ++i) {
    files.push_back(std::make_unique<Loaded>(load(argv[i])));
    Loaded* l = files.back().get();
    const std::string stem = std::filesystem::path(argv[i]).stem().string();
    auto add = [&](const std::string& name, int64_t depth, int64_t tokens) {
      benchmark::RegisterBenchmark((stem + "/" + name).c_str(),
                                   [=](benchmark::State& bs) { run(bs, *l, depth, tokens); })
          ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
    };
    add("pp512/depth:0", 0, kChunk);
    add("tg/depth:0", 0, 1);
    add("tg/depth:2048", 2048, 1);
    add("pp512/depth:4096", 4096, kChunk);
    add("tg/depth:8192", 8192, 1);
    add("tg/depth:16384", 16384, 1);
    if (g_settings.max_depth >= 32768) add("tg/depth:32768", 32768, 1);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
