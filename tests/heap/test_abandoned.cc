// Dataplane blocks whose thread has exited: mimalloc keeps such a thread's segments on its
// abandoned list. Freed, they must let their chunks go back to the OS; still live, they must
// never be taken into an ordinary heap (malloc_trim on the main thread used to do that).
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

} // namespace
