// Program threads cancelled inside nicmalloc's API (tests/safety/cancel_probe.c, a fresh process
// per scenario). glibc's open, read, write, nanosleep, eventfd_read/write and pthread_cond_wait act
// on a pending cancel: inside nicmalloc they unwound the thread while it held a lock, and every
// later call that took the lock waited forever (the probe's alarm ends it: SIGALRM).
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

ProbeResult run_cancel(const std::vector<std::string> &env, const std::string &scenario) {
  std::vector<std::string> all = env;
  all.push_back("NICMALLOC_CHUNK_SIZE=64M");
  return run_program(NIC_CANCEL_PROBE_PATH, all, {scenario});
}

void ExpectBackendOpened(const std::string &backend) {
  std::vector<std::string> env = {"NICMALLOC_BACKEND=" + backend};
  if (backend == "dpdk") env.push_back("NICMALLOC_DPDK_VDEV=net_ring0");
  ProbeResult r = run_cancel(env, "open");
  ASSERT_EQ(r.exit_code, 0) << "a registration after the victim's never returned\n"
                            << r.out << r.err;
  if (r.values["backend"] != backend)
    GTEST_SKIP() << backend << " does not open here (got " << r.values["backend"] << ")";
  EXPECT_EQ(r.num("victim_cancelled"), 1);
  EXPECT_EQ(r.num("victim_past"), 1) << "the cancel acted inside nic_register";
  EXPECT_EQ(r.num("victim_rc"), 0);
  EXPECT_EQ(r.num("main_rc"), 0);
}

} // namespace

// The first registration opens the backend under the lock every registration takes; the sim's
// set-up and DPDK's EAL read files on the way. Without the fix sim and dpdk hung.
TEST(Cancel, APendingCancelWaitsUntilTheBackendIsOpenSim) {
  ExpectBackendOpened("sim");
}
TEST(Cancel, APendingCancelWaitsUntilTheBackendIsOpenUring) {
  ExpectBackendOpened("uring");
}
TEST(Cancel, APendingCancelWaitsUntilTheBackendIsOpenDpdk) {
  ExpectBackendOpened("dpdk");
}

// A post and the polls that run its completion write and clear the backend's event descriptor
// under the backend's lock (eventfd_write is write()). Without the fix both hung.
TEST(Cancel, PostAndPollUnderAPendingCancelLeaveTheBackendUsable) {
  for (const char *backend : {"sim", "uring"}) {
    SCOPED_TRACE(backend);
    ProbeResult r = run_cancel({std::string("NICMALLOC_BACKEND=") + backend}, "post-poll");
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    if (r.values["backend"] != backend) {
      std::printf("[ SKIPPED  ] %s does not open here: %s\n", backend, r.err.c_str());
      continue;
    }
    EXPECT_EQ(r.num("victim_cancelled"), 1);
    EXPECT_EQ(r.num("victim_past"), 1) << "the cancel acted inside nic_sga_post or nic_poll";
    EXPECT_EQ(r.num("victim_rc"), 0);
    EXPECT_EQ(r.num("victim_done"), 1);
    EXPECT_EQ(r.num("main_rc"), 0);
    EXPECT_EQ(r.num("main_done"), 1);
  }
}

// io_uring: a plain send waits behind the socket's posts, and send is a cancellation point: the
// waiter is cancelled there, and lets go of the ring's lock and the list's on its way out. Without
// the fix the next send on the socket hung.
TEST(Cancel, ASendCancelledBehindAPostLetsTheNextSendGo) {
  ProbeResult r = run_cancel({"NICMALLOC_BACKEND=uring"}, "send-behind-post");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values.count("endpoint")) GTEST_SKIP() << "io_uring does not open here: " << r.err;
  EXPECT_EQ(r.num("post_rc"), 0);
  EXPECT_EQ(r.num("victim_cancelled"), 1) << "the send was not waiting, or not cancellable";
  EXPECT_EQ(r.num("victim_sent"), -2) << "the victim's send returned";
  EXPECT_EQ(r.num("peer_got"), 4 << 20);
  EXPECT_EQ(r.num("main_sent"), 3);
  EXPECT_EQ(r.num("post_done"), 1);
  EXPECT_EQ(r.values["tail"], "end");
}

// NICMALLOC_REALLOC_INFLIGHT=wait: realloc of a block in flight waits for the DMA (300 ms here),
// and realloc is no cancellation point. Without the fix the thread ended inside realloc.
TEST(Cancel, ReallocWaitingForTheNicIsNoCancellationPoint) {
  ProbeResult r = run_cancel({"NICMALLOC_BACKEND=sim", "NICMALLOC_SIM_DELAYS=fixed:300000",
                              "NICMALLOC_REALLOC_INFLIGHT=wait"},
                             "realloc-in-flight");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("post_rc"), 0);
  ASSERT_EQ(r.num("in_flight"), 1) << "the DMA was over before realloc: nothing tested";
  EXPECT_EQ(r.num("fence_waits"), 1) << "realloc did not wait";
  EXPECT_EQ(r.num("victim_past"), 1) << "the cancel acted inside realloc";
  EXPECT_EQ(r.num("victim_block"), 1);
  EXPECT_EQ(r.num("victim_cancelled"), 1);
  EXPECT_EQ(r.num("completed"), 1);
}

// fork is no cancellation point and the child inherits the pending cancel: the child's fork hooks
// (closing the userfaultfd descriptor under NICMALLOC_FENCE=protect) must not act on it. Without
// the fix the child ended inside fork (status 0) instead of returning from it (42).
TEST(Cancel, AChildForkedWithACancelPendingReturnsFromFork) {
  ProbeResult r = run_cancel({"NICMALLOC_BACKEND=sim", "NICMALLOC_FENCE=protect"}, "fork-pending");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("post_rc"), 0);
  EXPECT_EQ(r.num("completed"), 1);
  EXPECT_EQ(r.num("victim_cancelled"), 1);
  EXPECT_EQ(r.num("child_status"), 42);
}
