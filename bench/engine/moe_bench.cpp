// kvcache_moe_bench: decode of a mixture of experts shaped as Qwen3-30B-A3B per layer (d 2048,
// 32 q / 4 kv heads of 128, q/k norms, 128 experts of width 768, 8 used per token) but scaled
// to fit a shared machine: KVCACHE_BENCH_MOE_LAYERS layers (default 2, not 48) and a vocab of
// 4096. Matrices are random Q4_0 bytes (KVCACHE_BENCH_MOE_TYPE=q8_0 for Q8_0), the routers
// F32, written to a temporary file and read as `kvcache run` does. Each timed step decodes a
// different token, so the router picks different experts (no step rereads the last one's
// experts from cache). Reports decode tok/s at depth 0 and 1024 and the bytes a token read:
// attention, routers and output in full, the experts the routers chose (the engine's
// MoeStats), K/V — per token, as a fraction of the file's weights, and as bandwidth against
// the read probe. Threads: KVCACHE_BENCH_THREADS (default 2). Output: Google Benchmark JSON.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_main.h"
#include "core/half.h"
#include "cpu/thread_pool.h"
#include "engine/cache_setup.h"
#include "engine/forward.h"
#include "program/gguf.h"
#include "program/gguf_quant.h"
#include "read_probe.h"

namespace kvcache::engine {
namespace {

constexpr int64_t kD = 2048, kHeads = 32, kKvHeads = 4, kHeadDim = 128, kExperts = 128;
constexpr int64_t kUsed = 8, kFf = 768, kVocab = 4096, kMaxDepth = 1024;

// Random blocks of a symmetric type (Q4_0, Q8_0) whose values have about unit-variance
// products over a row of `cols`: every block's f16 scale set, the quants random.
std::vector<uint8_t> random_blocks(gguf::TensorType type, int64_t rows, int64_t cols,
                                   uint64_t& seed) {
  const gguf::BlockGeometry g = *gguf::block_geometry(type);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols / g.elements * g.bytes));
  for (size_t i = 0; i + 8 <= out.size(); i += 8) {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;  // xorshift64
    std::memcpy(out.data() + i, &seed, 8);
  }
  // The quants' spread: Q4_0 (q - 8) about 4.6, Q8_0 about 74.
  const double spread = type == gguf::TensorType::kQ4_0 ? 4.6 : 74.0;
  const uint16_t scale = f32_to_f16(static_cast<float>(1.0 / (spread * std::sqrt(double(cols)))));
  for (size_t b = 0; b < out.size(); b += static_cast<size_t>(g.bytes))
    std::memcpy(out.data() + b, &scale, 2);
  return out;
}

