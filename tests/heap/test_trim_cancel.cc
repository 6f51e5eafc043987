// malloc_trim and nic_poll with a cancel pending, beside a thread that handed out its event set
// (tests/heap/trim_cancel_probe.c, a fresh process per scenario). glibc's write and read act on a
// pending cancel; malloc_trim wrote to the other thread's eventfd under the thread list's lock.
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

ProbeResult run_scenario(const std::string &scenario) {
  return run_program(NIC_PROBE_PATH, {"NICMALLOC_BACKEND=sim"}, {scenario});
}

} // namespace

// Without the fix the victim was cancelled inside malloc_trim holding the list's lock, and hung in
// its own exit (the probe's alarm ended it: SIGALRM); every later thread exit and fork hung too.
TEST(TrimCancel, MallocTrimActsOnNoCancelAndLeavesNoLockHeld) {
  ProbeResult r = run_scenario("trim");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values.count("endpoint")) GTEST_SKIP() << "the sim does not open here: " << r.err;
  EXPECT_EQ(r.num("holder_fd"), 1);
  EXPECT_EQ(r.num("victim_past"), 1) << "the cancel acted inside malloc_trim";
  EXPECT_EQ(r.num("victim_trimmed"), 1);
  EXPECT_EQ(r.num("victim_cancelled"), 1) << "the cancel never acted";
  EXPECT_EQ(r.num("new_thread"), 1);
  EXPECT_EQ(r.num("fork_child"), 42);
  EXPECT_EQ(r.num("holder_joined"), 1);
}

// nic_poll reads the asked thread's eventfd (and writes it again while a pass is left). Without
// the fix the cancel acted in that read, inside nic_poll.
TEST(TrimCancel, NicPollAnsweringAnAskActsOnNoCancel) {
  ProbeResult r = run_scenario("poll");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values.count("endpoint")) GTEST_SKIP() << "the sim does not open here: " << r.err;
  EXPECT_EQ(r.num("holder_fd"), 1);
  EXPECT_EQ(r.num("holder_past_poll"), 1) << "the cancel acted inside nic_poll";
  EXPECT_EQ(r.num("holder_cancelled"), 1) << "the cancel never acted";
}
