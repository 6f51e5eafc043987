/* The two functions the byte sampler needs (profile.c), without libm: linking libm for them
 * mapped about 300 KiB of it into every process (the dynamic linker touches its tables), while a
 * sampling interval or a sample's weight needs a few significant digits only. Both are within
 * 1e-8 relative of the C library's (tests/routing/test_sample_math.cc). */
#ifndef NIC_SAMPLE_MATH_H
#define NIC_SAMPLE_MATH_H

#include <stdint.h>
#include <string.h>

/* -ln(u) for u in (0, 1): u = m * 2^e with m in [sqrt(1/2), sqrt(2)), then ln(m) = 2 atanh(s),
 * s = (m - 1) / (m + 1), |s| < 0.172: the series to s^11 is within 2e-9 of it. */
static inline double nic_neg_log_unit(double u) {
  uint64_t bits;
  memcpy(&bits, &u, sizeof bits);
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((1ull << 52) - 1)) | (1023ull << 52); /* m in [1, 2) */
  double m;
  memcpy(&m, &bits, sizeof m);
  if (m > 1.4142135623730951) m *= 0.5, e++;
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  const double ln_m =
      2.0 * s * (1.0 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 / 11)))));
  return -((double)e * 0.6931471805599453 + ln_m);
}

/* 1 - e^-x for x >= 0 (a block of x means' bytes is sampled with this probability). Below 0.5
 * its own series, which keeps small x's digits that 1 - e^-x would cancel; above, e^-x as
 * 2^-k e^-r with r in [0, ln 2), whose Taylor series to r^15 is within 1e-13. */
static inline double nic_one_minus_exp_neg(double x) {
  if (x < 0.5) {
    double term = x, sum = x;
    for (int i = 2; i <= 14; i++) {
      term *= -x / i;
      sum += term;
    }
    return sum;
  }
  const double k = (double)(int64_t)(x * 1.4426950408889634);
  if (k >= 1000) return 1.0;
  const double r = x - k * 0.6931471805599453;
  double term = 1.0, e_r = 1.0;
  for (int i = 1; i <= 15; i++) {
    term *= -r / i;
    e_r += term;
  }
  const uint64_t scale_bits = (uint64_t)(1023 - (int64_t)k) << 52; /* 2^-k */
  double scale;
  memcpy(&scale, &scale_bits, sizeof scale);
  return 1.0 - e_r * scale;
}

#endif
