// What a probe's double-free scenario prints, checked alike by the suites that give pages back
// (step_pages, sub_pages).
#ifndef NIC_TESTS_DOUBLE_FREE_CHECKS_H
#define NIC_TESTS_DOUBLE_FREE_CHECKS_H

#include <gtest/gtest.h>

#include "probe_runner.h"

// The probe's victims were freed, then freed again (reported frees in all), one given to
// realloc and asked its size: each double free is counted, none reaches mimalloc (whose used
// count would go below the live blocks and show in the live bytes), realloc refuses it and its
// size reads 0.
inline void expect_double_frees_reported_and_ignored(const ProbeResult &r, long long reported) {
  EXPECT_EQ(r.num("after_double_frees"), r.num("before_double_frees") + reported) << r.out << r.err;
  EXPECT_EQ(r.num("realloc_null"), 1) << r.out;
  EXPECT_EQ(r.num("usable"), 0) << r.out;
  EXPECT_EQ(r.num("after_live"), r.num("before_live")) << r.out;
  EXPECT_EQ(r.num("end_live"), 0) << r.out;
}

#endif
