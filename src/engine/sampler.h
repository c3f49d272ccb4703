// Picks the next token from a row of logits: greedy (temperature 0) or sampled with
// temperature, top-k and top-p. Layer: engine. Reproducible for a seed (std::mt19937_64).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvcache::engine {

struct SamplerConfig {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties); else > 0
  int32_t top_k = 0;         // 0 = all tokens
  float top_p = 1.0f;        // (0, 1]; smallest set whose probability reaches top_p
  uint64_t seed = 0;
};

// InvalidArgument naming the field ("temperature", "top_k", "top_p") when a value is NaN,
// infinite or out of its range (temperature in [0, 1e4], top_k >= 0, top_p in (0, 1]).
Status check_sampler_config(const SamplerConfig& config);

// Not thread-safe (owns the random engine).
class Sampler {
 public:
  explicit Sampler(const SamplerConfig& config);
  int32_t sample(std::span<const float> logits);
  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;
  std::vector<double> probs_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace kvcache::engine
