// A dataplane request that cannot be placed because memory was refused is said once, with the
// reason, and counted (alloc/core/alloc.c's report_once), even where nothing below said why.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

std::vector<std::string> env(const char *extra) {
  return {"NICMALLOC_CHUNK_SIZE=256M", "NICMALLOC_PIN_STEP=32M", "NICMALLOC_PAGE_KIND=4k",
          "NICMALLOC_BACKEND=sim", extra};
}

// Under NICMALLOC_ON_PIN_FAIL=fail the requests get ENOMEM and a warning says why, once.
TEST(MapRefused, OverAlignedRequestsWhoseTableCannotGrowAreRefusedWithAWarningOnce) {
  auto r = run_probe(env("NICMALLOC_ON_PIN_FAIL=fail"), {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("got"), 0) << r.out;
  EXPECT_EQ(r.num("enomem"), 1) << r.out;
  EXPECT_EQ(r.num("failures"), 3) << r.out;
  EXPECT_EQ(count_lines(r.err, "warning: a dataplane request of"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "table of over-aligned blocks"), 1) << r.err;
}

// Falling back (the default), it is said once under NICMALLOC_VERBOSE=1 and counted.
TEST(MapRefused, OverAlignedRequestsWhoseTableCannotGrowFallBackSaidOnceAndCounted) {
  auto r = run_probe(env("NICMALLOC_VERBOSE=1"), {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("fallbacks"), 3) << r.out;
  EXPECT_EQ(count_lines(r.err, "table of over-aligned blocks"), 1) << r.err;
}

} // namespace
