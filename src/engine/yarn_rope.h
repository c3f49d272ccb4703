// YaRN RoPE scaling (Peng, Quesnelle, Fan, Shippole: "YaRN: Efficient Context Window Extension
// of Large Language Models", 2023): the per-pair frequency divisors and the attention-magnitude
// factor, from the hyperparameters. Layer: engine (internal). Arithmetic only: the model folds
// the divisors into its RoPE frequencies and the forward scales the rotated dims.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/model.h"

namespace kvcache::engine {

// With d = rope_dim, base b, original context L and factor s: pair j's base frequency
// f_j = b^(-2j/d) turns L f_j / 2π times over L. Pairs that turn often keep f_j, pairs that turn
// rarely are interpolated (f_j / s), with a linear ramp between over the pair index:
//   corr(r) = d ln(L / (2π r)) / (2 ln b),
//   low = max(0, floor(corr(beta_fast))), high = min(d - 1, ceil(corr(beta_slow))),
//   ramp_j = clamp((j - low) / max(high - low, 0.001), 0, 1),
//   freq_j = f_j ((1 - ramp_j) + ramp_j / s).
// Returns the divisors f_j / freq_j (rope_dim / 2 of them). hp.rope_yarn_factor > 0.
std::vector<float> yarn_divisors(const HParams& hp);

// The attention-magnitude factor: 0.1 ln(s) + 1 for s > 1, else 1. Both q and k's rotated dims
// are multiplied by it (so the logits of those dims by its square).
float yarn_attn_factor(float factor);

// x[rows, head_dim]: the first rope_dim values of each row times `factor` (a no-op at 1).
void scale_rotated(std::span<float> x, int64_t rows, int32_t head_dim, int32_t rope_dim,
                   float factor);

}  // namespace kvcache::engine
