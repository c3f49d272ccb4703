// Greedy and temperature/top-k/top-p sampling. See sampler.h.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace kvcache::engine {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

Status check_sampler_config(const SamplerConfig& c) {
  auto bad = [](const char* field, double v, const char* want) {
    return invalid_argument(std::string("sampler: ") + field + " = " + std::to_string(v) +
                            ", expected " + want);
  };
  if (!std::isfinite(c.temperature) || c.temperature < 0.0f || c.temperature > 1e4f)
    return bad("temperature", c.temperature, "a finite number in [0, 10000]");
  if (c.top_k < 0) return bad("top_k", c.top_k, ">= 0");
  if (!std::isfinite(c.top_p) || !(c.top_p > 0.0f) || c.top_p > 1.0f)
    return bad("top_p", c.top_p, "a finite number in (0, 1]");
  return ok_status();
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (config_.temperature <= 0.0f || logits.size() <= 1) return argmax(logits);
  const auto n = static_cast<int32_t>(logits.size());
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  // Highest logit first; ties by lower id so the order is deterministic.
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int32_t keep = config_.top_k > 0 ? std::min(config_.top_k, n) : n;
  std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
  probs_.resize(keep);
  const double mx = logits[order_[0]];
  double sum = 0.0;
  for (int32_t i = 0; i < keep; ++i)
    sum += (probs_[i] = std::exp((logits[order_[i]] - mx) / config_.temperature));
  if (config_.top_p < 1.0f) {
    double acc = 0.0;
    int32_t cut = keep;
    for (int32_t i = 0; i < keep; ++i) {
      acc += probs_[i] / sum;
      if (acc >= config_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
  }
  // Inverse-CDF draw from one 53-bit uniform: the same seed gives the same tokens everywhere.
  const double u = std::generate_canonical<double, 53>(rng_) * sum;
  double acc = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (u < acc) return order_[i];
  }
  return order_[keep - 1];
}

}  // namespace kvcache::engine
