// Pages inside a step that stays in use go back to the OS once mimalloc decommits them, unless a
// registration of the step holds page references (alloc/heap/step_pages.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "double_free_checks.h"
#include "probe_runner.h"

namespace {

// 4 KiB pages unless said. mimalloc decommits freed spans at once; the release
// delay keeps the reaper from giving back whole steps, which is not what is tested here.
std::vector<std::string> env(const char *backend, const char *kind = "4k") {
  return {"NICMALLOC_CHUNK_SIZE=64M",
          "NICMALLOC_PIN_STEP=32M",
          std::string("NICMALLOC_PAGE_KIND=") + kind,
          "NICMALLOC_RELEASE_DELAY_MS=3600000",
          "MIMALLOC_DECOMMIT_DELAY=0",
          std::string("NICMALLOC_BACKEND=") + backend};
}
const long long kMiB = 1 << 20;

TEST(StepPages, FreedSpansInsideALiveStepLeaveThePinnedSetAndComeBack) {
  auto r = run_probe(env("sim"), {"free"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out; // the sim's registration lets pages go
  // Fifteen 1 MiB blocks freed: most of their 15 MiB leaves, from the count and from memory.
  EXPECT_LE(r.num("freed_pinned"), r.num("full_pinned") - 12 * kMiB) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 12 * 1024) << r.out;
  EXPECT_EQ(r.num("freed_dropped"), r.num("full_pinned") - r.num("freed_pinned")) << r.out;
  // Allocated and written again: the pages are back, pinned, and every byte reads back (the
  // rest of the segment, committed eagerly and never used, need not come back).
  EXPECT_GE(r.num("again_pinned"), r.num("freed_pinned") + 15 * kMiB) << r.out;
  EXPECT_GE(r.num("again_rss_anon_kb"), r.num("freed_rss_anon_kb") + 15 * 1024) << r.out;
  EXPECT_LE(r.num("again_dropped"), r.num("freed_dropped") - 15 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  // The step's registration, made before its pages left, still carries what is there now.
  EXPECT_EQ(r.num("sent_intact"), 1) << r.out;
}

// With steps smaller than the blocks freed, the spans given back run across step boundaries and
// go in one call per run: each step still counts what it gave back.
TEST(StepPages, SpansGivenBackAcrossStepsAreCountedInEachStep) {
  auto e = env("sim");
  std::replace(e.begin(), e.end(), std::string("NICMALLOC_PIN_STEP=32M"),
               std::string("NICMALLOC_PIN_STEP=2M"));
  auto r = run_probe(e, {"free"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  EXPECT_LE(r.num("freed_pinned"), r.num("full_pinned") - 12 * kMiB) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 12 * 1024) << r.out;
  // Dropped counts committed slices, some of which (the steps' ends) were never touched.
  EXPECT_GE(r.num("freed_dropped"), r.num("full_pinned") - r.num("freed_pinned")) << r.out;
  EXPECT_LE(r.num("freed_dropped"), r.num("full_pinned") - r.num("freed_pinned") + 2 * kMiB)
      << r.out;
  EXPECT_GE(r.num("again_pinned"), r.num("freed_pinned") + 15 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  EXPECT_EQ(r.num("sent_intact"), 1) << r.out;
}

// A kernel that refuses the drop (MADV_DONTNEED_LOCKED is Linux 5.18): the pages stay, and so
// does the count of what is pinned; said once.
TEST(StepPages, ARefusedDropLeavesThePagesAndTheirCount) {
  auto e = env("sim");
  std::replace(e.begin(), e.end(), std::string("NICMALLOC_PIN_STEP=32M"),
               std::string("NICMALLOC_PIN_STEP=2M"));
  auto r = run_probe(e, {"no-drop", "free"});
  if (r.exit_code == 77) GTEST_SKIP() << "SKIPPED LOUDLY: the kernel refused a seccomp filter";
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("freed_dropped"), 0) << r.out;
  EXPECT_EQ(r.num("freed_pinned"), r.num("full_pinned")) << r.out;
  EXPECT_GE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 1024) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  EXPECT_EQ(count_lines(r.err, "cannot give back free pages inside dataplane steps"), 1) << r.err;
}

// mimalloc 2.0.9 only marks a freed span for decommit; it decommits it when the owning thread
// next takes a page from that segment, which after a shrink may be never (the purge delay here
// outlasts the test, as a shrink followed by no allocation there does). nic_collect decommits
// what it marked, and the pages come back when mimalloc reuses the span.
TEST(StepPages, NicCollectGivesBackWhatMimallocOnlyMarkedForDecommit) {
  auto e = env("sim");
  e.erase(std::remove(e.begin(), e.end(), std::string("MIMALLOC_DECOMMIT_DELAY=0")), e.end());
  e.push_back("NICMALLOC_PURGE_DELAY_MS=3600000");
  auto r = run_probe(e, {"free"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  EXPECT_LE(r.num("freed_pinned"), r.num("full_pinned") - 12 * kMiB) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 12 * 1024) << r.out;
  EXPECT_EQ(r.num("freed_dropped"), r.num("full_pinned") - r.num("freed_pinned")) << r.out;
  EXPECT_GE(r.num("again_pinned"), r.num("freed_pinned") + 15 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  EXPECT_EQ(r.num("sent_intact"), 1) << r.out;
}

// On transparent huge pages too, pages go back per 64 KiB slice: a freed span between live
// blocks covers no whole 2 MiB page, and a step given back only in whole huge pages returned
// nothing after a random shrink. Dropping part of a huge page splits it (the step is mapped with
// small pages there from then on); the pages leave the process's memory at once.
TEST(StepPages, FreedSpansBetweenLiveBlocksLeaveATransparentHugePageStep) {
  // Faulted in whole when backed: a step locked as it is touched (the default) is in 4 KiB pages
  // wherever the program touched it before its registration, and this is about huge pages.
  auto e = env("sim", "thp");
  e.push_back("NICMALLOC_DP_POPULATE=commit");
  auto r = run_probe(e, {"alternate"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  if (r.values.count("page_kind_thp") == 0)
    GTEST_SKIP() << "no transparent huge pages here: " << r.out;
  ASSERT_EQ(r.num("register_rc"), 0) << r.out;
  // The eight freed 1 MiB blocks lie between live ones: most of their pages leave memory (the
  // first and last slice of a block may share a 64 KiB slice with a live one) and the count.
  EXPECT_GE(r.num("freed_gone_kb"), 6 * 1024) << r.out;
  EXPECT_EQ(r.num("freed_dropped"), r.num("full_pinned") - r.num("freed_pinned")) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 6 * 1024) << r.out;
  // Written again: the pages come back into the count, every byte reads as written (the live
  // blocks' too), and so does what the sim NIC reads through the registration made before.
  EXPECT_LE(r.num("again_dropped"), r.num("freed_dropped") - 6 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  EXPECT_EQ(r.num("sent_intact"), 1) << r.out;
}

// free reads a freed block's free key to tell a double free: in a unit given back, the key went
// with the pages (it reads as zeros), and a double free taken for a first one corrupted
// mimalloc's count of blocks in use (the garbage dataplane_live of nic_api_fuzz). A block in a
// slice mimalloc does not hold committed is freed, whatever its bytes read.
TEST(StepPages, ADoubleFreeOfABlockWhosePagesWentBackIsReportedAndIgnored) {
  auto r = run_probe(env("sim"), {"double"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  ASSERT_GE(r.num("victim"), 1) << "no freed block's pages went back: " << r.out;
  expect_double_frees_reported_and_ignored(r, 3);
}

// The same for a step given back whole inside a live chunk: the reaper maps it afresh (zeros
// where the key was), so its freed blocks are told by their slices, not their bytes.
TEST(StepPages, ADoubleFreeIntoAStepGivenBackWholeIsReportedAndIgnored) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_PIN_STEP=2M", "NICMALLOC_PAGE_KIND=4k",
                      "NICMALLOC_RELEASE_DELAY_MS=20", "MIMALLOC_DECOMMIT_DELAY=0",
                      "NICMALLOC_BACKEND=sim"},
                     {"released"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_LE(r.num("steps_pinned"), r.num("live_steps")) << "steps not given back: " << r.out;
  ASSERT_GE(r.num("victim"), 1) << r.out;
  expect_double_frees_reported_and_ignored(r, 3);
}

// io_uring fixed buffers pin the pages they were given: a page dropped under one would leave
// the kernel sending from the old page. The registered step keeps every page.
TEST(StepPages, AStepRegisteredWithABackendThatHoldsPagesKeepsThemAll) {
  auto r = run_probe(env("uring"), {"held"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  if (r.num("register_rc") != 0) GTEST_SKIP() << "io_uring unavailable here: " << r.out;
  EXPECT_EQ(r.num("freed_pinned"), r.num("full_pinned")) << r.out;
  EXPECT_EQ(r.num("freed_dropped"), 0) << r.out;
  EXPECT_GE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 1024) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// DPDK with only virtual ports (nicmalloc's own EAL, IOVA-as-VA) records addresses, and its
// drivers read them through the CPU as they send: like the sim's, its registrations let free
// pages go (kept whole before, as io_uring's are), and a block written after its pages came
// back goes out as written (net_ring hands the sender's memory to its own receive queue).
TEST(StepPages, ADpdkStepOnVirtualPortsLetsItsFreePagesGo) {
  auto e = env("dpdk");
  e.push_back("NICMALLOC_DPDK_VDEV=net_ring0");
  auto r = run_probe(e, {"free"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  if (r.num("register_rc") != 0) GTEST_SKIP() << "DPDK does not open here: " << r.out << r.err;
  EXPECT_LE(r.num("freed_pinned"), r.num("full_pinned") - 12 * kMiB) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 12 * 1024) << r.out;
  EXPECT_GE(r.num("again_pinned"), r.num("freed_pinned") + 15 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  EXPECT_EQ(r.num("sent_intact"), 1) << r.out << r.err;
}

// A bonding port sits on DPDK's vdev bus but sends through member ports that may be NICs DMAing
// from the registered pages (net_null members here): the step keeps every page, as under
// io_uring. It let them go, as on net_ring.
TEST(StepPages, ADpdkStepWithABondingPortKeepsItsPages) {
  auto e = env("dpdk");
  e.push_back("NICMALLOC_DPDK_VDEV=net_null0;net_null1;net_bonding0,mode=0,slave=net_null0,slave="
              "net_null1");
  auto r = run_probe(e, {"held"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  if (r.num("register_rc") != 0) GTEST_SKIP() << "DPDK does not open here: " << r.out << r.err;
  EXPECT_EQ(r.num("freed_pinned"), r.num("full_pinned")) << r.out;
  EXPECT_EQ(r.num("freed_dropped"), 0) << r.out;
  EXPECT_GE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 1024) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// A hugetlb page given back must come from the pool again on the next touch, and a touch that
// finds the pool empty dies of SIGBUS (a fork child copying its chunks did): hugetlb steps keep
// their pages until the whole step goes.
TEST(StepPages, HugetlbStepsKeepTheirPages) {
  auto r = run_probe(env("sim", "2m"), {"free"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("one_step"), 1) << r.out;
  if (r.values.count("page_kind_2m") == 0)
    GTEST_SKIP() << "no 16 free 2 MiB hugetlb pages here (vm.nr_hugepages): " << r.out;
  EXPECT_EQ(r.num("freed_dropped"), 0) << r.out;
  EXPECT_EQ(r.num("freed_pinned"), r.num("full_pinned")) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

} // namespace
