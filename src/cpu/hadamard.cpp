#include "cpu/hadamard.h"

#include <bit>
#include <cmath>
#include <vector>

namespace kvcache::cpu {
namespace {

// The power-of-two blocks of a row: the largest power of two <= what is left, in order.
template <class Fn>
void for_each_block(int32_t width, Fn fn) {
  for (int32_t at = 0; at < width;) {
    const int32_t n = static_cast<int32_t>(std::bit_floor(static_cast<uint32_t>(width - at)));
    fn(at, n);
    at += n;
  }
}

}  // namespace

void hadamard_rows(float* x, int64_t rows, int32_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * width;
    for_each_block(width, [&](int32_t at, int32_t n) {
      float* v = row + at;
      for (int32_t h = 1; h < n; h *= 2)
        for (int32_t i = 0; i < n; i += 2 * h)
          for (int32_t j = i; j < i + h; ++j) {
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
          }
      const float norm = 1.0f / std::sqrt(static_cast<float>(n));
      for (int32_t i = 0; i < n; ++i) v[i] *= norm;
    });
  }
}

void hadamard_rows_reference(float* x, int64_t rows, int32_t width) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * width;
    for_each_block(width, [&](int32_t at, int32_t n) {
      out.assign(static_cast<size_t>(n), 0.0);
      for (int32_t i = 0; i < n; ++i)
        for (int32_t j = 0; j < n; ++j)
          out[i] += (std::popcount(static_cast<uint32_t>(i & j)) % 2 ? -1.0 : 1.0) * row[at + j];
      for (int32_t i = 0; i < n; ++i)
        row[at + i] = static_cast<float>(out[i] / std::sqrt(static_cast<double>(n)));
    });
  }
}

}  // namespace kvcache::cpu
