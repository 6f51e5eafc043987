// NICMALLOC_FENCE=protect on the sim backend, with each mechanism (userfaultfd write-protect,
// and mprotect + SIGSEGV): a write to posted memory is held until the DMA has read it. The sim
// engine is paused so that an unheld write would reach the receiver; every verdict comes from
// the bytes received and the counters, never from elapsed time (the waits below are deadlines).
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "fence.h"
#include "safety.h"
#include "sim_nic.h"
#include "sub_pages_scan.h"
}

#include "fence_integrity.h"
#include "probe_runner.h"
#include "sim_endpoint_fixture.h"

namespace {

// Polls cond until it holds or 20 s pass (a deadline for a broken build, not a measurement).
bool WaitFor(const std::function<bool()> &cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

const char *Name(nic_fence_protect_with w) {
  return w == NIC_PROTECT_UFFD ? "uffd" : "mprotect";
}

// Two 512-byte dataplane blocks on one 4 KiB page; the blocks tried on the way go to spare.
void TwoBlocksOnOnePage(char **x, char **y, std::vector<char *> *spare) {
  *x = *y = nullptr;
  for (int i = 0; i < 64 && !*y; i++) {
    char *p = static_cast<char *>(nic_malloc(512));
    ASSERT_NE(p, nullptr);
    if (*x && reinterpret_cast<uintptr_t>(p) >> 12 == reinterpret_cast<uintptr_t>(*x) >> 12) {
      *y = p;
    } else {
      if (*x) spare->push_back(*x);
      *x = p;
    }
  }
  ASSERT_NE(*y, nullptr) << "no two blocks on one page";
}

class Protect : public SimEndpointTest, public testing::WithParamInterface<nic_fence_protect_with> {
protected:
  void SetUp() override {
    saved = *nic_safety_config();
    struct nic_safety_config c = saved;
    c.fence = NIC_FENCE_PROTECT;
    nic_safety_config_set(&c);
    int rc = nic_fence_protect_use(GetParam());
    if (rc == -ENOTSUP) GTEST_SKIP() << Name(GetParam()) << " write-protect is not available here";
    ASSERT_EQ(rc, 0);
    ASSERT_STREQ(nic_fence_protect_name(), Name(GetParam()));
    SimEndpointTest::SetUp();
  }
  void TearDown() override {
    SimEndpointTest::TearDown();
    nic_safety_config_set(&saved);
  }
  // A short NICMALLOC_FENCE_TIMEOUT_MS, for the tests of what happens past it (TearDown puts
  // the setting back).
  static void ShortTimeout() {
    struct nic_safety_config c = *nic_safety_config();
    c.fence_timeout_ms = 200;
    nic_safety_config_set(&c);
  }
  // Page-aligned, so that nothing else the test allocates shares a page with it.
  static char *Block(bool dataplane, size_t size) {
    return static_cast<char *>(dataplane ? nic_aligned_alloc(4096, size)
                                         : aligned_alloc(4096, size));
  }
  // Drain with a deadline: a broken protect could leave a completion stuck behind a writer.
  void DrainWithin(int target) {
    nic_sim_pause(nic_backend_active(), false);
    ASSERT_TRUE(WaitFor([&] {
      nic_poll(0);
      return done_count.load() >= target;
    }));
    EXPECT_EQ(done_failed.load(), 0);
  }
  std::string Received(size_t i) {
    std::lock_guard<std::mutex> g(inbox.mu);
    return i < inbox.msgs.size() ? inbox.msgs[i] : "(nothing)";
  }
  // A page-aligned block of size bytes of c, posted with the NIC paused; *target is the number
  // of completions once its own has run.
  char *PostFilledPaused(bool dataplane, size_t size, char c, int *target) {
    char *p = Block(dataplane, size);
    if (!p) return nullptr;
    memset(p, c, size);
    *target = done_count.load() + 1;
    PostPaused(p, size);
    return p;
  }
  void WriteAfterPostIsHeld(bool dataplane);
  struct nic_safety_config saved;
};

void Protect::WriteAfterPostIsHeld(bool dataplane) {
  const nic_stats before = Stats();
  int target = 0;
  char *p = PostFilledPaused(dataplane, 8192, 'A', &target);
  ASSERT_NE(p, nullptr);
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    memset(p + 4000, 'B', 200); // across the two pages
    wrote = true;
  });
  ASSERT_TRUE(WaitFor([] { return Stats().fence_writers_held >= 1; }))
      << "the writer was never held";
  EXPECT_FALSE(wrote.load()) << "a held writer went on while the DMA was pending";
  DrainWithin(target);
  writer.join(); // released by the completion (the poller runs it if nobody else does)
  EXPECT_EQ(Received(0), std::string(8192, 'A')) << "the write reached the wire";
  EXPECT_EQ(std::string(p + 4000, 200), std::string(200, 'B')) << "the write was lost";
  const nic_stats after = Stats();
  EXPECT_GE(after.fence_held_writes, before.fence_held_writes + 1);
  // uffd's fault thread notices a released writer on its next sweep (every millisecond).
  EXPECT_TRUE(WaitFor([] { return Stats().fence_writers_held == 0; }));
  EXPECT_EQ(after.fence_bypasses, before.fence_bypasses);
  EXPECT_EQ(after.fence_unprotected, before.fence_unprotected);
  free(p);
}

TEST_P(Protect, DataplaneWriteAfterPostIsHeldUntilTheDma) {
  WriteAfterPostIsHeld(true);
}

TEST_P(Protect, ControlHeapWriteAfterPostIsHeldUntilTheDma) {
  WriteAfterPostIsHeld(false);
}

TEST_P(Protect, PagesAreWritableAgainAfterTheCompletion) {
  char *p = Block(true, 4096);
  memset(p, 'C', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  DrainWithin(target);
  const uint64_t held = Stats().fence_held_writes;
  memset(p, 'D', 4096); // would hang past the timeout if the page stayed protected
  EXPECT_EQ(Stats().fence_held_writes, held);
  EXPECT_EQ(Received(0), std::string(4096, 'C'));
  free(p);
}

// Two posts share a page: the first completion must not unprotect what the second still reads.
TEST_P(Protect, APageStaysProtectedWhileAnyPostCoversIt) {
  char *p = Block(true, 4096);
  memset(p, 'E', 4096);
  const int target = done_count.load() + 2;
  PostPaused(p, 2048);
  Post(p + 2048, 2048);
  nic_fence_completed(nullptr, 0); // a completion with nothing of its own changes nothing
  nic_sga_entry first = {};
  first.addr = p;
  first.len = 2048;
  first.kind = NIC_REGION_ARENA;
  nic_fence_unprotect(&first, 1); // as if another post of the page completed: still referenced
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    p[10] = 'F';
    wrote = true;
  });
  ASSERT_TRUE(WaitFor([] { return Stats().fence_writers_held >= 1; }))
      << "the page was made writable while two posts still covered it";
  EXPECT_FALSE(wrote.load());
  DrainWithin(target);
  writer.join();
  EXPECT_EQ(Received(0) + Received(1), std::string(4096, 'E'));
  free(p);
}

