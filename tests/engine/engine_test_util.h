// Helpers shared by the engine tests: run a token list through a cache in chunks and collect
// every token's logits; compare against the no-cache reference. Layer: tests.
#pragma once

#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "engine/reference.h"
#include "engine/runtime.h"
#include "engine/session.h"

namespace kvcache::engine::testing {

using Built = CachedEngine;

inline Built build(const Model& model, const CacheOptions& options) {
  Result<CachedEngine> r = build_engine(model, options);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : Built{};
}

// Every token's logits [T, vocab], fed `chunk` tokens per forward.
inline std::vector<float> cached_logits(Built& b, std::span<const int32_t> tokens,
                                        int64_t chunk) {
  std::vector<float> all;
  Logits out;
  Status s = prefill_chunks(*b.engine, b.seq, tokens, chunk, LogitsMode::kAll, out,
                            [&all](const Logits& o) {
                              all.insert(all.end(), o.data.begin(), o.data.end());
                            });
  EXPECT_TRUE(s.ok()) << s.to_string();
  return all;
}

// max |a - b| / max(1, max |b|).
inline double rel_diff(std::span<const float> a, std::span<const double> b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1.0, worst = 0.0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst / scale;
}

inline std::vector<int32_t> some_tokens(int n, int vocab, uint32_t seed = 7) {
  std::vector<int32_t> t(n);
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t[i] = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  return t;
}

// P(chi-square with 2m degrees of freedom > x) = e^(-x/2) * sum_{j<m} (x/2)^j / j!.
inline double chi2_survival_even_df(double x, int df) {
  double term = 1.0, sum = 0.0;
  for (int j = 0; j < df / 2; ++j) {
    sum += term;
    term *= x / 2.0 / (j + 1);
  }
  return std::exp(-x / 2.0) * sum;
}

// The x whose survival is `alpha` (bisection; the survival falls as x grows).
inline double chi2_quantile_even_df(double alpha, int df) {
  double lo = 0.0, hi = 1000.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2.0;
    (chi2_survival_even_df(mid, df) > alpha ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace kvcache::engine::testing
