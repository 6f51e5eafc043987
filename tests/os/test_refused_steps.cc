// Steps refused under NICMALLOC_ON_PIN_FAIL=fail because RLIMIT_MEMLOCK has no room to lock them
// (alloc/heap/steps.c, alloc/os/pin.c): nothing of them stays in memory.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

std::vector<std::string> env(const char *populate) {
  return {"NICMALLOC_CHUNK_SIZE=64M",      "NICMALLOC_PIN_STEP=4M",
          "NICMALLOC_PAGE_KIND=4k",        "NICMALLOC_ON_PIN_FAIL=fail",
          "NICMALLOC_RELEASE_DELAY_MS=50", std::string("NICMALLOC_DP_POPULATE=") + populate,
          "NICMALLOC_BACKEND=sim"};
}

ProbeResult run_refused(const char *populate) {
  auto r = run_probe(env(populate), {});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return r;
}

// A step refused the lock was faulted in whole first (NICMALLOC_DP_POPULATE=commit) and kept its
// pages: 4 MiB per step, in no statistic, for the process's lifetime (the reaper looks at backed
// steps only). The lock is now asked for before any page comes in. Before, the steps mimalloc
// was refused were in memory beside the two backed ones (requested_resident 16 MiB against
// requested_backed 8 MiB), and stayed once every block was freed (freed_resident 8 MiB with
// freed_backed 0).
void expect_nothing_resident_outside_backed_steps(const ProbeResult &r) {
  if (r.num("setup_failed") == 1) GTEST_SKIP() << "RLIMIT_MEMLOCK cannot be lowered here";
  ASSERT_GE(r.num("got"), 1) << r.out << r.err;
  ASSERT_GE(r.num("refused"), 1) << "the lock limit refused nothing: " << r.out;
  EXPECT_LE(r.num("requested_resident"), r.num("requested_backed")) << r.out;
  ASSERT_EQ(r.num("freed_backed"), 0) << "the reaper kept steps: " << r.out;
  EXPECT_EQ(r.num("freed_resident"), 0) << r.out;
}

TEST(RefusedSteps, AStepRefusedTheLockKeepsNoPagesWhenFaultedInAtCommit) {
  expect_nothing_resident_outside_backed_steps(run_refused("commit"));
}

// Locked as touched (the default): nothing was faulted in for a refused step before either.
TEST(RefusedSteps, AStepRefusedTheLockKeepsNoPagesWhenLockedAsTouched) {
  expect_nothing_resident_outside_backed_steps(run_refused("register"));
}

} // namespace