// Each held write past the timeout is counted; the message is said once (a program whose
// completions never come printed it at every write: one line per post).
TEST_P(Protect, AWriterHeldPastTheTimeoutGoesOnWithAMessageSaidOnce) {
  ShortTimeout();
  const nic_stats before = Stats();
  testing::internal::CaptureStderr();
  for (size_t round = 0; round < 3; round++) {
    char *p = Block(false, 4096);
    memset(p, 'G', 4096);
    const int target = done_count.load() + 1;
    PostPaused(p, 4096);
    std::thread writer([&] { memset(p, 'H', 4096); });
    writer.join(); // the NIC stays paused: only the timeout lets it go
    EXPECT_EQ(Stats().fence_bypasses, before.fence_bypasses + round + 1);
    DrainWithin(target);
    EXPECT_EQ(Received(round), std::string(4096, 'H'))
        << "documented: after the timeout the write wins";
    free(p);
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "NICMALLOC_FENCE_TIMEOUT_MS"), 1) << err;
  EXPECT_NE(err.find("fence_bypasses counts them all"), std::string::npos) << err;
}

// The userfaultfd thread looks at the writers it saw held about every millisecond, and took one
// as gone only once its page was unmarked when it looked. A writer woken by a release, whose
// page a new post protected before the next look, was kept as held: past the timeout its page
// was made writable while the new post was in flight (a write could reach the wire), with a
// bypass, a mismatch and a false "waited" message (the auditor's repro, 1 run in 3). Here the
// thread is kept from looking over that whole stretch.
std::atomic<bool> sweep_paused{false}, sweep_waiting{false};
void PauseSweep() {
  while (sweep_paused.load()) {
    sweep_waiting = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST_P(Protect, AWriterWokenBeforeItsPageIsPostedAgainIsNotHeldStill) {
  if (GetParam() != NIC_PROTECT_UFFD) GTEST_SKIP() << "the userfaultfd thread's bookkeeping";
  ShortTimeout();
  const nic_stats before = Stats();
  int first = 0;
  char *p = PostFilledPaused(true, 4096, 'W', &first);
  ASSERT_NE(p, nullptr);
  std::thread writer([p] { p[100] = 'w'; });
  ASSERT_TRUE(WaitFor([] { return Stats().fence_writers_held >= 1; })) << "never held";
  sweep_waiting = false;
  sweep_paused = true;
  nic_fence_sweep_hook = PauseSweep;
  EXPECT_TRUE(WaitFor([] { return sweep_waiting.load(); }));
  DrainWithin(first); // the release wakes the writer
  writer.join();
  memset(p, 'X', 4096);
  const int second = done_count.load() + 1;
  PostPaused(p, 4096); // protected again before the thread looks
  sweep_paused = false;
  EXPECT_TRUE(WaitFor([&] { return Stats().fence_writers_held == before.fence_writers_held; }));
  nic_fence_sweep_hook = nullptr;
  const nic_stats after = Stats();
  EXPECT_EQ(after.fence_bypasses, before.fence_bypasses) << "a writer gone was timed out";
  EXPECT_EQ(after.fence_mismatches, before.fence_mismatches);
  EXPECT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(p)))
      << "the page was made writable while the second post was in flight";
  DrainWithin(second);
  EXPECT_EQ(Received(0), std::string(4096, 'W')) << "the held write reached the wire";
  EXPECT_EQ(Received(1), std::string(4096, 'X'));
  free(p);
}

// A registration that meets pages a post keeps protected waits for the completion (pinning them
// would be a write); past the timeout it is refused, and that is said once: the wait and the
// refusal were silent, and a stalled run showed only its writers' timeout.
TEST_P(Protect, ARegistrationRefusedAfterWaitingForProtectedPagesIsSaidOnce) {
  ShortTimeout();
  char *p = Block(false, 4096);
  memset(p, 'R', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  testing::internal::CaptureStderr();
  nic_region_ref ref[2];
  // Remote access is never served from the cache: a registration of its own, of these pages.
  const int first = nic_register(p, 4096, NIC_REG_REMOTE_READ, &ref[0]);
  const int second = nic_register(p, 4096, NIC_REG_REMOTE_READ, &ref[1]);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(first, -ENOSPC);
  EXPECT_EQ(second, -ENOSPC);
  EXPECT_EQ(count_lines(err, "waited 200 ms (NICMALLOC_FENCE_TIMEOUT_MS) for pages a post"), 1)
      << err;
  DrainWithin(target);
  EXPECT_EQ(nic_register(p, 4096, NIC_REG_REMOTE_READ, &ref[0]), 0) << "once the post is done";
  nic_unregister(&ref[0]);
  free(p);
}

TEST_P(Protect, TheReportNamesTheModeTheMechanismAndTheHolds) {
  WriteAfterPostIsHeld(true);
  FILE *f = tmpfile();
  ASSERT_NE(f, nullptr);
  nic_print_stats(fileno(f));
  std::string report(4096, '\0');
  rewind(f);
  report.resize(fread(&report[0], 1, report.size(), f));
  fclose(f);
  const std::string want = std::string("fence             protect (") + Name(GetParam());
  EXPECT_NE(report.find(want), std::string::npos) << report;
  EXPECT_EQ(report.find(" 0 writes held"), std::string::npos) << report;
}

// Memory outside nicmalloc's heaps (static, stack, other mappings) cannot be protected: it is
// sent all the same and counted.
TEST_P(Protect, MemoryOutsideTheHeapsIsSentUnprotectedAndCounted) {
  static char outside[8192] __attribute__((aligned(4096)));
  memset(outside, 'I', sizeof outside);
  const uint64_t unprotected = Stats().fence_unprotected;
  const int target = done_count.load() + 1;
  Post(outside, sizeof outside);
  EXPECT_EQ(Stats().fence_unprotected, unprotected + 1);
  DrainWithin(target);
  EXPECT_EQ(Received(0), std::string(sizeof outside, 'I'));
}

// userfaultfd also holds the kernel's own writes (read(2) into the page); under mprotect the
// kernel does not signal, so the system call fails with EFAULT (README: a documented limit), as
// it does under a userfaultfd of user-mode faults only (a process without the privilege).
TEST_P(Protect, AKernelWriteIsHeldUnderUffdAndFailsUnderMprotect) {
  char *p = Block(true, 4096);
  memset(p, 'J', 4096);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "kernel", 6), 6);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  std::atomic<ssize_t> got{-2};
  std::atomic<int> err{0};
  std::thread reader([&] {
    ssize_t n = read(fds[0], p + 100, 6);
    err = errno;
    got = n;
  });
  if (nic_fence_kernel_writes_wait()) {
    ASSERT_TRUE(WaitFor([] { return Stats().fence_writers_held >= 1; }));
    EXPECT_EQ(got.load(), -2) << "read(2) wrote into the page while the DMA was pending";
    DrainWithin(target);
    reader.join();
    EXPECT_EQ(got.load(), 6);
    EXPECT_EQ(std::string(p + 100, 6), "kernel");
  } else {
    reader.join();
    EXPECT_EQ(got.load(), -1);
    EXPECT_EQ(err.load(), EFAULT);
    DrainWithin(target);
  }
  EXPECT_EQ(Received(0), std::string(4096, 'J'));
  close(fds[0]);
  close(fds[1]);
  free(p);
}

