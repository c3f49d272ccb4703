// A plain forward without any cache: direct causal attention over all tokens of one sequence,
// every product in double. Layer: engine. Slow by design; the correctness oracle for the
// cached forward (tests, and the run tool's reference logits dump).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/geometry.h"
#include "engine/model.h"

namespace kvcache::engine {

// Logits [T, vocab] for tokens at positions 0..T-1. `windows` (optional) gives the policy per
// cache layer (default: the model's geometry). Tokens must be in [0, vocab).
std::vector<double> reference_logits(const Model& model, std::span<const int32_t> tokens,
                                     const CacheGeometry* windows = nullptr);

}  // namespace kvcache::engine
