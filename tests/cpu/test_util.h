// Helpers shared by the cpu tests: seeded random data, rounding through a storage dtype, and a
// brute-force attention written directly from the inputs (no kernel code involved).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/geometry.h"
#include "cpu/dtype_convert.h"

namespace kvcache::cpu::testing {

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The largest |got - want| / (1 + |want|) over the outputs; NaN anywhere counts as infinite.
inline double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(double(want[i])));
    if (!(e <= worst)) worst = e;
  }
  return worst;
}

// What storing in `dtype` and reading back gives.
inline std::vector<float> rounded(DType dtype, const std::vector<float>& v) {
  std::vector<uint16_t> tmp(v.size() * 2);
  std::vector<float> out(v.size());
  store_row(dtype, v.data(), tmp.data(), static_cast<int64_t>(v.size()));
  load_row(dtype, tmp.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

// One query head against explicit key/value vectors: softmax(scale * q.k [softcapped]) . v;
// with a sink logit s the denominator gains exp(s) (and no value is added).
inline std::vector<double> brute_attend(const float* q, const std::vector<const float*>& ks,
                                        const std::vector<const float*>& vs, int dim,
                                        int value_dim, double scale, double softcap,
                                        const float* sink = nullptr) {
  std::vector<double> s(ks.size());
  double mx = -INFINITY;
  for (size_t j = 0; j < ks.size(); ++j) {
    double dot = 0;
    for (int d = 0; d < dim; ++d) dot += double(q[d]) * ks[j][d];
    s[j] = dot * scale;
    if (softcap > 0) s[j] = softcap * std::tanh(s[j] / softcap);
    mx = std::max(mx, s[j]);
  }
  if (sink != nullptr) mx = std::max(mx, double(*sink));
  double sum = sink != nullptr ? std::exp(double(*sink) - mx) : 0.0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> out(value_dim, 0.0);
  for (size_t j = 0; j < ks.size(); ++j)
    for (int d = 0; d < value_dim; ++d) out[d] += s[j] / sum * vs[j][d];
  return out;
}

inline double tolerance(DType dtype) { return dtype == DType::kF32 ? 2e-5 : 2e-4; }

}  // namespace kvcache::cpu::testing