// The permissions /proc/self/maps gives the mapping holding p ("rw-p"), or "" if none does.
std::string Perms(const void *p) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return "";
  unsigned long start, end;
  char perms[8];
  std::string found;
  while (fscanf(f, "%lx-%lx %7s%*[^\n]", &start, &end, perms) == 3)
    if (start <= (uintptr_t)p && (uintptr_t)p < end) {
      found = perms;
      break;
    }
  fclose(f);
  return found;
}

// Uses up the process's budget of memory mappings (vm.max_map_count), as a process with that
// many has: every change of protection that splits a mapping then fails with ENOMEM. One-page
// mappings of alternating protection, made with the system calls themselves (nothing nicmalloc
// watches), in one reservation given back whole at the end.
class MapBudget {
public:
  MapBudget() {
    // A mapping of three pages whose middle page later cannot change alone: the proof.
    probe_ = Map(3, PROT_READ | PROT_WRITE);
    unsigned long max = 65530;
    if (FILE *f = fopen("/proc/sys/vm/max_map_count", "r")) {
      if (fscanf(f, "%lu", &max) != 1) max = 65530;
      fclose(f);
    }
    pages_ = 2 * max + 2;
    base_ = Map(pages_ + 1, PROT_NONE);
    if (!base_ || !probe_) return;
    syscall(SYS_munmap, base_ + pages_ * 4096, 4096); // a hole after: the last page stays alone
    for (size_t i = 1; i + 1 < pages_; i += 2)        // each splits the rest: two mappings more
      if (syscall(SYS_mprotect, base_ + i * 4096, 4096, PROT_READ)) break;
    syscall(SYS_mprotect, base_ + (pages_ - 1) * 4096, 4096, PROT_READ); // one more, if one is left
    used_ = syscall(SYS_mprotect, probe_ + 4096, 4096, PROT_READ) != 0 && errno == ENOMEM;
  }
  ~MapBudget() {
    if (base_) syscall(SYS_munmap, base_, pages_ * 4096);
    if (probe_) syscall(SYS_munmap, probe_, 3 * 4096);
  }
  bool Used() const { return used_; }

private:
  static char *Map(size_t pages, int prot) {
    long p = syscall(SYS_mmap, nullptr, pages * 4096, prot,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == -1 ? nullptr : reinterpret_cast<char *>(p);
  }
  char *base_ = nullptr, *probe_ = nullptr;
  size_t pages_ = 0;
  bool used_ = false;
};

nic_sga_entry ArenaEntry(void *p, size_t len) {
  nic_sga_entry e = {};
  e.addr = p;
  e.len = len;
  e.kind = NIC_REGION_ARENA;
  return e;
}

// Under mprotect, a release that splits a mapping fails with ENOMEM once the process has
// vm.max_map_count mappings. It used to forget the page all the same: read-only and unmarked,
// the next write's fault was passed on and the default action killed the process. Here the
// neighbours are the program's read-only pages, so that the page protected between them makes
// one read-only mapping of three, which its release must split. The page is protected as a
// post does it, without one, so that only the release runs while the budget is used up. Returns
// the page, kept read-only and marked, the error counted and said once.
class ProtectRefused : public Protect {
protected:
  void SetUp() override {
    Protect::SetUp();
    if (IsSkipped()) return;
    if (GetParam() != NIC_PROTECT_MPROTECT)
      GTEST_SKIP() << "userfaultfd's release splits no mapping";
  }
  // The step's registration and the marks' table first: neither is made while the mappings are
  // used up, nor with read-only pages in the step.
  void Prepare(char *p, size_t len) {
    memset(p, 'V', len);
    const int target = done_count.load() + 1;
    Post(p, len);
    DrainWithin(target);
  }
  char *RefusedRelease(char *p) {
    char *mid = p + 4096;
    Prepare(p, 3 * 4096);
    EXPECT_EQ(mprotect(p, 4096, PROT_READ), 0);
    EXPECT_EQ(mprotect(p + 2 * 4096, 4096, PROT_READ), 0);
    const nic_sga_entry e = ArenaEntry(mid, 4096);
    const uint64_t errors = Stats().fence_release_errors;
    nic_fence_protect(&e, 1);
    EXPECT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(mid)));
    std::string err;
    {
      MapBudget full;
      EXPECT_TRUE(full.Used()) << "the mappings could not be used up";
      testing::internal::CaptureStderr();
      nic_fence_unprotect(&e, 1); // the completion's release
      err = testing::internal::GetCapturedStderr();
    }
    EXPECT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(mid)))
        << "the page was forgotten while still read-only: its next write gets the default action";
    EXPECT_EQ(Perms(mid).substr(0, 3), "r--");
    EXPECT_EQ(Stats().fence_release_errors, errors + 1);
    static int said = 0; // once a process, whichever test comes first
    said += count_lines(err, "vm.max_map_count");
    EXPECT_EQ(said, 1) << err;
    return mid;
  }
  static void Restore(char *p) {
    ASSERT_EQ(mprotect(p, 3 * 4096, PROT_READ | PROT_WRITE), 0);
    free(p);
  }
};

TEST_P(ProtectRefused, AWriteToAPageWhoseReleaseWasRefusedReleasesIt) {
  char *p = Block(true, 3 * 4096);
  ASSERT_NE(p, nullptr);
  char *mid = RefusedRelease(p);
  const uint64_t held = Stats().fence_held_writes;
  // In a child first: without the page's mark, the default action killed the process.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    *(volatile char *)(mid + 10) = 'w';
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the write was killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  *(volatile char *)(mid + 10) = 'w'; // here: no post covers the page, so the fault releases it
  EXPECT_EQ(mid[10], 'w');
  EXPECT_FALSE(nic_fence_marked(reinterpret_cast<uintptr_t>(mid)));
  EXPECT_EQ(Perms(mid).substr(0, 3), "rw-");
  EXPECT_EQ(Stats().fence_held_writes, held) << "held, with no post to wait for";
  Restore(p);
}

TEST_P(ProtectRefused, TheNextCompletionReleasesAPageWhoseReleaseWasRefused) {
  char *p = Block(true, 3 * 4096);
  ASSERT_NE(p, nullptr);
  char *mid = RefusedRelease(p);
  char *other = Block(true, 4096);
  memset(other, 'O', 4096);
  const int target = done_count.load() + 1;
  Post(other, 4096);
  DrainWithin(target);
  EXPECT_FALSE(nic_fence_marked(reinterpret_cast<uintptr_t>(mid)));
  EXPECT_EQ(Perms(mid).substr(0, 3), "rw-") << "still read-only after a later completion";
  free(other);
  Restore(p);
}

