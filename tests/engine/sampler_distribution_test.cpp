// The sampler's draws follow the distribution its settings promise: softmax(l / T), cut to the
// top_k highest or to the smallest highest-first set whose mass reaches top_p, renormalized.
// Each test draws 20000 tokens from one seeded stream and runs a chi-square goodness-of-fit test
// against probabilities computed here independently; tokens outside the kept set must never be
// drawn. The threshold is the chi-square 1 - 1e-6 quantile, so a correct sampler fails with
// probability 1e-6 per seed, and the seeds are fixed, so the tests never flake.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "engine/sampler.h"
#include "engine_test_util.h"

namespace kvcache::engine {
namespace {

using testing::chi2_quantile_even_df;
using testing::chi2_survival_even_df;

constexpr int kDraws = 20000;
// Ids are not in logit order, so the sampler's ordering is part of what is tested.
const std::vector<float> kLogits = {0.4f, 1.5f, -0.8f, 1.2f, 0.1f};

// Probabilities by id: softmax(l / T) in double; the `top_k` most likely (0 = all) kept and
// renormalized; then the smallest most-likely-first prefix with mass >= top_p, renormalized.
std::vector<double> expected(double t, int top_k, double top_p) {
  const size_t n = kLogits.size();
  std::vector<double> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = std::exp(kLogits[i] / t);
  std::vector<size_t> ids(n);
  std::iota(ids.begin(), ids.end(), size_t{0});
  std::sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  size_t keep = top_k > 0 ? std::min<size_t>(top_k, n) : n;
  double sum = 0.0;
  for (size_t j = 0; j < keep; ++j) sum += p[ids[j]];
  double mass = 0.0;
  for (size_t j = 0; j < keep; ++j) {
    mass += p[ids[j]] / sum;
    if (mass >= top_p) {
      keep = j + 1;
      break;
    }
  }
  std::vector<double> out(n, 0.0);
  double kept = 0.0;
  for (size_t j = 0; j < keep; ++j) kept += p[ids[j]];
  for (size_t j = 0; j < keep; ++j) out[ids[j]] = p[ids[j]] / kept;
  return out;
}

// Draws kDraws tokens and checks them against `want`: zero counts where want is 0, and the
// chi-square statistic over the kept ids below the 1 - 1e-6 quantile.
void expect_distribution(const SamplerConfig& config, const std::vector<double>& want,
                         int expected_kept) {
  Sampler sampler(config);
  std::vector<int> count(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    const int32_t id = sampler.sample(kLogits);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, static_cast<int32_t>(kLogits.size()));
    ++count[id];
  }
  int kept = 0;
  double chi2 = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(count[i], 0) << "id " << i << " is outside the kept set";
      continue;
    }
    ++kept;
    const double e = want[i] * kDraws;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  ASSERT_EQ(kept, expected_kept);
  ASSERT_EQ((kept - 1) % 2, 0) << "the closed-form quantile needs an even df";
  const double limit = chi2_quantile_even_df(1e-6, kept - 1);
  EXPECT_LT(chi2, limit) << "chi-square " << chi2 << " over " << kept - 1 << " df";
}

TEST(SamplerDistribution, ChiSquareQuantileMatchesItsKnownValue) {
  // df 2: survival e^(-x/2) = 1e-6 at x = 2 ln 1e6 = 27.631.
  EXPECT_NEAR(chi2_quantile_even_df(1e-6, 2), 2.0 * std::log(1e6), 1e-9);
  // df 4: e^(-x/2) (1 + x/2) = 1e-6 at x = 33.377 (tables: 33.38).
  EXPECT_NEAR(chi2_quantile_even_df(1e-6, 4), 33.377, 1e-3);
}

TEST(SamplerDistribution, TemperatureAloneDrawsSoftmaxOfLogitsOverT) {
  // T = 0.7: probabilities 0.102, 0.492, 0.018, 0.321, 0.067 by id; all five kept, 4 df.
  const std::vector<double> want = expected(0.7, 0, 1.0);
  EXPECT_NEAR(want[1], 0.4922, 1e-3);
  expect_distribution(SamplerConfig{0.7f, 0, 1.0f, 11}, want, 5);
}

