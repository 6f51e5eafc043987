// Memory goes back to the OS: chunks that empty are unpinned and released after the delay, and
// free space inside live chunks is reported.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

const std::vector<std::string> kEnv = {"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_MAX_CHUNKS=32",
                                       "NICMALLOC_RELEASE_DELAY_MS=50"};
const std::string kOneGiB = "1073741824";

TEST(Release, FreeingTheOldestNinetyPercentReleasesChunks) {
  auto r = run_probe(kEnv, {"fifo", kOneGiB});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(r.num("full_live"), 1ll << 30);
  EXPECT_GE(r.num("full_pinned"), r.num("full_live"));
  EXPECT_GE(r.num("after_released"), r.num("full_chunks") / 2) << r.out;
  // About a tenth stays live: pinned memory falls to well under half of what it was.
  EXPECT_LT(r.num("after_pinned"), r.num("full_pinned") / 2) << r.out;
  EXPECT_LE(r.num("after_live"), r.num("full_live") / 9);
  EXPECT_EQ(r.num("corrupt"), 0);
  // Released slots are mapped again for new objects.
  EXPECT_GT(r.num("refill_pinned"), r.num("after_pinned"));
  EXPECT_LE(r.num("refill_chunks"), 32);
}

// Frees 90% of 1 GiB and goes on with dataplane traffic: the reaper releases the emptied chunks.
void ExpectTrafficReleases(const std::string &mode) {
  auto r = run_probe(kEnv, {mode, kOneGiB});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_GE(r.num("after_released"), r.num("full_chunks") / 2) << r.out;
  EXPECT_LT(r.num("after_pinned"), r.num("full_pinned") / 2) << r.out;
  EXPECT_EQ(r.num("corrupt"), 0);
}

TEST(Release, TheReaperAndLaterTrafficReleaseWithoutNicCollect) {
  ExpectTrafficReleases("poke");
}

// A fork child's reaper thread is not the parent's: the fork left it behind. The child that
// frees what it inherited and goes on with dataplane traffic gets its chunks released too.
// Before, nothing in the child started the reaper again while its inline path served it.
TEST(Release, AForkChildReleasesWhatItFreed) {
  ExpectTrafficReleases("fork-poke");
}

// A free into a chunk that went back to the OS is reported from the chunk's state: the block's
// free key is never read, since its memory is gone.
TEST(Release, FreeIntoAReleasedChunkIsReportedWithoutReadingIt) {
  std::vector<std::string> env = kEnv;
  env.push_back("NICMALLOC_KEEP_CHUNKS=0");
  auto r = run_probe(env, {"stale", kOneGiB});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("after_released"), 1) << r.out;
  ASSERT_EQ(r.num("after_draining"), 0) << r.out; // so a chunk that is not live is unmapped
  EXPECT_EQ(r.num("stale_free_survived"), 1) << r.out;
  EXPECT_EQ(r.num("stale_later_unit_free_survived"), 1) << r.out; // 64 MiB chunks: two units
  EXPECT_EQ(count_lines(r.err, "not allocated by nicmalloc"), 2) << r.err;
}

// Small chunks released at once, none kept in reserve: a released chunk is gone for good.
const std::vector<std::string> kReleaseAtOnce = {
    "NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_RELEASE_DELAY_MS=20", "NICMALLOC_KEEP_CHUNKS=0"};

// A thread's next allocation after the chunk it last allocated from went back to the OS lands
// in a live chunk, even when a free elsewhere has brought it up to date with the chunk states.
TEST(Release, AllocationAfterTheCursorChunkIsReleasedLandsInALiveChunk) {
  auto r = run_probe(kReleaseAtOnce, {"cursor", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("emptied_released"), 1) << r.out;
  EXPECT_EQ(r.num("small_dataplane"), 1) << r.out;
  EXPECT_EQ(r.num("small_translated"), 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc: error"), 0) << r.err;
  EXPECT_EQ(r.num("end_live"), 0) << r.out;
}

// A draining chunk is still mapped, pinned and registered, so it translates until released. The
// release waits a second, not 20 ms: the probe looks for the draining chunk every 20 ms, and on
// a loaded machine (a CI run beside other builds) a 20 ms window was missed.
TEST(Release, ADrainingChunkTranslatesUntilReleased) {
  auto r = run_probe(
      {"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_RELEASE_DELAY_MS=1000", "NICMALLOC_KEEP_CHUNKS=0"},
      {"draining", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("draining"), 1) << r.out;
  EXPECT_EQ(r.num("draining_translated"), 1) << r.out;
  ASSERT_GE(r.num("end_released"), 1) << r.out; // and the chunk the thread came back to
  EXPECT_EQ(r.num("released_translated"), 0) << r.out;
}

TEST(Release, ScatteredFreesKeepChunksButReportTheFreeSpace) {
  auto r = run_probe(kEnv, {"random", kOneGiB});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Every chunk keeps live objects, so no chunk is released, and the stats say how much of the
  // pinned memory is free. Only free pages inside steps may leave (alloc/heap/step_pages.h).
  EXPECT_EQ(r.num("after_released"), 0);
  EXPECT_EQ(r.num("after_backed") + r.num("after_dropped"), r.num("full_backed")) << r.out;
  EXPECT_LE(r.num("after_pinned"), r.num("after_backed")) << r.out;
  EXPECT_LE(r.num("after_live"), r.num("full_live") / 9);
  EXPECT_GE(r.num("after_mapped") - r.num("after_live"), r.num("after_mapped") * 8 / 10);
}

} // namespace