// mprotect changes a range one mapping at a time: protecting a page that is a mapping of its
// own (here: not inherited by a fork child, so that it never merges with its neighbours) and the
// first page of a larger one changes the first, then fails to split the second. It used to
// forget both pages: the first stayed read-only, unmarked, and its next write got the default
// action. What it changed is made writable again.
TEST_P(ProtectRefused, AProtectRefusedHalfWayLeavesNoPageReadOnly) {
  char *p = Block(true, 4 * 4096);
  ASSERT_NE(p, nullptr);
  Prepare(p, 4 * 4096);
  ASSERT_EQ(madvise(p + 4096, 4096, MADV_DONTFORK), 0) << strerror(errno);
  const nic_sga_entry e = ArenaEntry(p + 4096, 2 * 4096);
  const uint64_t unprotected = Stats().fence_unprotected;
  testing::internal::CaptureStderr();
  {
    MapBudget full;
    EXPECT_TRUE(full.Used()) << "the mappings could not be used up";
    nic_fence_protect(&e, 1);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Stats().fence_unprotected, unprotected + 1) << err;
  EXPECT_FALSE(nic_fence_marked(reinterpret_cast<uintptr_t>(p + 4096)));
  EXPECT_FALSE(nic_fence_marked(reinterpret_cast<uintptr_t>(p + 2 * 4096)));
  ASSERT_EQ(Perms(p + 4096).substr(0, 2), "rw") << "left read-only by the protect that failed";
  EXPECT_EQ(Perms(p + 2 * 4096).substr(0, 2), "rw");
  p[4096] = 'u'; // would get the default action if still read-only
  nic_fence_unprotect(&e, 1);
  ASSERT_EQ(madvise(p + 4096, 4096, MADV_DOFORK), 0);
  free(p);
}

// mimalloc commits control memory with mprotect(PROT_READ | PROT_WRITE) on spans that take in
// pages already committed, live blocks and all (the program may call it too): a page posted
// there must stay held. Under mprotect the call made it writable, still marked as protected, and
// a write then reached the wire (the integrity test's mismatch, about one run in 30).
TEST_P(Protect, AnMprotectGrantingWritesLeavesAPostedPageHeld) {
  char *p = Block(false, 3 * 4096);
  ASSERT_NE(p, nullptr);
  memset(p, 'K', 3 * 4096);
  const int target = done_count.load() + 1;
  PostPaused(p + 4096, 4096);
  ASSERT_EQ(mprotect(p, 3 * 4096, PROT_READ | PROT_WRITE), 0) << strerror(errno);
  p[0] = 'k'; // the pages no post covers are writable at once
  p[2 * 4096] = 'k';
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    p[4096 + 10] = 'L';
    wrote = true;
  });
  EXPECT_TRUE(WaitFor([&] { return wrote.load() || Stats().fence_writers_held >= 1; }));
  EXPECT_FALSE(wrote.load()) << "the write went on while the DMA was pending";
  DrainWithin(target);
  writer.join();
  const std::string got = Received(0);
  EXPECT_EQ(got.size(), 4096u);
  EXPECT_EQ(got.find_first_not_of('K'), std::string::npos) << "the write reached the wire";
  EXPECT_EQ(p[4096 + 10], 'L');
  free(p);
}

// A page the program makes read-only while a post of it is in flight stays read-only after the
// completion: protect's release must not make it writable behind the program's back.
TEST_P(Protect, AnMprotectTakingWritesAwayOutlivesTheRelease) {
  char *p = Block(false, 4096);
  ASSERT_NE(p, nullptr);
  memset(p, 'M', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  ASSERT_EQ(mprotect(p, 4096, PROT_READ), 0) << strerror(errno);
  DrainWithin(target);
  EXPECT_EQ(Perms(p).substr(0, 3), "r--");
  EXPECT_EQ(Received(0), std::string(4096, 'M'));
  ASSERT_EQ(mprotect(p, 4096, PROT_READ | PROT_WRITE), 0);
  free(p);
}

// A thread that blocks every signal (a sigwait design blocks them before it makes its threads,
// which inherit the mask) writes to a posted page. The kernel kills a thread that faults with
// SIGSEGV blocked, so under mprotect the process died; it must be held like any writer, and the
// thread must still read back the mask it set.
// The masks nicmalloc's sigprocmask and pthread_sigmask keep answer as the C library's do: a
// query without a set is not refused for its how, a bad how with a set is EINVAL.
TEST(SignalMasks, AQueryWithoutASetTakesAnyHow) {
  sigset_t old;
  EXPECT_EQ(pthread_sigmask(99, nullptr, &old), 0);
  EXPECT_EQ(sigprocmask(99, nullptr, &old), 0);
  sigset_t none;
  sigemptyset(&none);
  EXPECT_EQ(pthread_sigmask(99, &none, &old), EINVAL);
}

TEST_P(Protect, AWriterThatBlocksEverySignalIsHeldNotKilled) {
  char *p = Block(true, 4096);
  memset(p, 'S', 4096);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  std::atomic<bool> wrote{false}, segv_reads_blocked{false};
  std::thread sigwaiter([&] {
    sigset_t all, now;
    sigfillset(&all);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &all, nullptr), 0);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &now), 0);
    segv_reads_blocked = sigismember(&now, SIGSEGV) == 1;
    std::thread writer([&] { // inherits the mask
      p[100] = 's';
      wrote = true;
    });
    writer.join();
    ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &all, nullptr), 0);
  });
  EXPECT_TRUE(WaitFor([&] { return wrote.load() || Stats().fence_writers_held >= 1; }));
  EXPECT_FALSE(wrote.load()) << "the write went on while the DMA was pending";
  DrainWithin(target);
  sigwaiter.join();
  EXPECT_TRUE(segv_reads_blocked.load()) << "the mask read back is not the one set";
  EXPECT_EQ(Received(0), std::string(4096, 'S'));
  EXPECT_EQ(p[100], 's');
  free(p);
}

char *handler_target;
std::atomic<bool> handler_wrote;
void WriteFromHandler(int) {
  handler_target[200] = 'h';
  handler_wrote = true;
}

// The same from a signal handler whose sa_mask holds every signal.
TEST_P(Protect, AHandlerWithEverySignalMaskedIsHeldNotKilled) {
  char *p = Block(true, 4096);
  memset(p, 'H', 4096);
  handler_target = p;
  handler_wrote = false;
  struct sigaction sa = {}, old = {}, back = {};
  sa.sa_handler = WriteFromHandler;
  sigfillset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  ASSERT_EQ(sigaction(SIGUSR2, nullptr, &back), 0);
  EXPECT_EQ(sigismember(&back.sa_mask, SIGSEGV), 1) << "the sa_mask read back is not the one set";
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  std::thread signalled([] { pthread_kill(pthread_self(), SIGUSR2); });
  EXPECT_TRUE(WaitFor([&] { return handler_wrote.load() || Stats().fence_writers_held >= 1; }));
  EXPECT_FALSE(handler_wrote.load()) << "the write went on while the DMA was pending";
  DrainWithin(target);
  signalled.join();
  EXPECT_EQ(Received(0), std::string(4096, 'H'));
  EXPECT_EQ(p[200], 'h');
  ASSERT_EQ(sigaction(SIGUSR2, &old, nullptr), 0);
  free(p);
}