// The model file; empty on failure (printed).
std::string write_model(gguf::TensorType type, int64_t layers) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  const std::string a = "qwen3moe.";
  w.set_uint32(a + "block_count", static_cast<uint32_t>(layers));
  w.set_uint32(a + "context_length", kMaxDepth + 64);
  w.set_uint32(a + "embedding_length", kD);
  w.set_uint32(a + "feed_forward_length", 6144);
  w.set_uint32(a + "attention.head_count", kHeads);
  w.set_uint32(a + "attention.head_count_kv", kKvHeads);
  w.set_uint32(a + "attention.key_length", kHeadDim);
  w.set_uint32(a + "attention.value_length", kHeadDim);
  w.set_float32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  w.set_uint32(a + "expert_count", kExperts);
  w.set_uint32(a + "expert_used_count", kUsed);
  w.set_uint32(a + "expert_feed_forward_length", kFf);
  uint64_t seed = 0x9E3779B97F4A7C15ull;
  Status st;
  auto mat = [&](const std::string& name, std::vector<int64_t> dims) {
    int64_t rows = 1;
    for (size_t i = 1; i < dims.size(); ++i) rows *= dims[i];
    if (st.ok()) st = w.add_tensor(name, type, dims, random_blocks(type, rows, dims[0], seed));
  };
  auto vec = [&](const std::string& name, int64_t n, float v) {
    if (st.ok()) st = w.add_tensor_f32(name, {n}, std::vector<float>(static_cast<size_t>(n), v));
  };
  mat("token_embd.weight", {kD, kVocab});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    vec(p + "attn_norm.weight", kD, 1.0f);
    mat(p + "attn_q.weight", {kD, kHeads * kHeadDim});
    mat(p + "attn_k.weight", {kD, kKvHeads * kHeadDim});
    mat(p + "attn_v.weight", {kD, kKvHeads * kHeadDim});
    vec(p + "attn_q_norm.weight", kHeadDim, 1.0f);
    vec(p + "attn_k_norm.weight", kHeadDim, 1.0f);
    mat(p + "attn_output.weight", {kHeads * kHeadDim, kD});
    vec(p + "ffn_norm.weight", kD, 1.0f);
    std::vector<float> router(static_cast<size_t>(kExperts * kD));
    for (float& x : router) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      x = (static_cast<float>(seed >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    if (st.ok()) st = w.add_tensor_f32(p + "ffn_gate_inp.weight", {kD, kExperts}, router);
    mat(p + "ffn_gate_exps.weight", {kD, kFf, kExperts});
    mat(p + "ffn_up_exps.weight", {kD, kFf, kExperts});
    mat(p + "ffn_down_exps.weight", {kFf, kD, kExperts});
  }
  vec("output_norm.weight", kD, 1.0f);
  mat("output.weight", {kD, kVocab});
  const std::string path = "/tmp/kvcache_moe_bench_" + std::to_string(getpid()) + ".gguf";
  if (st.ok()) st = w.write(path);
  if (!st.ok()) return std::fprintf(stderr, "moe bench: %s\n", st.to_string().c_str()), "";
  return path;
}

struct Loaded {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Model> model;
  std::shared_ptr<Cache> cache;
  std::unique_ptr<Engine> engine;
  int64_t dense_bytes = 0;   // read in full every token: attention matrices and the output
  int64_t weight_bytes = 0;  // every matrix of the file
  int64_t kv_bytes_per_pos = 0;
  int64_t filled = 0;
  std::string error;
};

Loaded load(const std::string& path) {
  Loaded l;
  Result<gguf::GgufFile> f = gguf::GgufFile::open(path, gguf::GgufFile::Placement::kHugePages);
  unlink(path.c_str());  // the mapping (or the copy) keeps the bytes
  if (!f.ok()) return l.error = f.status().to_string(), std::move(l);
  l.file = std::make_unique<gguf::GgufFile>(std::move(*f));
  Result<Model> m = Model::load(*l.file);
  if (!m.ok()) return l.error = m.status().to_string(), std::move(l);
  l.model = std::make_unique<Model>(std::move(*m));
  for (const LayerWeights& lw : l.model->layers()) {
    for (const kernels::Weight* x : {&lw.wq, &lw.wk, &lw.wv, &lw.wo})
      l.dense_bytes += static_cast<int64_t>(x->bytes.size());
    for (const std::vector<kernels::Weight>* s : {&lw.gate_exps, &lw.up_exps, &lw.down_exps})
      for (const kernels::Weight& x : *s) l.weight_bytes += static_cast<int64_t>(x.bytes.size());
  }
  l.dense_bytes += static_cast<int64_t>(l.model->output().bytes.size());
  l.weight_bytes += l.dense_bytes;
  CacheOptions o;
  o.capacity = kMaxDepth + 64;
  o.kv_dtype = DType::kF16;
  Result<CacheSetup> setup = plan_cache(*l.model, o);
  if (!setup.ok()) return l.error = setup.status().to_string(), std::move(l);
  Result<std::shared_ptr<Cache>> cache = build_cache(*setup);
  if (!cache.ok()) return l.error = cache.status().to_string(), std::move(l);
  l.cache = *cache;
  l.kv_bytes_per_pos = bytes_per_cell(setup->geometry, setup->config).value_or(0);
  Result<std::unique_ptr<Engine>> e = Engine::create(*l.model, l.cache);
  if (!e.ok()) return l.error = e.status().to_string(), std::move(l);
  l.engine = std::move(*e);
  return l;
}

