// Threads that meet the allocator at awkward moments, each in a fresh process
// (tests/thread_edges_probe.c) with 32 MiB chunks so that new chunks are mapped often.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

ProbeResult run_edges(const std::vector<std::string> &args) {
  return run_program(NIC_EDGES_PROBE_PATH, {"NICMALLOC_CHUNK_SIZE=32M"}, args);
}

// A thread cancelled while it maps a chunk must not take the chunk lock with it: glibc's open,
// read and write act on a pending cancel, and the next thread to map a chunk waited forever.
TEST(ThreadEdges, PendingCancelInsideMallocLeavesNoLockHeld) {
  ProbeResult r = run_edges({"cancel-pending"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("victim_cancelled"), 1);
  EXPECT_EQ(r.num("victim_blocks"), 48);
  EXPECT_EQ(r.num("main_blocks"), 96);
  EXPECT_GE(r.num("chunks_created"), 3);
}

} // namespace
