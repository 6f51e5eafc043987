// A pin step's ordinary pages are locked as the program touches them, and the whole step is
// faulted in before its first registration (NICMALLOC_DP_POPULATE=register, the default); under
// NICMALLOC_DP_POPULATE=commit the whole step is faulted in and locked when mimalloc first
// commits there (alloc/os/pin.c, alloc/heap/steps.c).
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "probe_runner.h"
#include "vm_modes.h"

namespace {

const long long kMiB = 1 << 20;

std::vector<std::string> env(const char *populate, const char *kind) {
  return {"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_PIN_STEP=4M",
          std::string("NICMALLOC_PAGE_KIND=") + kind, "NICMALLOC_BACKEND=sim",
          std::string("NICMALLOC_DP_POPULATE=") + populate};
}

void expect_touched_pages_only(const char *kind) {
  auto r = run_probe(env("register", kind), {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("step_len"), 4 * kMiB) << r.out;
  // The 64 KiB written and mimalloc's segment and page headers: far from the 4 MiB step.
  EXPECT_GE(r.num("touched_resident"), 64 * 1024) << r.out;
  EXPECT_LE(r.num("touched_resident"), 1 * kMiB) << r.out;
  // What is there is locked, and the stats count that, not the step.
  EXPECT_GE(r.num("touched_locked_kb"), 64) << r.out;
  EXPECT_LE(r.num("touched_locked_kb") * 1024, r.num("touched_resident")) << r.out;
  EXPECT_GE(r.num("touched_pinned"), 64 * 1024) << r.out;
  EXPECT_LE(r.num("touched_pinned"), 1 * kMiB) << r.out;
  // Registered: the whole step is in memory and locked before the NIC is given it.
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  EXPECT_EQ(r.num("registered_resident"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("registered_locked_kb"), 4 * 1024) << r.out;
  EXPECT_GE(r.num("registered_pinned"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  // Whatever the system's THP mode ("always" faults in 2 MiB on a first touch), the step is
  // advised small until it is faulted in whole; then huge where huge pages are wanted.
  const std::string mode = nic_thp_mode();
  if (mode.empty()) return; // a kernel without THP: no advice to give
  EXPECT_EQ(r.values["touched_advice"], "small") << "THP mode " << mode << "\n" << r.out;
  const bool huge_wanted = std::string(kind) == "thp" && mode != "never";
  EXPECT_EQ(r.values["registered_advice"], huge_wanted ? "huge" : "small") << r.out;
}

TEST(LazySteps, AStepHoldsOnlyTheTouchedPagesUntilItIsRegistered) {
  expect_touched_pages_only("4k");
}

// Where transparent huge pages are asked for, a first touch must not fault in 2 MiB either.
TEST(LazySteps, AStepOfTransparentHugePagesHoldsOnlyTheTouchedPagesToo) {
  expect_touched_pages_only("thp");
}

TEST(LazySteps, PopulateAtCommitFaultsInTheWholeStepAtOnce) {
  auto r = run_probe(env("commit", "4k"), {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("touched_resident"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("touched_locked_kb"), 4 * 1024) << r.out;
  EXPECT_GE(r.num("touched_pinned"), 4 * kMiB) << r.out;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  EXPECT_EQ(r.num("registered_resident"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// Where the kernel has no MLOCK_ONFAULT (before 4.4: mlock2 fails with EINVAL), a step is
// faulted in whole and locked when it is backed, as under NICMALLOC_DP_POPULATE=commit.
TEST(LazySteps, WithoutLockOnFaultAStepIsFaultedInAndLockedWhole) {
  auto r = run_probe(env("register", "4k"), {"no-onfault"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("mlock2_errno"), EINVAL) << r.out; // the filter is in place
  EXPECT_EQ(r.num("touched_resident"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("touched_locked_kb"), 4 * 1024) << r.out;
  EXPECT_GE(r.num("touched_pinned"), 4 * kMiB) << r.out;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  EXPECT_EQ(r.num("registered_resident"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("registered_locked_kb"), 4 * 1024) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// A step locked as touched that a stats read found wholly in memory is not asked of the kernel
// again, until pages leave it: a block freed inside it gives its pages back (the release delay
// keeps the step itself), and the next read counts what stays, as the kernel does.
TEST(LazySteps, PinnedCountStaysExactAfterPagesLeaveAStepFoundWhole) {
  auto e = env("register", "4k");
  e.push_back("NICMALLOC_RELEASE_DELAY_MS=3600000");
  e.push_back("MIMALLOC_DECOMMIT_DELAY=0");
  auto r = run_probe(e, {"whole"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("victim"), 0) << r.out;
  ASSERT_GT(r.num("whole_locked"), 0) << r.out;
  EXPECT_EQ(r.num("whole_pinned"), r.num("whole_locked")) << r.out;
  EXPECT_EQ(r.num("whole_again_pinned"), r.num("whole_again_locked")) << r.out;
  // Most of the freed 1 MiB block left memory (its first slice may hold mimalloc's free list).
  ASSERT_LE(r.num("victim_resident"), 128 * 1024) << r.out;
  EXPECT_LE(r.num("freed_locked"), r.num("whole_locked") - 768 * 1024) << r.out;
  EXPECT_EQ(r.num("freed_pinned"), r.num("freed_locked")) << r.out;
}

// A step's first registration faults it in: where the program made part of it read-only, that
// is an error for the call, never a fault inside nicmalloc nor a write to the blocks already
// there (kernels before 5.14 had every page's first byte overwritten with 0).
void expect_read_only_part_refused(std::vector<std::string> args) {
  auto r = run_probe(env("register", "4k"), args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("add_rc"), -EFAULT) << r.out;
  EXPECT_EQ(r.num("x_intact"), 1) << r.out;
  EXPECT_EQ(r.num("writable_add_rc"), 0) << r.out;
}

TEST(LazySteps, AStepPartlyReadOnlyIsRefusedWithItsBlocksKept) {
  expect_read_only_part_refused({"read-only"});
}

TEST(LazySteps, AStepPartlyReadOnlyIsRefusedWithoutPopulateWriteToo) {
  expect_read_only_part_refused({"old-populate", "read-only"});
}

// Without MADV_POPULATE_WRITE the pages are touched one by one, and keep what they hold.
TEST(LazySteps, WithoutPopulateWriteTheTouchedStepKeepsItsBytes) {
  auto r = run_probe(env("register", "4k"), {"old-populate"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  EXPECT_EQ(r.num("registered_resident"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

} // namespace