TEST(SamplerDistribution, TopPKeepsTheSmallestSetReachingPAndRenormalizes) {
  // T = 0.7, top_p 0.9: masses by rank 0.492, 0.321, 0.102 reach 0.915 at the third, so ids 1,
  // 3, 0 are kept (renormalized 0.538, 0.351, 0.112) and ids 2 and 4 never drawn; 2 df.
  const std::vector<double> want = expected(0.7, 0, 0.9);
  EXPECT_NEAR(want[1], 0.538, 1e-3);
  EXPECT_EQ(want[2], 0.0);
  EXPECT_EQ(want[4], 0.0);
  expect_distribution(SamplerConfig{0.7f, 0, 0.9f, 12}, want, 3);
}

TEST(SamplerDistribution, TopKKeepsTheKMostLikelyAndRenormalizes) {
  // T = 1.3, top_k 3: ids 1, 3, 0 with probabilities proportional to e^(l / 1.3); 2 df.
  const std::vector<double> want = expected(1.3, 3, 1.0);
  EXPECT_EQ(want[2] + want[4], 0.0);
  expect_distribution(SamplerConfig{1.3f, 3, 1.0f, 13}, want, 3);
}

TEST(SamplerDistribution, TopPAppliesToTheTopKRenormalizedMass) {
  // T = 1.3, top_k 4 then top_p 0.75: within the four kept (ids 1, 3, 0, 4), the first three
  // reach the mass 0.75 only together (the first two hold < 0.75), so 3 are kept; 2 df.
  const std::vector<double> want = expected(1.3, 4, 0.75);
  expect_distribution(SamplerConfig{1.3f, 4, 0.75f, 14}, want, 3);
}

TEST(SamplerDistribution, TheTestSeesAWrongTemperature) {
  // The same draws judged against T = 1.0 instead of the configured 0.7 fail the test: it has
  // the power to see a sampler that ignored the temperature.
  Sampler sampler(SamplerConfig{0.7f, 0, 1.0f, 11});
  const std::vector<double> wrong = expected(1.0, 0, 1.0);
  std::vector<int> count(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++count[sampler.sample(kLogits)];
  double chi2 = 0.0;
  for (size_t i = 0; i < wrong.size(); ++i) {
    const double e = wrong[i] * kDraws;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_GT(chi2, chi2_quantile_even_df(1e-6, 4));
}

TEST(TokenLogprob, IsTheLogSoftmaxOverTOfTheAllowedTokens) {
  // p(1) = 3/4, p(0) = 1/4 once token 2 is masked out; at t = 2 the logits 0, ln 9 give the same.
  const std::vector<float> logits = {0.0f, std::log(3.0f), 50.0f, -1.0f};
  const std::vector<uint64_t> no_2 = {0b1011};
  TokenLogprob lp = token_logprob(logits, no_2, 0.0f, 0, 2);  // greedy: t = 1
  EXPECT_NEAR(lp.logprob, std::log(0.25) - std::log(1.0 + std::exp(-1.0) / 4.0), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 0);
  const std::vector<float> wide = {0.0f, std::log(9.0f), 7.0f};
  const std::vector<uint64_t> two = {0b011};
  lp = token_logprob(wide, two, 2.0f, 1, 5);  // at most the allowed count
  EXPECT_NEAR(lp.logprob, std::log(0.75), 1e-6);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_NEAR(lp.top[1].second, std::log(0.25), 1e-6);
  // A disallowed token has no probability; no mask means every token.
  EXPECT_EQ(token_logprob(wide, two, 1.0f, 2, 0).logprob, -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(token_logprob(wide, two, 1.0f, 2, 0).top.empty());
  EXPECT_EQ(token_logprob(wide, {}, 1.0f, 0, 1).top[0].first, 2);
}

}  // namespace
}  // namespace kvcache::engine
