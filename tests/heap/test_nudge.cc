// Freed dataplane spans that mimalloc 2.0.9 only marked for decommit, and free 4 KiB pages inside
// pages in use, go back without nic_collect or malloc_trim, once the reaper nudges the thread
// that owns them (alloc/heap/nudge.h).
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

// A short purge delay so that the nudge comes within the probe's bounded wait; mimalloc's own
// decommit delay stays at its default, so that it only marks the spans. The release delay keeps
// the reaper from giving back whole steps, which is not what is tested here.
std::vector<std::string> env() {
  return {"NICMALLOC_CHUNK_SIZE=64M",    "NICMALLOC_PIN_STEP=32M",
          "NICMALLOC_PAGE_KIND=4k",      "NICMALLOC_RELEASE_DELAY_MS=3600000",
          "NICMALLOC_PURGE_DELAY_MS=50", "NICMALLOC_BACKEND=sim"};
}
const long long kMiB = 1 << 20;

TEST(Nudge, FreedSpansGoBackWhileTheThreadOnlyAllocatesControlBlocks) {
  auto r = run_probe(env(), {});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LE(r.num("shrunk_pinned"), r.num("full_pinned") - 12 * kMiB) << r.out;
  EXPECT_GE(r.num("nudges"), 1) << r.out;
  EXPECT_GE(r.num("nudge_answers"), 1) << r.out;
  EXPECT_GE(r.num("nudged_bytes"), 12 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
  EXPECT_GE(r.num("again_pinned"), r.num("shrunk_pinned") + 15 * kMiB) << r.out;
}

// A chunk already nudged is nudged again once more was freed there.
TEST(Nudge, ASecondShrinkIsNudgedToo) {
  auto r = run_probe(env(), {"twice"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LE(r.num("half_pinned"), r.num("full_pinned") - 6 * kMiB) << r.out;
  EXPECT_LE(r.num("shrunk_pinned"), r.num("full_pinned") - 12 * kMiB) << r.out;
  EXPECT_GE(r.num("nudges"), 2) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// After a shrink at random every mimalloc page keeps live blocks: nothing is marked, and only
// the free 4 KiB pages inside pages in use can go. The nudge's answer gives them back as
// nic_collect does, so a program that never calls it (run unmodified) gets them back too; before,
// the 8 MiB of blocks stayed pinned.
TEST(Nudge, FreePagesInsidePagesInUseGoBackWithoutNicCollect) {
  auto r = run_probe(env(), {"scattered"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_LE(r.num("shrunk_pinned"), r.num("full_pinned") - 4 * kMiB) << r.out;
  EXPECT_GE(r.num("nudge_answers"), 1) << r.out;
  EXPECT_GE(r.num("nudged_bytes"), 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

} // namespace
