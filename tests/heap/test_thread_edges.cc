// Threads that meet the allocator at awkward moments, each in a fresh process
// (tests/heap/thread_edges_probe.c) with 32 MiB chunks so that new chunks are mapped often.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

ProbeResult run_edges(const std::vector<std::string> &args,
                      const std::vector<std::string> &env = {}) {
  std::vector<std::string> all = env;
  all.push_back("NICMALLOC_CHUNK_SIZE=32M");
  return run_program(NIC_EDGES_PROBE_PATH, all, args);
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

// The reaper waited for busy threads holding the thread-list lock. A busy thread waiting for the
// growth lock, held by fork's prepare handler waiting for the list lock, hung all three: within
// the first hundred forks here.
TEST(ThreadEdges, ForkWhileTheReaperReleasesChunks) {
  ProbeResult r = run_edges({"fork-while-reaping", "200"},
                            {"NICMALLOC_RELEASE_DELAY_MS=20", "NICMALLOC_KEEP_CHUNKS=0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("forks"), 200);
  EXPECT_EQ(r.num("bad_children"), 0);
  EXPECT_GT(r.num("chunks_released"), 0) << "the reaper never released a chunk: nothing tested";
}

// main() ends with pthread_exit: glibc ends the process with exit(0) when the last thread ends,
// but the reaper never ended, so the process never did (killed here by the probe's alarm).
TEST(ThreadEdges, ProcessEndsWithItsLastThreadAfterMainPthreadExit) {
  ProbeResult r = run_edges({"main-pthread-exit"}, {"NICMALLOC_RELEASE_DELAY_MS=20"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("worker_blocks"), 40);
}

// Making a user namespace, and joining a mount namespace, need the process to be one thread.
// unshare -U and container runtimes failed with EINVAL under NICMALLOC_DP_MIN_SIZE once the
// reaper had started: the call is now made again with the reaper stopped (alone_calls.c).
TEST(ThreadEdges, NamespaceChangesThatNeedOneThreadSucceedWhileTheReaperRuns) {
  ProbeResult r = run_edges({"namespaces"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.num("baseline") != 0)
    GTEST_SKIP() << "this machine refuses the calls to a one-thread process too (errno "
                 << r.num("baseline") << ": not root, or user namespaces are off)";
  EXPECT_EQ(r.num("dataplane_before"), 1);
  EXPECT_EQ(r.num("threads_before"), 2) << "the reaper was running";
  EXPECT_EQ(r.num("setns"), 0) << "joining the mount namespace: errno";
  EXPECT_EQ(r.num("unshare"), 0) << "making a user namespace: errno";
  EXPECT_EQ(r.num("threads_after"), 2) << "the reaper runs again";
  EXPECT_EQ(r.num("dataplane_after"), 1);
}

// A thread whose first allocation comes in glibc's last round of key destructors set itself up
// and armed nicmalloc's exit hook, a key of lower index than the program's, which glibc no longer
// visits in that round: the thread died on nicmalloc's thread list, its entry in its own TLS.
// malloc_trim then wrote through it into the unmapped stack (SIGSEGV), or, with glibc's cached
// stack given to the next thread, walked a list the new thread's zeroed TLS had cut or looped.
TEST(ThreadEdges, ThreadSetUpInTheLastDestructorRoundLeavesTheThreadList) {
  for (const char *stack : {"own-stack", "cached-stack"}) {
    ProbeResult r = run_edges({"last-round-setup", stack, "4"});
    EXPECT_EQ(r.exit_code, 0) << stack << " (-11: SIGSEGV, -14: the probe's alarm)\n"
                              << r.out << r.err;
    if (r.exit_code != 0) continue;
    EXPECT_EQ(r.num("last_round"), 4) << stack;
    EXPECT_EQ(r.num("joined"), 4) << stack;
    EXPECT_EQ(r.num("worker_blocks"), 40) << stack;
    EXPECT_EQ(r.num("survived"), 1) << stack;
  }
}

} // namespace
