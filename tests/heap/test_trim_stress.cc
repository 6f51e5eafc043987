// malloc_trim's pages given back inside control pages in use (alloc/heap/control_sub_pages.h),
// and the other threads' answers (alloc/heap/nudge.h), under threads that allocate, hand over
// and free blocks of every size the whole time: no block handed out twice, no memory given back
// under a live block, no free taken for a double or invalid one (tests/heap/trim_stress_probe.c).
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

void expect_nothing_lost(const ProbeResult &r) {
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("mismatches"), 0) << r.out;
  EXPECT_EQ(r.num("double_frees"), 0) << r.out << r.err;
  EXPECT_EQ(r.num("invalid_frees"), 0) << r.out << r.err;
  // Bounds that only a broken run misses: the load and the trims both happened.
  EXPECT_GE(r.num("ops"), 100000) << r.out;
  EXPECT_GE(r.num("trims"), 100) << r.out;
  EXPECT_GE(r.num("handed"), 10000) << r.out;
}

TEST(TrimStress, TrimsAmongThreadsThatAllocateHandOverAndFreeLoseNothing) {
  expect_nothing_lost(run_probe({"NICMALLOC_CHUNK_SIZE=64M"}, {"3", "4"}));
}

// The same blocks from the dataplane: malloc_trim's nic_collect gives back the calling thread's
// free pages inside dataplane pages in use, and a short purge delay has the reaper's nudge ask
// every thread for theirs (alloc/heap/sub_pages.h) while they go on.
TEST(TrimStress, DataplanePagesGivenBackAmongThreadsThatAllocateHandOverAndFreeLoseNothing) {
  expect_nothing_lost(run_probe({"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_DP_MIN_SIZE=16",
                                 "NICMALLOC_PURGE_DELAY_MS=20", "NICMALLOC_BACKEND=sim"},
                                {"3", "4"}));
}

} // namespace
