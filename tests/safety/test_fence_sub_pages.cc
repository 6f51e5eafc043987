// NICMALLOC_FENCE=protect and the pass that gives back the free 4 KiB pages inside dataplane
// pages in use (alloc/heap/sub_pages.h): it rewrites the free lists of the pages it passes, and
// a free block may share its 4 KiB page with a block a post has write-protected. The sim is
// paused, so that the DMA stays in flight as long as the test wants; the fence's timeout is far
// beyond the test's deadlines, so that only the completion can let a held writer go.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <mimalloc.h> // before chunks.h: its C++ parts cannot sit in extern "C"

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "chunk_reg.h"
#include "chunks.h"
#include "fence.h"
#include "safety.h"
#include "sim_nic.h"
#include "sub_pages.h"
#include "sub_pages_scan.h"
#include "thread.h"
}

#include "sim_endpoint_fixture.h"

namespace {

// Polls cond until it holds or the deadline passes.
bool WaitFor(const std::function<bool()> &cond, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}
constexpr std::chrono::milliseconds kBroken{20000}; // for a broken build, not a measurement
constexpr std::chrono::milliseconds kLockDeadline{5000};
constexpr unsigned kFenceTimeoutMs = 30000;
constexpr size_t kBlock = 512;

// fork's prepare takes the chunks lock (NIC_FORK_CHUNKS); the child leaves at once.
void ForkAChild() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
}

uint64_t WritersHeld() {
  return __atomic_load_n(&nic_safety_ctr.fence_writers_held, __ATOMIC_RELAXED);
}

const char *Name(nic_fence_protect_with w) {
  return w == NIC_PROTECT_UFFD ? "uffd" : "mprotect";
}

// A thread that runs what it is given, in turn: the pass runs on the thread that owns the
// pages, over its own heap.
class Owner {
public:
  Owner()
      : th([this] {
          for (unsigned n = 0;; n++) {
            std::function<void()> fn;
            {
              std::unique_lock<std::mutex> g(mu);
              cv.wait(g, [&] { return tasks.size() > n; });
              fn = tasks[n];
            }
            if (!fn) return;
            fn();
            done = n + 1;
          }
        }) {}
  ~Owner() {
    Async(nullptr);
    th.join();
  }
  void Async(std::function<void()> fn) {
    std::lock_guard<std::mutex> g(mu);
    tasks.push_back(std::move(fn));
    cv.notify_one();
  }
  bool Sync(std::function<void()> fn) {
    Async(std::move(fn));
    return WaitFor([this] { return Done() == Asked(); }, kBroken);
  }
  unsigned Done() const { return done.load(); }
  unsigned Asked() {
    std::lock_guard<std::mutex> g(mu);
    return tasks.size();
  }

private:
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::function<void()>> tasks; // nullptr: the end
  std::atomic<unsigned> done{0};
  std::thread th;
};

// On the owner: kBlock-byte dataplane blocks (posted directly: no shorter entry is copied), all
// freed but one, returned, chosen so that the rest of its 4 KiB page and the whole next one hold
// free blocks only, inside one mimalloc page. The next page can then go, and the first keeps
// free blocks the pass relinks. nullptr if no block is so placed.
char *OneBlockBesideAFreePage() {
  std::vector<char *> blocks;
  std::set<uintptr_t> ours;
  for (int i = 0; i < 512; i++) {
    blocks.push_back(static_cast<char *>(nic_malloc(kBlock)));
    ours.insert(reinterpret_cast<uintptr_t>(blocks.back()));
  }
  char *x = nullptr;
  for (char *b : blocks) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(b), page = a & ~uintptr_t{4095};
    // 64 KiB mimalloc pages of such blocks: the 4 KiB pages from the second to the fifteenth
    // hold blocks of that page only.
    if (x || a + kBlock > page + 4096 || (page & 0xffff) < 0x1000 || (page & 0xffff) > 0xd000)
      continue;
    bool all = true;
    for (uintptr_t c = a - 8 * kBlock; c < a + 20 * kBlock; c += kBlock)
      all &= ours.count(c) == 1;
    if (all) x = b;
  }
  for (char *b : blocks)
    if (b != x) free(b);
  if (x) memset(x, 'X', kBlock);
  return x;
}

// On the owner: its pass over its pages of x's chunk; as_nic makes it the pass of a thread
// protect never holds, as the sim's engine answers the nudge in its allocations.
size_t Pass(const char *x, bool as_nic = false) {
  if (as_nic) nic_fence_thread_is_nic();
  const size_t bytes = nic_sub_pages_drop_owned(nic_chunk_index(x), nullptr);
  if (as_nic) nic_fence_thread_gone();
  return bytes;
}

