// Dataplane blocks whose thread has exited: mimalloc keeps such a thread's segments on its
// abandoned list. Freed, they must let their chunks go back to the OS; still live, they must
// never be taken into an ordinary heap (malloc_trim on the main thread used to do that).
// Control segments of exited threads that a dataplane heap visits (mimalloc keeps one abandoned
// list for every arena) keep their free pages for the purge delay, for the control heap that
// takes them next (mstress under NICMALLOC_DP_MIN_SIZE=4096 faulted three times as often as
// under mimalloc alone).
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

const std::vector<std::string> kEnv = {"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_RELEASE_DELAY_MS=0",
                                       "NICMALLOC_KEEP_CHUNKS=0"};

TEST(AbandonedSegments, ChunksOfExitedThreadsAreReleasedOnceTheirBlocksAreFreed) {
  auto r = run_program(ABANDONED_PROBE_PATH, kEnv, {"freed-after-exit"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("before_live"), 2) << r.out; // the blocks took several chunks
  EXPECT_EQ(r.num("after_dataplane_live"), 0) << r.out;
  EXPECT_EQ(r.num("after_live"), 0) << r.out;
  EXPECT_GE(r.num("after_released"), r.num("before_live")) << r.out;
}

TEST(AbandonedSegments, MallocTrimNeverHandsChunkMemoryToPlainMalloc) {
  auto r = run_program(ABANDONED_PROBE_PATH, kEnv, {"trim-after-exit"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("plain_from_dataplane"), 0) << r.out;
  EXPECT_EQ(r.num("end_dataplane_live"), 0) << r.out;
  EXPECT_EQ(count_lines(r.err, "nicmalloc: error"), 0) << r.err;
}

// A visit moves the blocks other threads freed off a page's thread-free list before it lowers
// the page's count of blocks in use; a read in between took them for live (in about one run in
// sixteen of the test above, with the reaper's visit).
TEST(AbandonedSegments, LiveBytesReadWhileNicmallocVisitsAreExact) {
  auto r = run_program(ABANDONED_PROBE_PATH, kEnv, {"reads-during-visits"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GT(r.num("rounds"), 0) << r.out;
  EXPECT_EQ(r.num("misread_rounds"), 0) << r.out;
  EXPECT_EQ(r.num("worst_live"), 0) << r.out;
}

// Only the visit's decommit waits: the purge delay is long, so that mimalloc's own delayed
// decommits cannot explain what stays.
const std::vector<std::string> kVisitEnv = {"NICMALLOC_PURGE_DELAY_MS=600000"};

TEST(AbandonedSegments, ADataplaneHeapsVisitLeavesControlPagesInPlace) {
  auto r = run_program(ABANDONED_PROBE_PATH, kVisitEnv, {"visited"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("before_resident"), 4) << r.out;
  ASSERT_EQ(r.num("newcomer_dataplane"), 1) << r.out;
  EXPECT_EQ(r.num("after_visit_resident"), 4) << r.out;
  EXPECT_GT(r.num("waited"), 0) << r.out;
  EXPECT_EQ(r.num("late"), 0) << r.out;
}

TEST(AbandonedSegments, VisitedControlPagesGoBackAfterThePurgeDelay) {
  auto r = run_program(ABANDONED_PROBE_PATH, {"NICMALLOC_PURGE_DELAY_MS=100"}, {"visited-late"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("before_resident"), 4) << r.out;
  EXPECT_GT(r.num("waited"), 0) << r.out;
  EXPECT_EQ(r.num("late"), r.num("waited")) << r.out;
  EXPECT_LT(r.num("late_resident"), r.num("before_resident")) << r.out;
}

TEST(AbandonedSegments, VisitedControlPagesReusedAreNeverDroppedLate) {
  auto r = run_program(ABANDONED_PROBE_PATH, kVisitEnv, {"visited-reuse"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("reuser_ok"), 1) << r.out;
  ASSERT_GT(r.num("reused_before_collect"), 0) << r.out; // its blocks are on waiting pages
  EXPECT_EQ(r.num("reused_bytes_changed"), 0) << r.out;
}

// Only mimalloc's decommits made during a dataplane allocation wait: the program's own
// MADV_DONTNEED of a page of its live block in an abandoned segment zeroes the page at once.
TEST(AbandonedSegments, AProgramsOwnDropInAnAbandonedSegmentIsMadeAtOnce) {
  auto r = run_program(ABANDONED_PROBE_PATH, kVisitEnv, {"visited-app-drop"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("newcomer_dataplane"), 1) << r.out;
  EXPECT_EQ(r.num("app_drop_bytes_kept"), 0) << r.out;
}

} // namespace
