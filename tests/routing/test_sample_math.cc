// The sampler's math without libm (alloc/routing/sample_math.h), checked against the C++
// library's over the ranges the sampler feeds it, and the mean of the intervals it draws.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

extern "C" {
#include "sample_math.h"
}

TEST(SampleMath, MatchesTheLibraryLogOverTheUnitInterval) {
  double worst = 0;
  for (double u = 0x1.0p-54; u < 1.0; u *= 1.0009765625) {
    const double want = -std::log(u), got = nic_neg_log_unit(u);
    const double err = std::fabs(got - want) / (want > 1e-3 ? want : 1e-3);
    if (err > worst) worst = err;
  }
  for (double u : {0.5, 0.7071067811865476, 0.7071067811865475, 0.999999, 1.0 - 0x1.0p-53}) {
    const double want = -std::log(u);
    EXPECT_NEAR(nic_neg_log_unit(u), want, 1e-12 + 1e-8 * want) << u;
  }
  EXPECT_LT(worst, 1e-8);
}

TEST(SampleMath, IntervalsDrawnFromUniformsHaveTheExponentialsMean) {
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  double sum = 0, sum_sq = 0;
  const int n = 1000000;
  for (int i = 0; i < n; i++) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    const double x = nic_neg_log_unit(((double)(rng >> 11) + 0.5) * 0x1.0p-53);
    sum += x;
    sum_sq += x * x;
  }
  // Exponential(1): mean 1, variance 1; a million draws put the mean within 0.005 (5 sigma).
  EXPECT_NEAR(sum / n, 1.0, 0.005);
  EXPECT_NEAR(sum_sq / n - (sum / n) * (sum / n), 1.0, 0.02);
}

TEST(SampleMath, SampledFractionMatchesTheLibraryOverBlockSizes) {
  double worst = 0;
  for (double x = 1e-9; x < 800; x *= 1.001) {
    const double want = -std::expm1(-x), got = nic_one_minus_exp_neg(x);
    const double err = std::fabs(got - want) / want;
    if (err > worst) worst = err;
  }
  EXPECT_LT(worst, 1e-8);
  EXPECT_EQ(nic_one_minus_exp_neg(0.0), 0.0);
  EXPECT_EQ(nic_one_minus_exp_neg(1e6), 1.0);
}