// A page the program made read-only before posting it stays read-only after the completion:
// under mprotect the release made it writable again.
TEST_P(Protect, AReadOnlyPageStaysReadOnlyAfterItsPostCompletes) {
  char *p = Block(false, 4096);
  ASSERT_NE(p, nullptr);
  memset(p, 'R', 4096);
  ASSERT_EQ(mprotect(p, 4096, PROT_READ), 0) << strerror(errno);
  const int target = done_count.load() + 1;
  PostPaused(p, 4096);
  DrainWithin(target);
  EXPECT_EQ(Perms(p).substr(0, 3), "r--");
  EXPECT_EQ(Received(0), std::string(4096, 'R'));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    *(volatile char *)p = 'w';
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
      << "a write to the read-only page went through";
  ASSERT_EQ(mprotect(p, 4096, PROT_READ | PROT_WRITE), 0);
  free(p);
}

// Threads post and at once overwrite their buffer for the next message, with no fence call:
// protect alone must keep every message whole. A lost hold shows as a message of mixed bytes or
// of the next message's byte.
TEST_P(Protect, ManyThreadsOverwriteRightAfterPosting) {
  constexpr int kThreads = 4, kRounds = 40;
  constexpr size_t kSize = 8192;
  const int target = done_count.load() + kThreads * kRounds;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      char *p = Block(t % 2 == 0, kSize);
      for (int r = 0; r < kRounds; r++) {
        memset(p, 1 + t * kRounds + r, kSize); // the byte names the thread and the round
        Post(p, kSize);
        nic_poll(0);
      }
      nic_fence_write(p, kSize); // the last message is read before the buffer goes
      free(p);
    });
  for (auto &t : threads)
    t.join();
  DrainWithin(target);
  std::vector<int> seen(1 + kThreads * kRounds, 0);
  std::lock_guard<std::mutex> g(inbox.mu);
  ASSERT_EQ(inbox.msgs.size(), size_t(kThreads * kRounds));
  for (const std::string &m : inbox.msgs) {
    ASSERT_EQ(m.size(), kSize);
    const unsigned char b = static_cast<unsigned char>(m[0]);
    EXPECT_EQ(m, std::string(kSize, m[0])) << "a message was rewritten during its DMA";
    if (b < seen.size()) seen[b]++;
  }
  for (size_t b = 1; b < seen.size(); b++)
    EXPECT_EQ(seen[b], 1) << "message " << b << " sent " << seen[b] << " times";
}

// Threads post messages and at once free, realloc or rewrite what they posted, with slow random
// DMA: every message must arrive byte for byte as posted, and no write may have got through to
// a page in flight (fence_mismatches). nicmalloc's own writes used to release pages other posts
// still covered (deferred frees run by a completion on the poller), or to wait out the timeout
// under the backend's lock (its work items, allocated by threads that had exited, shared pages
// with the program's blocks of the next threads), letting the held writes through after it.
TEST_P(Protect, EveryMessageArrivesAsPostedWhileBlocksAreFreedAndRewritten) {
  fence_integrity::Checker checker;
  nic_endpoint *own = nic_sim_endpoint_create(fence_integrity::Receive, &checker, 0);
  ASSERT_NE(own, nullptr);
  const nic_stats before = Stats();
  const fence_integrity::Options opt;
  EXPECT_EQ(fence_integrity::Run(own, &checker, opt), 0);
  while (nic_sim_endpoint_destroy(own) == -EBUSY)
    nic_poll(0);
  const nic_stats after = Stats();
  EXPECT_EQ(checker.checked.load(), opt.total());
  EXPECT_EQ(checker.mismatched.load(), 0u)
      << "messages arrived modified; unprotected entries "
      << after.fence_unprotected - before.fence_unprotected << ", bypasses "
      << after.fence_bypasses - before.fence_bypasses << ", held "
      << after.fence_held_writes - before.fence_held_writes;
  EXPECT_EQ(after.fence_mismatches, before.fence_mismatches)
      << "writes got through to pages in flight";
  EXPECT_GT(after.fence_held_writes, before.fence_held_writes) << "no rewrite was ever held";
}

// Once nic_sga_post has handed its entries to the backend the NIC may read them, so a write of
// the posting thread there (inside the post: the backend's bookkeeping beside the program's
// blocks) must wait like any other. Under mprotect it was let through while the thread's own
// entries alone covered the page, and the page then stayed writable for every thread until the
// post returned: a write in that window reached the wire (the integrity test's last mismatch,
// about one message in 170,000). Here the sim is paused, so an unheld write is what it sends.
TEST_P(Protect, APostingThreadsWriteWaitsOnceItsEntryIsWithTheNic) {
  char *p = Block(true, 4096);
  ASSERT_NE(p, nullptr);
  memset(p, 'Q', 4096);
  const int target = done_count.load() + 1;
  const nic_stats before = Stats();
  PostPaused(p, 4096); // with the NIC now
  std::atomic<bool> held{false};
  std::thread nic([&] { // lets the DMA run once this thread's write is held (or never was)
    held = WaitFor([] { return Stats().fence_writers_held >= 1; });
    nic_sim_pause(nic_backend_active(), false);
  });
  p[100] = 'R';
  nic.join();
  DrainWithin(target);
  EXPECT_TRUE(held.load()) << "the posting thread's write was never held";
  EXPECT_EQ(Received(0), std::string(4096, 'Q')) << "the posting thread's write reached the wire";
  EXPECT_EQ(p[100], 'R') << "the write was lost";
  EXPECT_EQ(Stats().fence_mismatches, before.fence_mismatches);
  free(p);
}

// What a retry of deferred frees runs between taking blocks whose pages were clear and writing
// into them (nicmalloc's free key, mimalloc's free list), once it takes retry_block.
std::atomic<void *> retry_block{nullptr};
std::atomic<std::function<void()> *> retry_action{nullptr};
void RetryHook(nic_retry_phase phase, void *const *blocks, unsigned n) {
  if (phase != NIC_RETRY_TAKEN) return;
  for (unsigned i = 0; i < n; i++)
    if (blocks[i] == retry_block.load())
      if (std::function<void()> *f = retry_action.exchange(nullptr)) (*f)();
}