class SweepProtect : public SimEndpointTest,
                     public testing::WithParamInterface<nic_fence_protect_with> {
protected:
  void SetUp() override {
    saved = *nic_safety_config();
    struct nic_safety_config c = saved;
    c.fence = NIC_FENCE_PROTECT;
    c.fence_timeout_ms = kFenceTimeoutMs;
    nic_safety_config_set(&c);
    int rc = nic_fence_protect_use(GetParam());
    if (rc == -ENOTSUP) GTEST_SKIP() << Name(GetParam()) << " write-protect is not available here";
    ASSERT_EQ(rc, 0);
    SimEndpointTest::SetUp();
  }
  void TearDown() override {
    SimEndpointTest::TearDown();
    nic_safety_config_set(&saved);
  }
  std::string Received(size_t i) {
    std::lock_guard<std::mutex> g(inbox.mu);
    return i < inbox.msgs.size() ? inbox.msgs[i] : "(nothing)";
  }
  // Lets the NIC go and polls until the post is done and the owner's tasks are.
  void Resume(int target, Owner &owner) {
    nic_sim_pause(nic_backend_active(), false);
    EXPECT_TRUE(WaitFor(
        [&] {
          nic_poll(0);
          return done_count.load() >= target && owner.Done() == owner.Asked();
        },
        kBroken));
  }
  // Nothing let through, the free page beside x gone, and x sent and kept as written.
  void ExpectSweptAndSent(const nic_stats &before, size_t bytes, char *x) {
    const nic_stats after = Stats();
    EXPECT_EQ(after.fence_bypasses, before.fence_bypasses);
    EXPECT_EQ(after.fence_mismatches, before.fence_mismatches);
    EXPECT_GE(bytes, 4096u) << "the free page beside x did not go";
    EXPECT_EQ(Received(0), std::string(kBlock, 'X'));
    EXPECT_EQ(std::string(x, kBlock), std::string(kBlock, 'X'));
  }
  // On the owner, a block beside a free page, posted with the NIC paused: x (nullptr when no
  // block is so placed), the statistics before the post and the completions it reaches.
  char *PostBesideAFreePage(Owner &owner, nic_stats *before, int *target) {
    char *x = nullptr;
    if (!owner.Sync([&] { x = OneBlockBesideAFreePage(); }) || !x) return nullptr;
    *before = Stats();
    *target = done_count.load() + 1;
    PostPaused(x, kBlock);
    return x;
  }
  void PassLeavesThePostedPage(bool as_nic);
  struct nic_safety_config saved;
};

// The pass took the chunks lock before it took the blocks off the lists, and kept it while it
// wrote their list words: a word on the page of a posted block waited there for the completion,
// and the sim's engine (a receive buffer), the reaper and fork waited for the lock, until the
// fence's timeout let the write through on a page still in flight. The guard now keeps a pass
// off such pages (below); without it, a pass that waits for the completion holds nothing: a
// fork and a reaper pass go on meanwhile.
TEST_P(SweepProtect, APassHeldByAPostedPageHoldsNoLockOthersNeed) {
  struct Unguarded {
    Unguarded() { nic_sub_pages_guard_set(nullptr); }
    ~Unguarded() { nic_fence_pins_install(); }
  } unguarded;
  Owner owner;
  nic_stats before;
  int target = 0;
  char *x = PostBesideAFreePage(owner, &before, &target);
  ASSERT_NE(x, nullptr) << "no block with a free page beside it";
  ASSERT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(x)));
  std::atomic<size_t> bytes{0};
  owner.Async([&] { bytes = Pass(x); });
  // The counter itself: nic_get_stats takes the chunks lock too.
  ASSERT_TRUE(WaitFor([] { return WritersHeld() >= 1; }, kBroken))
      << "the pass wrote nothing on the posted page";
  std::atomic<bool> forked{false}, reaped{false};
  std::thread other([&] {
    ForkAChild();
    forked = true;
    nic_collect(); // a reaper pass: the live bytes of every chunk, under the chunks lock
    reaped = true;
  });
  EXPECT_TRUE(WaitFor([&] { return reaped.load(); }, kLockDeadline))
      << (forked ? "a reaper pass" : "fork") << " waited while the pass was held";
  EXPECT_NE(owner.Done(), owner.Asked()) << "the pass went on while the DMA was pending";
  Resume(target, owner);
  other.join();
  ExpectSweptAndSent(before, bytes, x);
  free(x);
}

