// YaRN's divisors and magnitude factor. See yarn_rope.h.
#include "engine/yarn_rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvcache::engine {

std::vector<float> yarn_divisors(const HParams& hp) {
  const double d = hp.rope_dim, base = hp.rope_base, s = hp.rope_yarn_factor;
  const auto length = static_cast<double>(hp.rope_yarn_orig_ctx);
  auto corr = [&](double rotations) {
    return d * std::log(length / (2.0 * std::numbers::pi * rotations)) / (2.0 * std::log(base));
  };
  const double low = std::max(0.0, std::floor(corr(hp.rope_yarn_beta_fast)));
  const double high = std::min(d - 1.0, std::ceil(corr(hp.rope_yarn_beta_slow)));
  std::vector<float> out(static_cast<size_t>(hp.rope_dim / 2));
  for (size_t j = 0; j < out.size(); ++j) {
    const double ramp = std::clamp((double(j) - low) / std::max(high - low, 0.001), 0.0, 1.0);
    out[j] = static_cast<float>(1.0 / ((1.0 - ramp) + ramp / s));
  }
  return out;
}

float yarn_attn_factor(float factor) {
  return factor > 1.0f ? static_cast<float>(0.1 * std::log(double(factor)) + 1.0) : 1.0f;
}

void scale_rotated(std::span<float> x, int64_t rows, int32_t head_dim, int32_t rope_dim,
                   float factor) {
  if (factor == 1.0f) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t i = 0; i < rope_dim; ++i) x[static_cast<size_t>(r * head_dim + i)] *= factor;
}

}  // namespace kvcache::engine
