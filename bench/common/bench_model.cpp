// See bench_model.h.
#include "bench_model.h"

#include <unistd.h>

#include <cmath>
#include <map>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "program/gguf.h"
#include "program/model_geometry.h"

namespace kvcache::bench {
namespace {

constexpr int kD = BenchModel::kD, kLayers = BenchModel::kLayers, kHeads = BenchModel::kHeads;
constexpr int kKvHeads = BenchModel::kKvHeads, kHeadDim = BenchModel::kHeadDim;
constexpr int kFf = BenchModel::kFf, kVocab = BenchModel::kVocab, kChunk = BenchModel::kChunk;

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

}  // namespace

std::vector<uint8_t> bench_model_bytes(int64_t max_context) {
  gguf::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", kLayers);
  w.set_uint32("llama.embedding_length", kD);
  w.set_uint32("llama.feed_forward_length", kFf);
  w.set_uint32("llama.context_length", static_cast<uint32_t>(max_context));
  w.set_uint32("llama.attention.head_count", kHeads);
  w.set_uint32("llama.attention.head_count_kv", kKvHeads);
  w.set_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);  // required by other readers
  ModelGeometry g;
  for (int i = 0; i < kLayers; ++i) {
    g.cache.layers.push_back({kKvHeads, kHeadDim, kHeadDim, 0});
    g.layer_cache.push_back(i);
  }
  g.max_context = max_context;
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
  return w.bytes();
}

std::string write_bench_model(int64_t max_context) {
  const std::vector<uint8_t> bytes = bench_model_bytes(max_context);
  if (bytes.empty()) return {};
  const std::string path = "/tmp/kvcache_bench_model_" + std::to_string(getpid()) + ".gguf";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return {};
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return (std::fclose(f) == 0 && ok) ? path : std::string();
}

const LoadedBenchModel& load_bench_model(int64_t max_context) {
  static std::map<int64_t, LoadedBenchModel> all;
  auto it = all.find(max_context);
  if (it != all.end()) return it->second;
  LoadedBenchModel& l = all[max_context];
  const std::string path = write_bench_model(max_context);
  if (path.empty()) {
    l.error = "writing the benchmark model failed";
    return l;
  }
  Result<engine::LoadedModel> m = engine::load_model(engine::ModelSource::file(path));
  std::remove(path.c_str());  // the file is mapped or copied: its name is no longer needed
  if (!m.ok()) {
    l.error = m.status().to_string();
    return l;
  }
  static_cast<engine::LoadedModel&>(l) = std::move(*m);
  return l;
}

}  // namespace kvcache::bench