// A completion on the NIC's own thread makes a deferred free runnable; right then (after its
// pages were found clear, before its writes) a post of another block on the same page protects
// that page. The free's writes must wait for that post: made on the NIC's thread, which is never
// held, they used to release the page for every thread while the NIC still read it.
TEST_P(Protect, ADeferredFreeWaitsForAPostOfItsPageInsteadOfReleasingIt) {
  std::vector<char *> spare; // two blocks on one 4 KiB page: x, y
  char *x = nullptr, *y = nullptr;
  ASSERT_NO_FATAL_FAILURE(TwoBlocksOnOnePage(&x, &y, &spare));
  memset(x, 'X', 512);
  memset(y, 'Y', 512);
  nic_endpoint *nic_thread_ep = nic_sim_endpoint_create(Receive, &inbox, NIC_EP_ENGINE_COMPLETIONS);
  ASSERT_NE(nic_thread_ep, nullptr);
  const nic_stats before = Stats();
  const int target = done_count.load() + 2;
  nic_sim_pause(nic_backend_active(), true);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, x, 512), 0);
  ASSERT_EQ(nic_sga_post(&sga, nic_thread_ep, CountDone, this), 0);
  free(x);
  ASSERT_TRUE(nic_safety_is_deferred(x));
  std::atomic<bool> posted{false};
  std::function<void()> post_y = [&] {
    nic_sim_pause(nic_backend_active(), true); // y stays in flight until the test lets it go
    Post(y, 512);
    posted = true;
  };
  retry_block = x;
  retry_action = &post_y;
  nic_safety_retry_hook = RetryHook;
  nic_sim_pause(nic_backend_active(), false); // x's DMA, then its completion on the NIC thread
  ASSERT_TRUE(WaitFor([&] {
    return posted &&
           (Stats().fence_writers_held >= 1 || Stats().fence_bypasses > before.fence_bypasses);
  })) << "the free was never retried";
  const nic_stats during = Stats();
  EXPECT_EQ(during.fence_bypasses, before.fence_bypasses)
      << "the free's write released the page while y's post covered it";
  EXPECT_EQ(during.fence_mismatches, before.fence_mismatches);
  EXPECT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(y)))
      << "y's page is writable while its post is pending";
  EXPECT_GE(during.fence_writers_held, 1u) << "the free's write was not held";
  DrainWithin(target);
  EXPECT_TRUE(WaitFor([&] { return Stats().deferred_pending == before.deferred_pending; }))
      << "x was never freed";
  nic_safety_retry_hook = nullptr;
  EXPECT_EQ(Received(0), std::string(512, 'X'));
  EXPECT_EQ(Received(1), std::string(512, 'Y'));
  EXPECT_EQ(Stats().fence_bypasses, before.fence_bypasses);
  free(y);
  for (char *p : spare)
    free(p);
  while (nic_sim_endpoint_destroy(nic_thread_ep) == -EBUSY)
    nic_poll(0);
}

// What a completion runs between dropping the page references of a post of unref_page's page
// and making those pages writable again (the release is decided from the counts, so it comes
// after them): there the pages look clear to the counts and are still write-protected.
std::atomic<uintptr_t> unref_page{0};
std::atomic<std::function<void()> *> unref_action{nullptr};
void UnrefHook(const nic_sga_entry *e, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (reinterpret_cast<uintptr_t>(e[i].addr) >> 12 == unref_page.load() >> 12)
      if (std::function<void()> *f = unref_action.exchange(nullptr)) (*f)();
}

// Drains the posts (the last one of `posted`'s page) with `writer` run on a thread of its own
// while that post's completion sits in the window above; the completion goes on once the writer
// is done, held, or waiting in a fence. Returns whether a writer was held in the window.
class ProtectWindow : public Protect {
protected:
  bool DrainWithWriterInTheWindow(const void *posted, int target,
                                  const std::function<void()> &writer) {
    std::atomic<bool> wrote{false}, held{false};
    std::thread th;
    const uint64_t waits = Stats().fence_waits;
    std::function<void()> in_window = [&] {
      th = std::thread([&] {
        writer();
        wrote = true;
      });
      EXPECT_TRUE(WaitFor([&] {
        held = Stats().fence_writers_held >= 1;
        return wrote.load() || held.load() || Stats().fence_waits > waits;
      })) << "the writer neither finished nor waited";
    };
    unref_page = reinterpret_cast<uintptr_t>(posted);
    unref_action = &in_window;
    nic_safety_unref_hook = UnrefHook;
    DrainWithin(target);
    nic_safety_unref_hook = nullptr;
    EXPECT_EQ(unref_action.exchange(nullptr), nullptr) << "the completion never ran the writer";
    if (th.joinable()) th.join();
    EXPECT_TRUE(wrote.load());
    return held.load();
  }
  // Waits until every deferred free is made and the dataplane's live bytes are back at live.
  void ExpectAllFreed(const nic_stats &before, size_t live) {
    EXPECT_TRUE(WaitFor([&] { return Stats().deferred_pending == before.deferred_pending; }))
        << Stats().deferred_pending - before.deferred_pending << " frees still deferred";
    EXPECT_TRUE(WaitFor([&] { return Stats().dataplane_live == live; }))
        << "live dataplane bytes " << Stats().dataplane_live << ", " << live << " before";
  }
};

// The free thread (here: any thread retrying deferred frees) found the block's pages clear and
// wrote its free key and mimalloc's free list into a page still protected, and was held until
// the release: a held writer of posted memory in the serializer suites, about one run in 12. A
// free is made only once its pages are writable again; the completion retries it after the
// release.
TEST_P(ProtectWindow, ADeferredFreeWaitsUntilItsPagesAreWritableAgain) {
  const size_t live = Stats().dataplane_live;
  char *x = Block(true, 4096);
  ASSERT_NE(x, nullptr);
  memset(x, 'A', 4096);
  const int target = done_count.load() + 1;
  const nic_stats before = Stats();
  PostPaused(x, 4096);
  free(x);
  ASSERT_TRUE(nic_safety_is_deferred(x));
  EXPECT_FALSE(DrainWithWriterInTheWindow(x, target, [] { nic_safety_retry_deferred(); }))
      << "the retry wrote into the still protected page";
  EXPECT_EQ(Stats().fence_held_writes, before.fence_held_writes)
      << "a free's write into a page being unprotected was held";
  ExpectAllFreed(before, live);
  EXPECT_EQ(Received(0), std::string(4096, 'A'));
}

// The program frees a neighbour of the posted block on its page right then: with no reference
// left anywhere, free took its fast path and wrote into the page. It is deferred instead, and
// made once the page is writable.
TEST_P(ProtectWindow, AFreeOfANeighbourWaitsUntilThePageIsWritableAgain) {
  const size_t live = Stats().dataplane_live;
  std::vector<char *> spare; // two blocks on one 4 KiB page: x, y
  char *x = nullptr, *y = nullptr;
  ASSERT_NO_FATAL_FAILURE(TwoBlocksOnOnePage(&x, &y, &spare));
  for (char *p : spare)
    free(p);
  memset(x, 'X', 512);
  memset(y, 'Y', 512);
  const int target = done_count.load() + 1;
  const nic_stats before = Stats();
  PostPaused(x, 512);
  EXPECT_FALSE(DrainWithWriterInTheWindow(x, target, [y] { free(y); }))
      << "the free wrote into the still protected page";
  EXPECT_EQ(Stats().fence_held_writes, before.fence_held_writes)
      << "a free's write into a page being unprotected was held";
  EXPECT_GE(Stats().deferred_frees, before.deferred_frees + 1) << "the free was not deferred";
  EXPECT_TRUE(WaitFor([y] { return !nic_safety_is_deferred(y); })) << "y was never freed";
  free(x);
  ExpectAllFreed(before, live);
  EXPECT_EQ(Received(0), std::string(512, 'X'));
}

