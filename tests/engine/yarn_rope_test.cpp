// YaRN RoPE scaling: the pair divisors and the magnitude factor at gpt-oss's settings, derived
// by hand from the published definition (yarn_rope.h); the end-to-end check against the Python
// reference is tests/engine/arch_golden.sh llama-yarn.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/yarn_rope.h"

namespace kvcache::engine {
namespace {

// rope_dim 16, base 150000, factor 32, original context 4096, beta 32 / 1:
// corr(32) = 16 ln(4096 / 64π) / (2 ln 150000) = 2.02 -> low 2;
// corr(1) = 16 ln(4096 / 2π) / (2 ln 150000) = 4.35 -> high 5.
// Pairs 0..2 keep their frequency (divisor 1), pair 3 ramps 1/3 of the way (divisor
// 1 / (2/3 + 1/96)), pair 4 2/3 (1 / (1/3 + 2/96)), pairs 5..7 are interpolated (32).
TEST(YarnRope, DivisorsRampBetweenTheCorrectionDimsOfBetaFastAndBetaSlow) {
  HParams hp;
  hp.rope_dim = 16;
  hp.rope_base = 150000.0f;
  hp.rope_yarn_factor = 32.0f;
  hp.rope_yarn_orig_ctx = 4096;
  const std::vector<float> got = yarn_divisors(hp);
  const std::vector<double> want = {1, 1, 1, 1.0 / (2.0 / 3 + 1.0 / 96), 1.0 / (1.0 / 3 + 2.0 / 96),
                                    32, 32, 32};
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(got[j], want[j], 1e-5 * want[j]) << j;
  // A narrower ramp (beta_fast 4): corr(4) = 16 ln(4096 / 8π) / (2 ln 150000) = 3.42 -> low 3.
  hp.rope_yarn_beta_fast = 4.0f;
  EXPECT_NEAR(yarn_divisors(hp)[3], 1.0f, 1e-6);
  EXPECT_NEAR(yarn_divisors(hp)[4], 1.0 / (0.5 + 0.5 / 32), 1e-5);
}

TEST(YarnRope, MagnitudeFactorIsOneTenthLnFactorPlusOneAboveOne) {
  EXPECT_NEAR(yarn_attn_factor(32.0f), 0.1 * std::log(32.0) + 1.0, 1e-6);  // 1.3466
  EXPECT_EQ(yarn_attn_factor(1.0f), 1.0f);
  EXPECT_EQ(yarn_attn_factor(0.5f), 1.0f);
  std::vector<float> x = {1, 2, 3, 4, 5, 6};  // 2 rows of 3, the first 2 rotated
  scale_rotated(x, 2, 3, 2, 2.0f);
  EXPECT_EQ(x, (std::vector<float>{2, 4, 3, 8, 10, 6}));
}

}  // namespace
}  // namespace kvcache::engine