// The pass wrote the free lists beside a posted block: held until the completion inside the
// program's allocation or poll, or, on a thread protect never holds (the sim's engine answers
// the nudge), making the page writable while the NIC read it. It passes over that page while
// the post is in flight, and gives its free neighbour back once the post is done.
void SweepProtect::PassLeavesThePostedPage(bool as_nic) {
  Owner owner;
  nic_stats before;
  int target = 0;
  char *x = PostBesideAFreePage(owner, &before, &target);
  ASSERT_NE(x, nullptr) << "no block with a free page beside it";
  std::atomic<size_t> bytes{0};
  owner.Async([&] { bytes = Pass(x, as_nic); });
  EXPECT_TRUE(
      WaitFor([&] { return owner.Done() == owner.Asked() || WritersHeld() >= 1; }, kBroken));
  EXPECT_EQ(owner.Done(), owner.Asked()) << "the pass waited for the DMA";
  EXPECT_EQ(Stats().fence_bypasses, before.fence_bypasses)
      << "the pass made the posted page writable";
  EXPECT_TRUE(nic_fence_marked(reinterpret_cast<uintptr_t>(x)));
  Resume(target, owner);
  EXPECT_TRUE(owner.Sync([&] { bytes += Pass(x, as_nic); }));
  ExpectSweptAndSent(before, bytes, x);
  free(x);
}

TEST_P(SweepProtect, APassWaitsForNoPostedPage) {
  PassLeavesThePostedPage(false);
}

TEST_P(SweepProtect, APassOnAThreadProtectNeverHoldsReleasesNoPostedPage) {
  PassLeavesThePostedPage(true);
}

// A 4 KiB page the pass gave back stays in its map after mimalloc freed the page that held
// blocks back there and built another over it, until the owner's next pass: live blocks lie on
// it then, and a post may protect it. A registration with a backend that holds page references
// (io_uring) faulted in every page of the map, under the chunks lock, as a write: on a page a
// post protects it was held there (uffd), fork, the reaper and the sim's engine waiting for the
// lock, or refused (mprotect: EFAULT). It now leaves such a page alone (in memory: its blocks
// were written) and waits for the post without the lock, as every registration does.
TEST_P(SweepProtect, ARegistrationWritesNoPageAPostProtects) {
  nic_backend *uring = nic_backend_start(NIC_BACKEND_URING);
  if (!uring) GTEST_SKIP() << "io_uring is not available here";
  Owner owner;
  char *x = nullptr;
  size_t bytes = 0;
  ASSERT_TRUE(owner.Sync([&] {
    x = OneBlockBesideAFreePage();
    if (x) bytes = Pass(x);
  }));
  ASSERT_NE(x, nullptr) << "no block with a free page beside it";
  ASSERT_GE(bytes, 4096u);
  const uintptr_t gone = (reinterpret_cast<uintptr_t>(x) | 4095) + 1;
  const unsigned index = nic_chunk_index(x), step = nic_step_index(x);
  // x's page empties, mimalloc frees it (another page of the size keeps blocks, so that it
  // is not kept for reuse) and builds another there.
  std::vector<char *> again;
  char *y = nullptr, *keep = nullptr;
  ASSERT_TRUE(owner.Sync([&] {
    const uintptr_t span = reinterpret_cast<uintptr_t>(x) & ~uintptr_t{0xffff};
    std::vector<char *> fill;
    while (!keep && fill.size() < 1024) {
      fill.push_back(static_cast<char *>(nic_malloc(kBlock)));
      if ((reinterpret_cast<uintptr_t>(fill.back()) & ~uintptr_t{0xffff}) != span)
        keep = fill.back();
    }
    for (char *p : fill)
      if (p != keep) free(p);
    free(x);
    for (int i = 0; i < 2048 && !y; i++) {
      again.push_back(static_cast<char *>(nic_malloc(kBlock)));
      const uintptr_t a = reinterpret_cast<uintptr_t>(again.back());
      if (a >= gone && a + kBlock <= gone + 4096) y = again.back();
    }
  }));
  ASSERT_NE(y, nullptr) << "no block of a new page on the page given back";
  memset(y, 'X', kBlock);
  const nic_stats before = Stats();
  const int target = done_count.load() + 1;
  PostPaused(y, kBlock);
  ASSERT_TRUE(nic_fence_marked(gone));
  std::atomic<int> rc{1};
  std::atomic<bool> forked{false};
  std::thread reg([&] {
    nic_registration r;
    rc = nic_chunk_register_with(index, step, uring, &r);
  });
  std::thread other([&] {
    ForkAChild();
    forked = true;
  });
  EXPECT_TRUE(WaitFor([&] { return forked.load(); }, kLockDeadline))
      << "fork waited while the step was being registered";
  Resume(target, owner);
  reg.join();
  other.join();
  EXPECT_EQ(rc.load(), 0);
  const nic_stats after = Stats();
  EXPECT_EQ(after.fence_bypasses, before.fence_bypasses);
  EXPECT_EQ(after.fence_mismatches, before.fence_mismatches);
  EXPECT_EQ(Received(0), std::string(kBlock, 'X'));
  ASSERT_TRUE(owner.Sync([&] {
    for (char *p : again)
      free(p);
    free(keep);
  }));
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, SweepProtect,
                         testing::Values(NIC_PROTECT_UFFD, NIC_PROTECT_MPROTECT),
                         [](const testing::TestParamInfo<nic_fence_protect_with> &i) {
                           return std::string(Name(i.param));
                         });

} // namespace
