// A program that used nicmalloc's API and whose main thread calls pthread_exit ends with exit(0)
// when its last thread does, as under glibc alone (tests/heap/main_exit_probe.c forks the program
// and kills it at its deadline). nicmalloc's threads count in glibc's live threads, so glibc's
// last-thread exit never came; the reaper, which does it in their stead, counted itself alone as
// nicmalloc's, and did not run at all where no dataplane block was made. Without the fix the
// program lived on, blocking every signal, until the probe killed it (ended=0).
#include <gtest/gtest.h>

#include "probe_runner.h"

namespace {

void ExpectEndsAfterMainPthreadExit(const std::vector<std::string> &env, const std::string &mode) {
  std::vector<std::string> all = env;
  all.push_back("NICMALLOC_BACKEND=sim");
  ProbeResult r = run_program(NIC_PROBE_PATH, all, {mode});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("endpoint"), 1) << r.err;
  if (mode == "post") {
    EXPECT_EQ(r.num("post_rc"), 0);
    EXPECT_EQ(r.num("post_done"), 1);
  }
  EXPECT_EQ(r.num("main_ended"), 1);
  EXPECT_EQ(r.num("ended"), 1) << "the program outlived its last thread";
  EXPECT_EQ(r.num("exit_status"), 0);
  EXPECT_EQ(r.values.count("atexit_ran"), 1u) << "not ended by exit()";
}

} // namespace

TEST(MainExit, AProgramThatPostedEndsWithItsLastThread) {
  ExpectEndsAfterMainPthreadExit({}, "post");
}

// The fence's threads (the userfaultfd handler among them) are nicmalloc's too.
TEST(MainExit, AProgramThatPostedUnderTheProtectFenceEndsWithItsLastThread) {
  ExpectEndsAfterMainPthreadExit({"NICMALLOC_FENCE=protect"}, "post");
}

// Only an endpoint: the sim's thread runs, and no dataplane block started the reaper.
TEST(MainExit, AProgramThatOnlyMadeAnEndpointEndsWithItsLastThread) {
  ExpectEndsAfterMainPthreadExit({}, "endpoint");
}

// A thread that goes on after main's pthread_exit reaches the process's memory and its /proc
// files: /proc/self and getpid() name the main thread, a zombie without memory once it has left.
// Without the fix every sim registration failed (post completions -EFAULT, "cannot register
// dataplane chunk ... (Bad address)") and mallinfo2's arena left out the control heap, whose
// mappings it read from an empty /proc/self/maps.
TEST(MainExit, AThreadThatGoesOnAfterMainPostsRegistersAndCountsItsHeap) {
  ProbeResult r = run_program(NIC_PROBE_PATH, {"NICMALLOC_BACKEND=sim"}, {"late"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("main_ended"), 1) << r.out;
  EXPECT_EQ(r.num("late_failed"), 0) << r.out << r.err;
  EXPECT_EQ(r.num("late_done"), 8) << r.out << r.err;
  EXPECT_EQ(r.num("late_arena_holds"), 1) << r.out;
  EXPECT_EQ(r.num("ended"), 1) << "the program outlived its last thread";
}
