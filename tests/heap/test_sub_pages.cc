// The 4 KiB pages only free blocks cover go back inside mimalloc pages that keep live blocks
// (alloc/heap/sub_pages.h).
#include <gtest/gtest.h>

#include "double_free_checks.h"
#include "probe_runner.h"

namespace {

// 4 KiB pages, locked as touched; the release and purge delays outlast the test, so nothing
// goes back but what nic_collect gives back inside pages in use.
std::vector<std::string> env(const char *backend) {
  return {"NICMALLOC_CHUNK_SIZE=64M",         "NICMALLOC_PIN_STEP=32M",
          "NICMALLOC_PAGE_KIND=4k",           "NICMALLOC_RELEASE_DELAY_MS=3600000",
          "NICMALLOC_PURGE_DELAY_MS=3600000", std::string("NICMALLOC_BACKEND=") + backend};
}
const long long kMiB = 1 << 20;
// The probe frees 63 of every 64 256-byte blocks of 8 MiB: three 4 KiB pages of four hold free
// blocks only (the fourth a live block, and blocks straddle pages), and every mimalloc page
// keeps live ones.
const long long kGonePagesMin = 1000;

void expect_shrunk(const ProbeResult &r) {
  EXPECT_GE(r.num("gone_pages"), kGonePagesMin) << r.out;
  EXPECT_LE(r.num("freed_pinned"), r.num("full_pinned") - 4 * kMiB) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 4 * 1024) << r.out;
  EXPECT_EQ(r.num("freed_live"), r.num("full_live") / 64) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// With 4 MiB steps the 8 MiB fill covers whole steps, which the stats read before the collect
// finds wholly in memory (and then stops asking the kernel about, steps.h): the pages given back
// here must make the next read ask again. Without that, freed_pinned read 5816320 (the whole
// steps) against 3178496.
TEST(SubPages, PagesGivenBackInStepsFoundWholeLeaveThePinnedCount) {
  auto e = env("sim");
  e[1] = "NICMALLOC_PIN_STEP=4M";
  auto r = run_probe(e, {"shrink"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_shrunk(r);
}

TEST(SubPages, FreeBlocksGiveBackTheirPagesInsidePagesStillInUse) {
  auto r = run_probe(env("sim"), {"shrink"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_shrunk(r);
  // Allocation goes on: the blocks mimalloc still lists are handed out again, every block reads
  // what was written, the live ones too, and the count of live bytes is right.
  EXPECT_GE(r.num("again_inside"), 4000) << r.out;
  EXPECT_EQ(r.num("again_written"), 1) << r.out;
  EXPECT_EQ(r.num("again_intact"), 1) << r.out;
  // Once every page empties, mimalloc builds it anew with every block: the whole fill fits in
  // its first range again (a page given back for good would leave blocks outside), and the
  // pages are in memory and pinned again.
  EXPECT_EQ(r.num("empty_live"), 0) << r.out;
  EXPECT_GE(r.num("rebuilt_inside"), 32768 * 9 / 10) << r.out;
  EXPECT_EQ(r.num("rebuilt_written"), 1) << r.out;
  EXPECT_GE(r.num("rebuilt_pinned"), r.num("full_pinned") - kMiB) << r.out;
  EXPECT_EQ(r.num("end_live"), 0) << r.out;
}

// A block held back with its pages is freed: freeing it again is a double free, reported and
// ignored (it reaching mimalloc would take its page's count of used blocks below the live
// ones), whether its key went with its pages or still lies on a page in memory.
TEST(SubPages, ADoubleFreeOfABlockHeldBackIsReportedAndIgnored) {
  auto r = run_probe(env("sim"), {"double"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("whole"), 0) << "no freed block's pages went back: " << r.out;
  ASSERT_GE(r.num("part"), 0) << "no freed block straddles a page that went back: " << r.out;
  expect_double_frees_reported_and_ignored(r, 4);
}

// The same for blocks of mimalloc's eight-slice pages, found from a slice inside the page (its
// entry's offset back to the page header). 20 KiB blocks straddle no 4 KiB page: only the
// block whose pages went back is freed again, given to realloc and asked its size.
TEST(SubPages, ADoubleFreeOfABlockHeldBackInsideAMultiSlicePageIsReportedAndIgnored) {
  auto r = run_probe(env("sim"), {"double", "medium"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("whole"), 0) << "no freed block's pages went back: " << r.out;
  expect_double_frees_reported_and_ignored(r, 3);
}

// io_uring fixed buffers hold the pages they were given: a registration made after the drop
// finds every page back in memory (and pinned), and the live blocks as written; while it lasts,
// no page of its step goes (the kernel would go on sending from the old one).
TEST(SubPages, ARegistrationThatHoldsPagesFaultsThemBackFirst) {
  auto r = run_probe(env("uring"), {"held"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.num("register_rc") != 0) GTEST_SKIP() << "io_uring unavailable here: " << r.out;
  expect_shrunk(r);
  EXPECT_EQ(r.num("after_register_gone_pages"), 0) << r.out;
  EXPECT_GE(r.num("registered_pinned"), r.num("freed_pinned") + 4 * kMiB) << r.out;
  EXPECT_EQ(r.num("registered_intact"), 1) << r.out;
  EXPECT_EQ(r.num("held_gone_blocks"), 0) << r.out;
  EXPECT_GE(r.num("held_pinned"), r.num("registered_pinned")) << r.out;
}

// The thread that shrank exits; its segments, blocks held back and all, are adopted by the main
// thread's allocations: the lists it finds are valid, live blocks keep their bytes, a block
// held back is still a double free, and the counts end at zero.
TEST(SubPages, SegmentsOfAnExitedThreadStayValidForTheThreadThatAdoptsThem) {
  auto r = run_probe(env("sim"), {"abandon"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_shrunk(r);
  EXPECT_EQ(r.num("adopted_written"), 1) << r.out;
  EXPECT_EQ(r.num("adopted_intact"), 1) << r.out;
  ASSERT_GE(r.num("whole"), 0) << r.out;
  EXPECT_EQ(r.num("after_double_frees"), r.num("before_double_frees") + 1) << r.out << r.err;
  EXPECT_EQ(r.num("after_live"), r.num("before_live")) << r.out;
  EXPECT_EQ(r.num("end_live"), 0) << r.out;
}

// The control heap: malloc_trim gives back, on the calling thread, the 4 KiB pages of its
// mimalloc pages in use that only free blocks cover (alloc/heap/control_sub_pages.h). Before, it
// gave back nothing here: every mimalloc page keeps live blocks.
void expect_control_shrunk(const ProbeResult &r) {
  EXPECT_GE(r.num("gone_pages"), kGonePagesMin) << r.out;
  EXPECT_LE(r.num("freed_control_resident"), r.num("full_control_resident") - 4 * kMiB) << r.out;
  EXPECT_LE(r.num("freed_rss_anon_kb"), r.num("full_rss_anon_kb") - 4 * 1024) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

TEST(SubPages, MallocTrimGivesBackFreeControlPagesInsidePagesStillInUse) {
  auto r = run_probe(env("sim"), {"shrink", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_control_shrunk(r);
  // Allocation goes on from what mimalloc still lists, every block reads what was written; once
  // every page empties, mimalloc builds it anew with every block in it.
  EXPECT_GE(r.num("again_inside"), 4000) << r.out;
  EXPECT_EQ(r.num("again_written"), 1) << r.out;
  EXPECT_EQ(r.num("again_intact"), 1) << r.out;
  EXPECT_GE(r.num("rebuilt_inside"), 32768 * 9 / 10) << r.out;
  EXPECT_EQ(r.num("rebuilt_written"), 1) << r.out;
}

// The probe's victims were freed again (reported frees in all), one given to realloc and asked
// its size: each counted, realloc refuses it, its size reads 0, and neither is handed out again.
void expect_control_double_frees_ignored(const ProbeResult &r, long long reported) {
  EXPECT_EQ(r.num("after_double_frees"), r.num("before_double_frees") + reported) << r.out << r.err;
  EXPECT_EQ(r.num("realloc_null"), 1) << r.out;
  EXPECT_EQ(r.num("usable"), 0) << r.out;
  EXPECT_EQ(r.num("reissued"), 0) << r.out;
}

// A control block held back with its pages is freed: freeing it again is reported and ignored,
// whether its key went with its pages or lies intact on a page in memory; it reaching mimalloc
// would put it back on a list (handed out again while its page keeps live blocks) and take the
// page's count of used blocks below the live ones.
TEST(SubPages, ADoubleFreeOfAControlBlockMallocTrimHeldBackIsReportedAndIgnored) {
  auto r = run_probe(env("sim"), {"double", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_control_shrunk(r);
  ASSERT_GE(r.num("whole"), 0) << "no freed block's pages went back: " << r.out;
  ASSERT_GE(r.num("part"), 0) << "no freed block straddles a page that went back: " << r.out;
  expect_control_double_frees_ignored(r, 4);
}

TEST(SubPages, ADoubleFreeOfAControlBlockHeldBackInsideAMultiSlicePageIsReportedAndIgnored) {
  auto r = run_probe(env("sim"), {"double", "medium", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("whole"), 0) << "no freed block's pages went back: " << r.out;
  expect_control_double_frees_ignored(r, 3);
}

// A later free beside pages given back: the blocks over those pages are on no list (held back),
// and were taken for live ones, so the page of a block freed later never went (2 of 256) while
// its mimalloc page lived. They count as free now.
void expect_freed_beside_given_back(const ProbeResult &r) {
  ASSERT_EQ(r.num("freed_beside"), 256) << r.out;
  EXPECT_GE(r.num("freed_beside_gone"), 192) << r.out;
  EXPECT_EQ(r.num("beside_intact"), 1) << r.out;
  EXPECT_EQ(r.num("beside_double_frees"), 0) << r.out;
}

TEST(SubPages, APageBesideOnesGivenBackGoesOnceItsLastBlockIsFreed) {
  auto r = run_probe(env("sim"), {"beside"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_freed_beside_given_back(r);
  EXPECT_LE(r.num("beside_pinned"), r.num("freed_pinned") - 768 * 1024) << r.out;
}

TEST(SubPages, AControlPageBesideOnesGivenBackGoesOnceItsLastBlockIsFreed) {
  auto r = run_probe(env("sim"), {"beside", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_freed_beside_given_back(r);
  EXPECT_LE(r.num("beside_control_resident"), r.num("freed_control_resident") - 768 * 1024)
      << r.out;
}

// Another thread's pages, given back by that thread when asked: not by the asker's own pass,
// and in answers that each read a bounded share of the lists (nudge.c), since an answer runs
// inside one of that thread's allocations; all of them by the end, the memory counted in
// `memory` (pinned or control resident) 4 MiB below its full fill.
void expect_answered_in_steps(const ProbeResult &r, const std::string &memory) {
  EXPECT_LE(r.num("answered_" + memory), r.num("full_" + memory) - 4 * kMiB) << r.out;
  EXPECT_LT(r.num("trimmed_gone_pages"), kGonePagesMin) << "the owner's lists are its own" << r.out;
  EXPECT_GE(r.num("answered_gone_pages"), kGonePagesMin) << r.out;
  EXPECT_GT(r.num("first_answer_gone_pages"), 0) << r.out;
  EXPECT_LT(r.num("first_answer_gone_pages"), r.num("answered_gone_pages") / 2) << r.out;
  EXPECT_EQ(r.num("intact"), 1) << r.out;
}

// malloc_trim on one thread asks the others for their control pages: a thread whose blocks were
// freed gives back its pages over its next allocations off mimalloc's fast path (glibc's
// malloc_trim trims every arena). Without the asking its pages stayed until it trimmed itself;
// with all of the pass in one answer, the first one gave back every page.
TEST(SubPages, MallocTrimOnOneThreadReachesTheControlPagesOfAnother) {
  auto r = run_probe(env("sim"), {"others", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_answered_in_steps(r, "control_resident");
}

// A trim that asks while the thread's pass from an earlier ask is under way: the pages freed
// meanwhile behind that pass go too (a pass from the start follows). Without it the second ask
// was taken into the pass under way, and they stayed.
TEST(SubPages, AnAskDuringAPassUnderWayGetsAPassOfItsOwn) {
  auto r = run_probe(env("sim"), {"again", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_GE(r.num("freed_again"), 16) << r.out;
  EXPECT_EQ(r.num("freed_again_gone_before"), 0) << "freed behind the first answer" << r.out;
  EXPECT_EQ(r.num("freed_again_gone"), r.num("freed_again")) << r.out;
}

// The reaper's nudge asks the owner of dataplane pages the same (alloc/heap/nudge.h).
TEST(SubPages, TheNudgeReachesTheDataplanePagesOfAnotherThreadInBoundedAnswers) {
  auto e = env("sim");
  for (auto &setting : e) // the reaper asks once the gap lasted the purge delay
    if (setting.rfind("NICMALLOC_PURGE_DELAY_MS=", 0) == 0) setting = "NICMALLOC_PURGE_DELAY_MS=50";
  auto r = run_probe(e, {"others"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_answered_in_steps(r, "pinned");
}

// malloc_trim asks every thread for its dataplane pages too, as nic_collect gives back the
// caller's: no wait for the reaper's nudge (its purge delay outlasts the test here). Before,
// malloc_trim asked for control pages only, and the other thread's dataplane pages stayed.
TEST(SubPages, MallocTrimReachesTheDataplanePagesOfAnotherThread) {
  auto r = run_probe(env("sim"), {"others", "trim"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_answered_in_steps(r, "pinned");
}

// A thread that serves the NIC and allocates nothing after the trim answers in its nic_poll
// calls, as it would in allocations: before, only its allocations answered, and its pages, control
// and dataplane alike, stayed until it allocated again.
TEST(SubPages, AThreadThatOnlyPollsAnswersMallocTrimInItsPolls) {
  auto r = run_probe(env("sim"), {"others", "control", "polls"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_answered_in_steps(r, "control_resident");
  auto d = run_probe(env("sim"), {"others", "trim", "polls"});
  ASSERT_EQ(d.exit_code, 0) << d.out << d.err;
  expect_answered_in_steps(d, "pinned");
}

// A thread blocked in nic_wait(-1), as an idle event loop is, is woken by the ask and gives back
// its pages without returning to the program (nothing ran for it); before, it kept them until a
// completion or a message woke it.
TEST(SubPages, AThreadBlockedInNicWaitIsWokenToAnswerMallocTrim) {
  for (const char *heap : {"control", "trim"}) {
    auto r = run_probe(env("sim"), {"waits", heap});
    ASSERT_EQ(r.exit_code, 0) << heap << r.out << r.err;
    EXPECT_GE(r.num("answered_gone_pages"), kGonePagesMin) << heap << r.out;
    EXPECT_EQ(r.num("intact"), 1) << heap << r.out;
    EXPECT_EQ(r.num("waits_returned_early"), 0) << heap << r.out;
  }
}

// An event loop blocked in epoll_wait(-1) on its own set, with nic_thread_event_fd in it, wakes
// for the ask and gives back its pages over its nic_poll calls, level- or edge-triggered; once
// the pass is done the descriptor polls empty, so the idle loop sleeps again. Without the asks
// writing to it the loop slept through them (0 pages); without the descriptor made readable
// again after a part, the first part was all (345); without it read, the idle loop woke 400,000
// times in 200 ms.
TEST(SubPages, AnEventLoopPollingItsThreadEventFdAnswersMallocTrimAndThenSleeps) {
  for (const char *heap : {"control", "trim"})
    for (const char *edge : {"level", "edge"}) {
      auto r = run_probe(env("sim"), {"epolls", heap, edge});
      const std::string what = std::string(heap) + " " + edge + "\n";
      ASSERT_EQ(r.exit_code, 0) << what << r.out << r.err;
      ASSERT_GE(r.num("thread_fd"), 0) << what << r.out;
      EXPECT_EQ(r.num("same_fd"), 1) << what << r.out;
      EXPECT_GE(r.num("answered_gone_pages"), kGonePagesMin) << what << r.out;
      EXPECT_EQ(r.num("intact"), 1) << what << r.out;
      EXPECT_GE(r.num("wakeups_answering"), 1) << what << r.out;
      EXPECT_EQ(r.num("wakeups_idle"), 0) << what << r.out;
      EXPECT_EQ(r.num("ready_idle"), 0) << what << r.out;
    }
}

// A thread another thread's malloc_trim asked for its control pages answers inside mimalloc's
// collect of its own malloc_trim: the answer takes no lock the trim holds (it once took the
// abandoned visits' lock again, and the thread waited for itself).
TEST(SubPages, AThreadAskedToTrimTrimsItselfWithoutWaitingForItself) {
  auto r = run_probe(env("sim"), {"asked", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("asked_trim"), 1) << r.out;
}

// The thread that trimmed exits: its segments, blocks held back and all, are abandoned; the main
// thread goes on allocating, live blocks keep their bytes, and a block held back is still a
// double free.
TEST(SubPages, ControlBlocksHeldBackByAnExitedThreadStayFreed) {
  auto r = run_probe(env("sim"), {"abandon", "control"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_control_shrunk(r);
  EXPECT_EQ(r.num("adopted_written"), 1) << r.out;
  EXPECT_EQ(r.num("adopted_intact"), 1) << r.out;
  ASSERT_GE(r.num("whole"), 0) << r.out;
  EXPECT_EQ(r.num("after_double_frees"), r.num("before_double_frees") + 1) << r.out << r.err;
}

} // namespace