int32_t token_at(int64_t i) { return static_cast<int32_t>((i * 7919) % kVocab); }

Status feed(Loaded& l, int64_t from, int64_t n, int64_t salt, Logits& out) {
  std::vector<int32_t> tokens(n), ids(n, 0);
  std::vector<int64_t> pos(n);
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = token_at(from + i + salt);
    pos[i] = from + i;
  }
  return l.engine->forward({tokens, ids, pos}, LogitsMode::kLast, out);
}

void decode(benchmark::State& bs, Loaded& l, int64_t depth) {
  if (!l.error.empty()) return bs.SkipWithError(l.error.c_str());
  Logits out;
  if (l.filled > depth) (void)l.cache->rewind(0, depth), l.filled = depth;
  for (; l.filled < depth; l.filled += 256)
    if (Status st = feed(l, l.filled, 256, 0, out); !st.ok())
      return bs.SkipWithError(st.to_string().c_str());
  const int threads = static_cast<int>(cpu::global_pool().size());
  bench::ProbeAround probe(threads);
  l.engine->reset_moe_stats();
  int64_t step = 0;
  for (auto _ : bs) {
    if (Status st = feed(l, depth, 1, ++step * 31, out); !st.ok())
      return bs.SkipWithError(st.to_string().c_str());
    bs.PauseTiming();
    (void)l.cache->rewind(0, depth);
    bs.ResumeTiming();
  }
  const MoeStats& ms = l.engine->moe_stats();
  const double n = static_cast<double>(bs.iterations());
  const double experts = static_cast<double>(ms.expert_bytes) / n;
  const double bytes = static_cast<double>(l.dense_bytes) +
                       static_cast<double>(ms.router_bytes) / n + experts +
                       static_cast<double>(l.kv_bytes_per_pos * depth);
  using benchmark::Counter;
  bs.counters["tokens_per_s"] = Counter(n, Counter::kIsRate);
  bs.counters["bytes_per_token"] = bytes;
  bs.counters["expert_bytes_per_token"] = experts;
  bs.counters["experts_per_layer"] =
      static_cast<double>(ms.expert_runs) / n / l.model->hparams().n_layers;
  bs.counters["fraction_of_weights"] = bytes / static_cast<double>(l.weight_bytes);
  bs.counters["bytes_per_second"] = Counter(bytes, Counter::kIsIterationInvariantRate);
  bs.counters["probe_ratio"] = Counter(bytes / probe.best(), Counter::kIsIterationInvariantRate);
  bs.counters["probe_bytes_per_second"] = probe.best();
  bs.counters["threads"] = threads;
}

}  // namespace
}  // namespace kvcache::engine

int main(int argc, char** argv) {
  using namespace kvcache::engine;
  if (!kvcache::bench::apply_isa_ceiling_from_env()) return 2;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* t = std::getenv("KVCACHE_BENCH_THREADS");
  kvcache::cpu::set_global_threads(t != nullptr ? std::atoi(t) : 2);
  const char* ty = std::getenv("KVCACHE_BENCH_MOE_TYPE");
  const bool q8 = ty != nullptr && std::string(ty) == "q8_0";
  const char* ly = std::getenv("KVCACHE_BENCH_MOE_LAYERS");
  const int64_t layers = ly != nullptr ? std::max(1, std::atoi(ly)) : 2;
  const std::string path =
      write_model(q8 ? kvcache::gguf::TensorType::kQ8_0 : kvcache::gguf::TensorType::kQ4_0, layers);
  if (path.empty()) return 1;
  static Loaded l = load(path);
  const std::string name = std::string("qwen3moe_a3b_") + (q8 ? "q8_0" : "q4_0") + "/tg/depth:";
  for (int64_t depth : {int64_t{0}, kMaxDepth})
    benchmark::RegisterBenchmark((name + std::to_string(depth)).c_str(),
                                 [depth](benchmark::State& bs) { decode(bs, l, depth); })
        ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