// nic_fence_write returned as soon as the counts were clear, and the write the program made
// next was held. It returns once the pages are writable.
TEST_P(ProtectWindow, AFenceReturnsOnceThePagesAreWritableAgain) {
  char *x = Block(true, 4096);
  ASSERT_NE(x, nullptr);
  memset(x, 'F', 4096);
  const int target = done_count.load() + 1;
  const nic_stats before = Stats();
  PostPaused(x, 4096);
  int rc = -1;
  EXPECT_FALSE(DrainWithWriterInTheWindow(x, target, [x, &rc] {
    rc = nic_fence_write(x, 4096);
    x[0] = 'G';
  })) << "the write after the fence was held";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(Stats().fence_held_writes, before.fence_held_writes);
  EXPECT_EQ(x[0], 'G');
  EXPECT_EQ(Received(0), std::string(4096, 'F'));
  free(x);
}

// A release that does not wait for the DMA (a NIC thread's write, a writer past the timeout) of
// a page a post still covers lets a write reach the wire: it counts as a mismatch, as detect
// would report it. Once no post covers the page, a release is no mismatch.
TEST_P(Protect, AReleaseWhileAPostCoversThePageCountsAMismatch) {
  char *p = Block(true, 4096);
  ASSERT_NE(p, nullptr);
  memset(p, 'K', 4096);
  const uintptr_t page = reinterpret_cast<uintptr_t>(p);
  const int target = done_count.load() + 1;
  const nic_stats before = Stats();
  PostPaused(p, 2048);
  ASSERT_TRUE(nic_fence_marked(page));
  nic_fence_release(page);
  EXPECT_FALSE(nic_fence_marked(page));
  EXPECT_EQ(Stats().fence_mismatches, before.fence_mismatches + 1);
  DrainWithin(target);
  EXPECT_EQ(Received(0), std::string(2048, 'K'));
  ASSERT_TRUE(nic_fence_mark(page, page + 4096)); // as if still protected, with nothing posted
  nic_fence_release(page);
  EXPECT_FALSE(nic_fence_marked(page));
  EXPECT_EQ(Stats().fence_mismatches, before.fence_mismatches + 1);
  free(p);
}

// uffd's fault thread could not start (EAGAIN, as under RLIMIT_NPROC): the warning said that
// userfaultfd write-protect was "not available here", as if the kernel had none.
TEST(FenceStart, AUffdWhoseThreadCannotStartSaysSo) {
  const ProbeResult r =
      run_probe({"NICMALLOC_FENCE=protect", "NICMALLOC_FENCE_PROTECT=uffd"}, {"protect-no-thread"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.num("post"), 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "its fault thread could not be started: Resource temporarily "
                               "unavailable); using mprotect"),
            1)
      << r.err;
  EXPECT_EQ(count_lines(r.err, "not available here"), 0) << r.err;
}

// The bitmap a fault handler reads: marking a run sets exactly its pages, across 64-page words
// and GiB leaves, and unmarking clears exactly them.
// mimalloc keeps a heap's own structure among the thread's ordinary blocks, so the pages of a
// post can hold nicmalloc's bookkeeping, which the post itself then writes (the sim growing its
// pool of work items). In a fresh process, so that the pool is empty and the thread new.
TEST(FencePost, APostNeverWaitsForItsOwnDma) {
  for (const char *mech : {"uffd", "mprotect"}) {
    const ProbeResult r = run_probe({std::string("NICMALLOC_FENCE_PROTECT=") + mech,
                                     "NICMALLOC_FENCE=protect", "NICMALLOC_FENCE_TIMEOUT_MS=1000"},
                                    {"post-beside-bookkeeping"});
    ASSERT_EQ(r.exit_code, 0) << mech << r.err;
    EXPECT_EQ(r.num("posts_done"), 1) << mech;
    EXPECT_EQ(r.num("held_writes"), 0) << mech << r.err;
    EXPECT_EQ(count_lines(r.err, "NICMALLOC_FENCE_TIMEOUT_MS"), 0) << mech << r.err;
  }
}

// The mechanism switch (benchmarks and tests) refused only while entries were in flight, but a
// post the backend refuses lowers that count before its pages are released: a switch in between
// left the release to the other mechanism, which cannot undo this one's protection (mprotect's
// page stayed read-only, unmarked; uffd's stayed write-protected). Here the page is protected
// as a post does it, with no entry in flight.
TEST_P(Protect, TheMechanismIsNotSwitchedWhileAPageIsProtected) {
  char *p = Block(true, 4096);
  ASSERT_NE(p, nullptr);
  memset(p, 'M', 4096);
  const nic_sga_entry e = ArenaEntry(p, 4096);
  nic_fence_protect(&e, 1);
  ASSERT_EQ(Stats().inflight_entries, 0u);
  const nic_fence_protect_with other =
      GetParam() == NIC_PROTECT_UFFD ? NIC_PROTECT_MPROTECT : NIC_PROTECT_UFFD;
  EXPECT_EQ(nic_fence_protect_use(other), -EBUSY);
  ASSERT_STREQ(nic_fence_protect_name(), Name(GetParam())) << "switched while a page is protected";
  nic_fence_unprotect(&e, 1);
  EXPECT_FALSE(nic_fence_marked(reinterpret_cast<uintptr_t>(p)));
  p[0] = 'm'; // held (until the timeout) or killed if the page were still protected
  const int rc = nic_fence_protect_use(other);
  EXPECT_TRUE(rc == 0 || rc == -ENOTSUP) << "once no page is protected: " << rc;
  free(p);
}

// Under mprotect the fence's SIGSEGV handler also gets the SIGSEGVs a program sends itself
// (raise, kill, sigqueue): no fault, they never come again. With the default action before the
// fence's handler, it set the default and returned: the signal was lost (and the handler with
// it), where the program expected to die. It is sent again, to the same thread.
TEST_P(Protect, ARaisedSigsegvGetsTheDefaultAction) {
  if (GetParam() != NIC_PROTECT_MPROTECT) GTEST_SKIP() << "no SIGSEGV handler under userfaultfd";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    raise(SIGSEGV);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV)
      << "raise(SIGSEGV) was swallowed: the child exited with " << WEXITSTATUS(status);
}

// The same, with what the program set for SIGSEGV before the fence started (its first post):
// a handler gets the signal with its siginfo (si_code SI_TKILL from raise, SI_USER from kill),
// its sa_mask blocked, and once only (SA_RESETHAND); SIG_IGN ignores it; the default kills.
TEST(FenceSignals, ASentSigsegvGetsWhatTheProgramSetBeforeTheFence) {
  const std::vector<std::string> env = {"NICMALLOC_FENCE=protect",
                                        "NICMALLOC_FENCE_PROTECT=mprotect"};
  for (const char *how : {"raise", "kill"}) {
    ProbeResult r = run_probe(env, {"segv-sent", "default", how});
    EXPECT_EQ(r.exit_code, -SIGSEGV) << how << r.out << r.err;
    EXPECT_EQ(r.values.count("survived_1"), 0u) << how << r.out;
    r = run_probe(env, {"segv-sent", "ignore", how});
    EXPECT_EQ(r.exit_code, 0) << how << r.err;
    EXPECT_EQ(r.values.count("survived_2"), 1u) << how << r.out;
    r = run_probe(env, {"segv-sent", "handler", how});
    EXPECT_EQ(r.exit_code, -SIGSEGV) << how << " the second one: the handler was reset" << r.err;
    ASSERT_EQ(r.values.count("survived_1"), 1u) << how << r.out << r.err;
    EXPECT_EQ(r.num("handled"), 1) << how;
    EXPECT_EQ(r.num("handler_code"), std::string(how) == "kill" ? SI_USER : SI_TKILL) << how;
    EXPECT_EQ(r.num("handler_usr1_blocked"), 1) << how << ": its sa_mask was not blocked";
  }
}

