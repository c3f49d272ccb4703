// engine/perplexity.h: log-softmax and KL divergence against hand-computed values, and
// score_window against the no-cache reference forward on a tiny random model (every scored
// row is the log-softmax of the reference logits of the position before it).
#include "engine/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "engine_test_util.h"
#include "test_model.h"

namespace kvcache::engine::testing {
namespace {

TEST(LogSoftmax, MatchesHandComputedValues) {
  // log(e^0 + e^1 + e^2) = 2.40760596; out = x - 2.40760596.
  const std::vector<float> x = {0.0f, 1.0f, 2.0f};
  std::vector<float> out(3);
  ASSERT_TRUE(log_softmax(x, out).ok());
  EXPECT_NEAR(out[0], -2.40760596, 1e-6);
  EXPECT_NEAR(out[1], -1.40760596, 1e-6);
  EXPECT_NEAR(out[2], -0.40760596, 1e-6);
}

TEST(LogSoftmax, IsShiftInvariantAndSafeForLargeLogits) {
  // Uniform over 4: log(1/4) = -1.38629436 whatever the common value (exp(1000) overflows).
  const std::vector<float> x = {1000.0f, 1000.0f, 1000.0f, 1000.0f};
  std::vector<float> out(4);
  ASSERT_TRUE(log_softmax(x, out).ok());
  for (float v : out) EXPECT_NEAR(v, -1.38629436, 1e-6);
}

TEST(LogSoftmax, RefusesMismatchedOrEmptyRows) {
  std::vector<float> out(2);
  const Status s = log_softmax(std::vector<float>{1.0f, 2.0f, 3.0f}, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "log_softmax: 3 logits into 2 outputs, expected equal non-zero sizes");
  EXPECT_EQ(log_softmax({}, {}).code(), StatusCode::kInvalidArgument);
}

TEST(KlDivergence, MatchesHandComputedValue) {
  // p = (1/2, 1/2), q = (1/4, 3/4): 1/2 ln 2 + 1/2 ln(2/3) = 0.5 ln(4/3) = 0.14384104.
  const std::vector<float> p = {std::log(0.5f), std::log(0.5f)};
  const std::vector<float> q = {std::log(0.25f), std::log(0.75f)};
  EXPECT_NEAR(kl_divergence(p, q), 0.14384104, 1e-6);
  // Reversed: 1/4 ln(1/2) + 3/4 ln(3/2) = 0.13081204 (KL is not symmetric).
  EXPECT_NEAR(kl_divergence(q, p), 0.13081204, 1e-6);
  EXPECT_EQ(kl_divergence(p, p), 0.0);
}

TEST(KlDivergence, ZeroMassTermsAddNothingAndMissingMassIsInfinite) {
  const float inf = std::numeric_limits<float>::infinity();
  // p = (1, 0), q = (1/2, 1/2): 1 * ln 2 = 0.69314718; p's zero term adds nothing.
  EXPECT_NEAR(kl_divergence(std::vector<float>{0.0f, -inf},
                            std::vector<float>{std::log(0.5f), std::log(0.5f)}),
              0.69314718, 1e-6);
  EXPECT_EQ(kl_divergence(std::vector<float>{std::log(0.5f), std::log(0.5f)},
                          std::vector<float>{0.0f, -inf}),
            inf);
}

TEST(ScoreWindow, ScoresTheSecondHalfWithTheReferenceDistributions) {
  TinySpec spec;
  const Model model = tiny_model(spec);
  CacheOptions o;
  o.capacity = 24;
  Built b = build(model, o);
  const std::vector<int32_t> window = some_tokens(24, spec.vocab);
  const std::vector<double> ref = reference_logits(model, window);
  std::vector<int64_t> seen;
  double worst = 0.0;
  auto check = [&](int64_t pos, std::span<const float> logp) {
    seen.push_back(pos);
    const std::vector<float> row(ref.begin() + (pos - 1) * spec.vocab,
                                 ref.begin() + pos * spec.vocab);
    std::vector<float> want(row.size());
    ASSERT_TRUE(log_softmax(row, want).ok());
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::abs(double{logp[i]} - want[i]));
  };
  ASSERT_EQ(b.setup.step_tokens, 8);  // the model's: chunks of 8 cross the halves (12)
  // Twice: the second run starts from the first's full sequence (score_window rewinds it).
  for (int run = 0; run < 2; ++run) {
    seen.clear();
    const Status s = score_window(*b.engine, b.seq, window, b.setup.step_tokens, 12, check);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(seen.size(), 12u);  // indices 12..23
    EXPECT_EQ(seen.front(), 12);
    EXPECT_EQ(seen.back(), 23);
  }
  EXPECT_LT(worst, 1e-4);  // f32 K/V and f32 weights against the double reference
}

TEST(ScoreWindow, RefusesAFirstIndexOutsideTheWindow) {
  TinySpec spec;
  const Model model = tiny_model(spec);
  CacheOptions o;
  o.capacity = 8;
  Built b = build(model, o);
  const std::vector<int32_t> window = some_tokens(8, spec.vocab);
  auto none = [](int64_t, std::span<const float>) {};
  const Status s = score_window(*b.engine, b.seq, window, 4, 8, none);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "score_window: first = 8 of a 8-token window, expected [1, 8)");
  EXPECT_EQ(score_window(*b.engine, b.seq, window, 4, 0, none).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcache::engine::testing
