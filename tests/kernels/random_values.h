// Seeded random inputs for the kernel tests: one generator, so every test that asks
// for the same seed gets the same values, and random weights of any computable type made from
// them. Layer: tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "kernels/weight.h"
#include "program/gguf_quant.h"

namespace kvcache::kernels::testing {

// n draws of N(0, stddev^2) from a 64-bit Mersenne twister seeded with `seed`.
inline std::vector<float> rnd(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// A rows x cols weight of `type` encoding rnd(rows * cols, seed): F32 as is, every other type
// through gguf::quantize. Empty (rows 0) when the type cannot encode that width.
inline Weight random_weight(gguf::TensorType type, int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> dense = rnd(static_cast<size_t>(rows * cols), seed);
  if (type == gguf::TensorType::kF32) return Weight::from_f32(rows, cols, std::move(dense));
  const std::optional<int64_t> row_bytes = gguf::row_bytes(type, cols);
  if (!row_bytes) return Weight{};
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * *row_bytes));
  if (!gguf::quantize(type, dense, bytes)) return Weight{};
  return Weight::from_bytes(type, rows, cols, std::move(bytes));
}

}  // namespace kvcache::kernels::testing
