// Seeded random inputs for the engine's kernel tests: one generator, so every test that asks
// for the same seed gets the same values. Layer: tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace kvcache::engine::testing {

// n draws of N(0, stddev^2) from a 64-bit Mersenne twister seeded with `seed`.
inline std::vector<float> rnd(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace kvcache::engine::testing