// A registration pins its pages for writing. One that began before protect had a mechanism
// (the program's first post starts it) was not recorded, and the guard that records them was
// installed only then: the first post could protect pages being pinned (under uffd the
// registration then waited inside io_uring_register or ibv_reg_mr, holding what the completion
// needs). Under NICMALLOC_FENCE=protect the guard is there from the start, and the first
// protect waits for a registration in progress. In a process where protect has not started.
TEST(FencePins, TheFirstProtectWaitsForARegistrationBegunBeforeIt) {
  if (nic_fence_protect_started()) GTEST_SKIP() << "protect was started by an earlier test";
  EXPECT_NE(nic_sub_pages_guard(), nullptr) << "no guard before the first post";
  char *p = static_cast<char *>(nic_aligned_alloc(4096, 4096));
  ASSERT_NE(p, nullptr);
  memset(p, 'P', 4096);
  const uintptr_t page = reinterpret_cast<uintptr_t>(p);
  ASSERT_TRUE(nic_fence_pin_begin(page, page + 4096));
  const nic_sga_entry e = ArenaEntry(p, 4096);
  std::atomic<bool> protected_{false};
  std::thread poster([&] {
    nic_fence_protect(&e, 1); // the first: starts protect
    protected_ = true;
  });
  WaitFor([&] { return protected_.load() || nic_fence_gen_waiters > 0; });
  EXPECT_FALSE(nic_fence_marked(page)) << "the page was protected while it was being pinned";
  nic_fence_pin_end(page, page + 4096);
  poster.join();
  EXPECT_TRUE(nic_fence_marked(page));
  nic_fence_unprotect(&e, 1);
  free(p);
}

// With vm.unprivileged_userfaultfd=0 (the default) a process without CAP_SYS_PTRACE may not
// handle kernel faults with userfaultfd, and protect fell back to mprotect. It may handle faults
// of user mode (UFFD_USER_MODE_ONLY): the program's writes are held as under uffd, the kernel's
// fail with EFAULT as under mprotect. The probe runs as nobody (setpriv), the test as root.
TEST(FenceUnprivileged, AProcessWithoutPrivilegeHoldsWritesWithUserModeUffd) {
  if (geteuid() != 0) GTEST_SKIP() << "runs the probe as another user: needs root";
  std::string allowed;
  if (FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r")) {
    char c = 0;
    if (fread(&c, 1, 1, f) == 1) allowed = c;
    fclose(f);
  }
  if (allowed != "0") GTEST_SKIP() << "any process may handle kernel faults here";
  if (access("/usr/bin/setpriv", X_OK)) GTEST_SKIP() << "no setpriv";
  const ProbeResult r = run_program(
      "/usr/bin/setpriv",
      {"NICMALLOC_FENCE=protect", "NICMALLOC_FENCE_PROTECT=auto",
       "NICMALLOC_SIM_DELAYS=fixed:2000000"},
      {"--reuid=65534", "--regid=65534", "--clear-groups", NIC_PROBE_PATH, "kernel-write"});
  if (r.exit_code == 126 || r.exit_code == 127)
    GTEST_SKIP() << "nobody cannot run the probe where it was built: " << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.values.count("fence") ? r.values.at("fence") : "",
            "uffd, user-mode faults only: kernel writes get EFAULT")
      << r.err;
  EXPECT_EQ(r.num("writer_held"), 1) << "the write was not held";
  EXPECT_EQ(r.num("kernel_write_errno"), EFAULT);
}

TEST(FencePages, MarkAndUnmarkCoverExactlyTheRun) {
  const uintptr_t gib = uintptr_t(1) << 30, page = 4096;
  const uintptr_t start = 0x500000000000 + gib - 3 * page, end = start + 70 * page; // 2 leaves
  ASSERT_TRUE(nic_fence_mark(start, end));
  EXPECT_FALSE(nic_fence_marked(start - page));
  for (uintptr_t a = start; a < end; a += page)
    ASSERT_TRUE(nic_fence_marked(a + 100)) << std::hex << a;
  EXPECT_FALSE(nic_fence_marked(end));
  ASSERT_TRUE(nic_fence_mark(end + page, end + 2 * page));
  nic_fence_unmark(start + page, end);
  EXPECT_TRUE(nic_fence_marked(start));
  for (uintptr_t a = start + page; a < end; a += page)
    ASSERT_FALSE(nic_fence_marked(a)) << std::hex << a;
  EXPECT_TRUE(nic_fence_marked(end + page)) << "a neighbour run was cleared";
  nic_fence_unmark(start, end + 2 * page);
  EXPECT_FALSE(nic_fence_marked(start));
  EXPECT_FALSE(nic_fence_marked(end + page));
}

// Under protect every free goes through the free thread, but deferred_frees counts only the
// frees of memory in flight or held, as its description says: blocks freed after their posts
// completed count nothing, one freed while its post is in flight counts one.
TEST_P(Protect, DeferredFreesCountsOnlyFreesOfMemoryInFlight) {
  const nic_stats before = Stats();
  for (int i = 0; i < 10; i++) {
    char *b = Block(true, 16384);
    memset(b, 'a' + i, 16384);
    const int target = done_count.load() + 1;
    Post(b, 16384);
    DrainWithin(target);
    free(b);
  }
  EXPECT_TRUE(WaitFor([] { return Stats().deferred_pending == 0; }));
  EXPECT_EQ(Stats().deferred_frees, before.deferred_frees) << "frees after the completions";
  char *b = Block(true, 16384);
  memset(b, 'z', 16384);
  const int target = done_count.load() + 1;
  PostPaused(b, 16384);
  free(b);
  EXPECT_EQ(Stats().deferred_frees, before.deferred_frees + 1) << "a free while in flight";
  DrainWithin(target);
  EXPECT_TRUE(WaitFor([] { return Stats().deferred_pending == 0; }));
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Protect,
                         testing::Values(NIC_PROTECT_UFFD, NIC_PROTECT_MPROTECT),
                         [](const testing::TestParamInfo<nic_fence_protect_with> &i) {
                           return std::string(Name(i.param));
                         });
INSTANTIATE_TEST_SUITE_P(Mechanisms, ProtectRefused,
                         testing::Values(NIC_PROTECT_UFFD, NIC_PROTECT_MPROTECT),
                         [](const testing::TestParamInfo<nic_fence_protect_with> &i) {
                           return std::string(Name(i.param));
                         });
INSTANTIATE_TEST_SUITE_P(Mechanisms, ProtectWindow,
                         testing::Values(NIC_PROTECT_UFFD, NIC_PROTECT_MPROTECT),
                         [](const testing::TestParamInfo<nic_fence_protect_with> &i) {
                           return std::string(Name(i.param));
                         });

} // namespace
