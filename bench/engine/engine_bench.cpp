// kvcache_engine_bench: prefill and decode tokens/s of the engine on a ~100M-parameter
// random-weight llama model (f16 weights in the file, d=768, 12 layers, 12 q / 4 kv heads,
// ff 2048, vocab 32000, tied), generated into a temp file at start. Contexts 1K, 4K, 16K.
// The context is filled cheaply: random K/V written straight into the cache through
// update_and_attend (q_heads = kv_heads, output discarded) instead of full forwards, growing
// one cache from 1K to 16K; each timed step is rewound so the context stays fixed.
// Output: Google Benchmark (--benchmark_format=json); counter tokens_per_s.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/cache_setup.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "program/gguf.h"
#include "program/model_geometry.h"

namespace kvcache::engine {
namespace {

constexpr int kD = 768, kLayers = 12, kHeads = 12, kKvHeads = 4, kHeadDim = 64, kFf = 2048;
constexpr int kVocab = 32000, kMaxContext = 16384 + 1024, kChunk = 512;

// float -> IEEE half by truncation (values here are small normals or flush to zero).
uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  if (exp <= 0) return static_cast<uint16_t>(sign);
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7BFFu);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | ((x >> 13) & 0x3FFu));
}

std::vector<uint8_t> random_f16(int64_t n, float scale, std::mt19937_64& rng) {
  std::vector<uint8_t> out(n * 2);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = to_half(u(rng));
    std::memcpy(&out[i * 2], &h, 2);
  }
  return out;
}

std::string write_model() {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", kLayers);
  w.set_uint32("llama.embedding_length", kD);
  w.set_uint32("llama.feed_forward_length", kFf);
  w.set_uint32("llama.context_length", kMaxContext);
  w.set_uint32("llama.attention.head_count", kHeads);
  w.set_uint32("llama.attention.head_count_kv", kKvHeads);
  ModelGeometry g;
  for (int i = 0; i < kLayers; ++i) {
    g.cache.layers.push_back({kKvHeads, kHeadDim, kHeadDim, 0});
    g.layer_cache.push_back(i);
  }
  g.max_context = kMaxContext;
  g.max_step_tokens = kChunk;
  if (!write_model_geometry(g, w).ok()) return {};
  std::mt19937_64 rng(1);
  auto mat = [&](const std::string& name, int64_t out, int64_t in) {
    (void)w.add_tensor(name, gguf::TensorType::kF16, {in, out},
                       random_f16(out * in, 1.7f / std::sqrt(static_cast<float>(in)), rng));
  };
  auto ones = [&](const std::string& name) {
    std::vector<float> v(kD, 1.0f);
    (void)w.add_tensor_f32(name, {kD}, v);
  };
  mat("token_embd.weight", kVocab, kD);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    ones(p + "attn_norm.weight");
    ones(p + "ffn_norm.weight");
    mat(p + "attn_q.weight", kHeads * kHeadDim, kD);
    mat(p + "attn_k.weight", kKvHeads * kHeadDim, kD);
    mat(p + "attn_v.weight", kKvHeads * kHeadDim, kD);
    mat(p + "attn_output.weight", kD, kHeads * kHeadDim);
    mat(p + "ffn_gate.weight", kFf, kD);
    mat(p + "ffn_up.weight", kFf, kD);
    mat(p + "ffn_down.weight", kD, kFf);
  }
  ones("output_norm.weight");
  const std::string path = "/tmp/kvcache_engine_bench_" + std::to_string(getpid()) + ".gguf";
  return w.write(path).ok() ? path : std::string();
}

// One model + engine + f16 sequence cache shared by every benchmark, in registration order.
struct State {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Model> model;
  std::shared_ptr<Cache> cache;
  std::unique_ptr<Engine> engine;
  std::string error;
};

State& state() {
  static State* s = [] {
    auto* st = new State();
    const std::string path = write_model();
    if (path.empty()) {
      st->error = "writing the bench model failed";
      return st;
    }
    Result<gguf::GgufFile> f = gguf::GgufFile::open(path);
    if (!f.ok()) {
      st->error = f.status().to_string();
      return st;
    }
    st->file = std::make_unique<gguf::GgufFile>(std::move(*f));
    Result<Model> m = Model::load(*st->file);
    std::remove(path.c_str());
    if (!m.ok()) {
      st->error = m.status().to_string();
      return st;
    }
    st->model = std::make_unique<Model>(std::move(*m));
    CacheOptions o;
    o.capacity = kMaxContext;
    o.kv_dtype = DType::kF16;
    Result<CacheSetup> setup = plan_cache(*st->model, o);
    Result<std::shared_ptr<Cache>> c =
        setup.ok() ? build_cache(*setup) : Result<std::shared_ptr<Cache>>(setup.status());
    if (!c.ok()) {
      st->error = c.status().to_string();
      return st;
    }
    st->cache = *c;
    st->engine = Engine::create(*st->model, st->cache).value();
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

void run_steps(benchmark::State& bs, int64_t tokens_per_step) {
  State& s = state();
  if (!s.error.empty()) {
    bs.SkipWithError(s.error.c_str());
    return;
  }
  const int64_t ctx = bs.range(0);
  Status st = fill_to(*s.cache, ctx);
  if (!st.ok()) {
    bs.SkipWithError(st.to_string().c_str());
    return;
  }
  std::vector<int32_t> tokens(tokens_per_step), ids(tokens_per_step, 0);
  std::vector<int64_t> pos(tokens_per_step);
  for (int64_t i = 0; i < tokens_per_step; ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % kVocab);
    pos[i] = ctx + i;
  }
  Logits out;
  for (auto _ : bs) {
    st = s.engine->forward({tokens, ids, pos}, LogitsMode::kLast, out);
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
}

void BM_Prefill512(benchmark::State& bs) { run_steps(bs, kChunk); }
void BM_Decode(benchmark::State& bs) { run_steps(bs, 1); }

// Decode and prefill alternate per context so the cache grows once: 1K, 4K, 16K.
BENCHMARK(BM_Decode)->Arg(1024)->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill512)->Arg(1024)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode)->Arg(4096)->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill512)->Arg(4096)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode)->Arg(16384)->Iterations(16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill512)->Arg(16384)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvcache::engine

BENCHMARK_MAIN();
