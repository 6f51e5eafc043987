// Steps refused under NICMALLOC_ON_PIN_FAIL=fail because RLIMIT_MEMLOCK has no room to lock them
// (alloc/heap/steps.c, alloc/os/pin.c): nothing of them stays in memory.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

std::vector<std::string> env(const char *populate, const char *page_kind) {
  return {"NICMALLOC_CHUNK_SIZE=64M",
          "NICMALLOC_PIN_STEP=4M",
          std::string("NICMALLOC_PAGE_KIND=") + page_kind,
          "NICMALLOC_ON_PIN_FAIL=fail",
          "NICMALLOC_RELEASE_DELAY_MS=50",
          std::string("NICMALLOC_DP_POPULATE=") + populate,
          "NICMALLOC_BACKEND=sim"};
}

ProbeResult run_refused(const char *populate, const char *page_kind = "4k",
                        std::vector<std::string> args = {}) {
  auto r = run_probe(env(populate, page_kind), args);
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

// pin_failures counts the steps that could not be locked, and page_fallbacks the steps backed
// with smaller pages than wanted: a refused step is counted once in the first and not at all in
// the second (it is not backed), however often mimalloc asks for it again. Before, each refused
// request counted every step its commits tried again: ten more refused requests took
// pin_failures from 34 to 114 and page_fallbacks from 36 to 116 (2 steps backed).
TEST(RefusedSteps, ARefusedStepIsCountedOnceHoweverOftenItIsAskedFor) {
  for (const char *populate : {"commit", "register"}) {
    SCOPED_TRACE(populate);
    auto r = run_refused(populate, "2m", {"again"});
    if (r.num("setup_failed") == 1) GTEST_SKIP() << "RLIMIT_MEMLOCK cannot be lowered here";
    ASSERT_GE(r.num("refused"), 1) << "the lock limit refused nothing: " << r.out;
    ASSERT_EQ(r.num("again_got"), 0) << r.out;
    EXPECT_GE(r.num("requested_pin_failures"), 1) << r.out;
    EXPECT_EQ(r.num("again_pin_failures"), r.num("requested_pin_failures")) << r.out;
    EXPECT_LE(r.num("requested_page_fallbacks"), r.num("requested_steps_backed")) << r.out;
    EXPECT_EQ(r.num("again_page_fallbacks"), r.num("requested_page_fallbacks")) << r.out;
  }
}

// A chunk whose first step is refused the lock is tried again a second later, as that step: it
// is the same refused step, counted once in pin_failures, and a pin failure, not a chunk the
// kernel would not map (chunk_refusals). Before, every retry counted the step again (pin_failures
// 3 then 4 over 2.5 s of requests, 2 steps backed) and the chunk in chunk_refusals (1 then 2).
TEST(RefusedSteps, AChunkRefusedForItsStepsLockIsAPinFailureCountedOnce) {
  auto r = run_refused("register", "4k", {"retry"});
  if (r.num("setup_failed") == 1) GTEST_SKIP() << "RLIMIT_MEMLOCK cannot be lowered here";
  ASSERT_GE(r.num("refused"), 1) << "the lock limit refused nothing: " << r.out;
  ASSERT_EQ(r.num("retry_got"), 0) << r.out;
  EXPECT_GE(r.num("requested_pin_failures"), 1) << r.out;
  EXPECT_EQ(r.num("retry_pin_failures"), r.num("requested_pin_failures")) << r.out;
  EXPECT_EQ(r.num("requested_chunk_refusals"), 0) << r.out;
  EXPECT_EQ(r.num("retry_chunk_refusals"), 0) << r.out;
}

} // namespace
