// fork(): the child of a nicmalloc process must keep allocating, freeing and exec'ing, even when
// other threads were inside the allocator at the moment of the fork. A child never uses gtest
// macros (it must not report into the parent's test run); it answers through its exit status,
// and alarm() turns a deadlock into a SIGALRM death instead of a hung test. The suite runs on
// the sim backend (tests/CMakeLists.txt), so that parent threads can have posts in flight.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
#include "probe_runner.h"

namespace {

// Generous: a healthy child finishes in milliseconds; this only bounds a deadlock.
constexpr unsigned kChildAlarmSeconds = 30;

// Exit statuses a child uses to say which step failed.
enum ChildStatus {
  kChildOk = 0,
  kParentBlockCorrupt = 10,
  kAllocFailed = 11,
  kWrongHeap = 12,
  kContentLost = 13,
  kStatsWrong = 14,
  kExecFailed = 15,
  kPipeFailed = 16,
  kInflightInherited = 17, // the child counted the parent's posts or deferred frees as its own
  kFreeDeferred = 18,      // the child's free of a block the parent had posted was deferred
  kParentsKey = 19,        // the child was handed a key of the parent's registrations
  kHoldLeft = 20,          // a hold reference no nic_release of the child can let go
  kDescriptorLeft = 21,    // a descriptor of nicmalloc's the parent's threads wait on
  kNoBackend = 22,         // the child could not open, register with or post to its own backend
  kParentsBackend = 23,    // the child posted on or destroyed an endpoint of the parent's
};

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return std::string("killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")" +
           (sig == SIGALRM ? ": the child deadlocked or hung" : "");
  }
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  return "status " + std::to_string(status);
}

// Runs body in a forked child and returns the raw wait status.
int in_child(const std::function<int()> &body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(kChildAlarmSeconds);
    _exit(body());
  }
  if (pid < 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

bool filled_with(const void *p, unsigned char byte, size_t n) {
  const unsigned char *c = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; i++)
    if (c[i] != byte) return false;
  return true;
}

struct Block {
  void *p;
  size_t size;
  unsigned char byte;
  bool dataplane;
};

// Allocates, fills, checks and frees a batch the way a busy child would. Returns a ChildStatus.
int exercise_allocator(int rounds) {
  std::vector<Block> blocks;
  for (int i = 0; i < rounds; i++) {
    size_t size = 16 + (size_t(i) * 997) % 70000;
    unsigned char byte = static_cast<unsigned char>(i * 7 + 1);
    void *control = malloc(size);
    void *dp = nic_malloc(size);
    nic_dataplane_begin();
    void *scoped = malloc(size);
    nic_dataplane_end();
    void *zeroed = nic_calloc(1, size);
    if (!control || !dp || !scoped || !zeroed) return kAllocFailed;
    if (nic_is_dataplane(control) || !nic_is_dataplane(dp) || !nic_is_dataplane(scoped) ||
        !nic_is_dataplane(zeroed))
      return kWrongHeap;
    if (!filled_with(zeroed, 0, size)) return kContentLost;
    for (void *p : {control, dp, scoped, zeroed}) {
      memset(p, byte, size);
      blocks.push_back({p, size, byte, nic_is_dataplane(p) != 0});
    }
    void *grown = realloc(blocks[blocks.size() - 3].p, size * 2); // dp stays dp
    if (!grown || !nic_is_dataplane(grown)) return kWrongHeap;
    if (!filled_with(grown, byte, size)) return kContentLost;
    memset(grown, byte, size * 2);
    blocks[blocks.size() - 3].p = grown;
    blocks[blocks.size() - 3].size = size * 2;
  }
  for (const Block &b : blocks) {
    if (!filled_with(b.p, b.byte, b.size)) return kContentLost;
    free(b.p);
  }
  return kChildOk;
}

TEST(Fork, ChildReadsFreesAllocatesAndExecs) {
  nic_stats parent_before = NIC_STATS_INIT;
  nic_get_stats(&parent_before);
  std::vector<Block> parent;
  for (int i = 0; i < 64; i++) {
    size_t size = 32 + size_t(i) * 1500;
    bool dp = i % 2;
    void *p = dp ? nic_malloc(size) : malloc(size);
    ASSERT_NE(p, nullptr);
    unsigned char byte = static_cast<unsigned char>(0x40 + i);
    memset(p, byte, size);
    parent.push_back({p, size, byte, dp});
  }

  int status = in_child([&] {
    for (const Block &b : parent)
      if (!filled_with(b.p, b.byte, b.size) || (nic_is_dataplane(b.p) != 0) != b.dataplane)
        return int(kParentBlockCorrupt);
    // Free half of what the parent allocated, from both heaps.
    for (size_t i = 0; i < parent.size(); i += 2)
      free(parent[i].p);
    for (size_t i = 1; i < parent.size(); i += 4)
      free(parent[i].p);
    if (int rc = exercise_allocator(200)) return rc;
    nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    if (s.invalid_frees != parent_before.invalid_frees ||
        s.double_frees != parent_before.double_frees)
      return int(kStatsWrong);
    // exec must work from a child that has used the allocator; status 7 proves the shell ran.
    const char *argv[] = {"/bin/sh", "-c", "exit 7", nullptr};
    execv("/bin/sh", const_cast<char *const *>(argv));
    return int(kExecFailed);
  });
  ASSERT_TRUE(WIFEXITED(status)) << describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 7) << describe_status(status) << " (see ChildStatus)";

  for (const Block &b : parent) {
    EXPECT_TRUE(filled_with(b.p, b.byte, b.size)) << "the child's frees changed parent memory";
    free(b.p);
  }
  nic_stats parent_after = NIC_STATS_INIT;
  nic_get_stats(&parent_after);
  EXPECT_EQ(parent_after.dataplane_live, parent_before.dataplane_live);
  EXPECT_EQ(parent_after.invalid_frees, parent_before.invalid_frees);
  EXPECT_EQ(parent_after.double_frees, parent_before.double_frees);
}

// Threads that are inside malloc, nic_malloc, thread set-up and nic_get_stats when fork() runs
// are the way a lock held across fork deadlocks the child.
TEST(Fork, ForkWhileOtherThreadsHammerTheAllocator) {
  std::atomic<bool> stop{false};
  std::atomic<long> work{0};
  auto hammer = [&](unsigned seed, bool dataplane) {
    std::mt19937 rng(seed);
    std::vector<void *> live(64, nullptr);
    while (!stop.load(std::memory_order_relaxed)) {
      size_t slot = rng() % live.size();
      free(live[slot]);
      size_t size = 1 + rng() % 20000;
      live[slot] = dataplane && rng() % 2 ? nic_malloc(size) : malloc(size);
      if (live[slot]) memset(live[slot], 0x5a, size);
      work.fetch_add(1, std::memory_order_relaxed);
    }
    for (void *p : live)
      free(p);
  };
  // Thread start and exit take the thread-list lock; stats take both locks.
  auto churn = [&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::thread([] { free(nic_malloc(100)); }).join();
      nic_stats s = NIC_STATS_INIT;
      nic_get_stats(&s);
    }
  };
  std::thread t1(hammer, 1, false), t2(hammer, 2, true), t3(churn);
  while (work.load() < 1000)
    std::this_thread::yield();

  std::vector<std::string> failures;
  for (int round = 0; round < 30; round++) {
    int status = in_child([] {
      if (int rc = exercise_allocator(50)) return rc;
      nic_stats s = NIC_STATS_INIT;
      nic_get_stats(&s);
      // Threads work in the child too, with their own fresh dataplane heaps.
      int rc = kChildOk;
      std::thread([&] { rc = exercise_allocator(20); }).join();
      return rc;
    });
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failures.push_back("round " + std::to_string(round) + ": " + describe_status(status));
  }
  stop = true;
  t1.join();
  t2.join();
  t3.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " children failed, first: " << failures[0];
}

TEST(Fork, ForkFromAThreadThatNeverAllocated) {
  // The forking thread has no nicmalloc state yet; in the child it is the only thread.
  int status = -1;
  std::thread([&] { status = in_child([] { return exercise_allocator(50); }); }).join();
  ASSERT_TRUE(WIFEXITED(status)) << describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << describe_status(status) << " (see ChildStatus)";
}

// mlock is not inherited: the child's view of the parent's chunks is "mapped, not pinned". The
// chunk reaper may release an empty chunk at any moment, so chunk counts are compared only when
// the parent's created/released counters show nothing changed around the fork.
TEST(Fork, ChildReportsInheritedChunksUnpinned) {
  void *keep = nic_malloc(4096); // makes sure a chunk is mapped
  ASSERT_NE(keep, nullptr);
  nic_stats parent = NIC_STATS_INIT;
  nic_get_stats(&parent);
  ASSERT_GE(parent.chunks_live, 1u);
  if (geteuid() == 0) {
    EXPECT_GT(parent.dataplane_pinned, 0u) << "root can always mlock";
  }

  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  int status = in_child([&] {
    close(fds[0]);
    nic_stats child[2] = {NIC_STATS_INIT, NIC_STATS_INIT};
    nic_get_stats(&child[0]);
    // A chunk the child maps itself is locked by the child, so it counts as pinned.
    std::vector<void *> big;
    for (int i = 0; i < 4; i++) {
      big.push_back(nic_malloc(parent.chunk_size / 2));
      nic_get_stats(&child[1]);
      if (child[1].chunks_created > child[0].chunks_created) break;
    }
    ssize_t n = write(fds[1], child, sizeof child);
    for (void *p : big)
      free(p);
    return n == ssize_t(sizeof child) ? int(kChildOk) : int(kPipeFailed);
  });
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  close(fds[1]);
  nic_stats child[2] = {NIC_STATS_INIT, NIC_STATS_INIT};
  ssize_t got = read(fds[0], child, sizeof child);
  close(fds[0]);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << describe_status(status);
  ASSERT_EQ(got, ssize_t(sizeof child));
  const bool parent_chunks_steady = after.chunks_released == parent.chunks_released &&
                                    after.chunks_created == parent.chunks_created;

  EXPECT_EQ(child[0].dataplane_pinned, 0u) << "the child holds no lock on inherited chunks";
  EXPECT_EQ(child[0].dataplane_live, parent.dataplane_live);
  if (parent_chunks_steady) {
    EXPECT_EQ(child[0].chunks_live, parent.chunks_live);
    EXPECT_EQ(child[0].dataplane_mapped, parent.dataplane_mapped);
  }
  ASSERT_GT(child[1].chunks_created, child[0].chunks_created)
      << "the child mapped a chunk of its own";
  if (geteuid() == 0) {
    // Pinned in steps: the child's own block at least, nothing past the chunks it mapped.
    EXPECT_GE(child[1].dataplane_backed, parent.chunk_size / 2)
        << "the child's own block is backed and locked in the child";
    EXPECT_LE(child[1].dataplane_pinned,
              (child[1].chunks_created - child[0].chunks_created) * parent.chunk_size)
        << "only the chunks the child mapped itself are pinned in the child";
  }

  EXPECT_EQ(after.chunks_created, parent.chunks_created) << "the child's chunk is not the parent's";
  if (parent_chunks_steady) {
    EXPECT_EQ(after.dataplane_pinned, parent.dataplane_pinned) << "the parent's pins are intact";
  }
  free(keep);
}

// Waits up to deadline for pid to end; false (and pid killed and reaped) when it did not.
bool wait_with_deadline(pid_t pid, std::chrono::milliseconds deadline, int *status) {
  int pidfd = int(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd pfd = {pidfd, POLLIN, 0};
    int n;
    while ((n = poll(&pfd, 1, int(deadline.count()))) < 0 && errno == EINTR) {
    }
    close(pidfd);
    if (n == 1) return waitpid(pid, status, 0) == pid;
  } else { // no pidfd (before Linux 5.3): poll the exit, bounded by the deadline
    auto end = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < end) {
      if (waitpid(pid, status, WNOHANG) == pid) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return false;
}

struct Completions {
  std::atomic<long> posted{0}, done{0};
  static void Done(void *arg, int) { static_cast<Completions *>(arg)->done++; }
};

// Parent threads post on the sim backend with random sizes and pauses, free or reallocate
// blocks still in flight (deferred frees, moves) and read statistics, while the main thread
// forks: each lock the NIC path takes (deferred frees, pressure model, registration cache,
// holds...) is held by some parent thread at some fork. The child frees a block the parent had
// posted, reads statistics and execs. Its completion never comes in the child, so the child
// must see nothing in flight and no free deferred, its own or the parent's. The threads'
// completions run on the NIC's thread; the main thread's own posts complete only when it
// polls, so they are surely in flight when it forks.
TEST(Fork, ChildrenOfThreadsWithPostsInFlightNeverHang) {
  nic_endpoint *engine_ep = nic_sim_endpoint_create(nullptr, nullptr, NIC_EP_ENGINE_COMPLETIONS);
  nic_endpoint *polled_ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(engine_ep, nullptr) << "the suite runs with NICMALLOC_BACKEND=sim";
  ASSERT_NE(polled_ep, nullptr);

  std::atomic<bool> stop{false};
  std::atomic<long> post_errors{0};
  auto poster = [&](unsigned seed) {
    std::mt19937 rng(seed);
    Completions c;
    std::vector<void *> kept(16, nullptr);
    while (!stop.load(std::memory_order_relaxed)) {
      while (c.posted - c.done > 32 && !stop.load(std::memory_order_relaxed))
        std::this_thread::yield();       // the NIC's thread completes them
      size_t size = 600 + rng() % 30000; // above the copy threshold: posted in place
      void *p = rng() % 4 ? nic_malloc(size) : malloc(size); // control memory: the cache
      if (!p) continue;
      memset(p, int(rng()), size);
      nic_sga sga;
      int rc = nic_sga_init(&sga, 0);
      if (rc == 0) rc = nic_sga_add(&sga, p, size);
      if (rc == 0) rc = nic_sga_post(&sga, engine_ep, Completions::Done, &c);
      if (rc == 0)
        c.posted++;
      else
        post_errors++;
      switch (rng() % 4) {
      case 0: // freed in flight: deferred
        free(p);
        break;
      case 1: { // moved in flight, the old block freed at completion
        void *q = realloc(p, size * 2);
        free(q ? q : p);
        break;
      }
      default: { // freed later, maybe still in flight
        size_t slot = rng() % kept.size();
        free(kept[slot]);
        kept[slot] = p;
      }
      }
      if (rng() % 8 == 0) {
        nic_stats s = NIC_STATS_INIT;
        nic_get_stats(&s);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50)); // random pacing
    }
    for (void *p : kept)
      free(p);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (c.done < c.posted && std::chrono::steady_clock::now() < end)
      std::this_thread::yield();
  };
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < 3; i++)
    threads.emplace_back(poster, 100 + i);

  // At least kMinForks whatever the machine's load; more, up to kMaxForks, while time allows.
  constexpr int kMinForks = 50, kMaxForks = 200;
  constexpr auto kBudget = std::chrono::seconds(60);
  constexpr auto kChildDeadline = std::chrono::seconds(10); // healthy: milliseconds
  auto test_end = std::chrono::steady_clock::now() + kBudget;
  int forks = 0, hung = 0, inflight_at_fork = 0;
  std::vector<std::string> failures;
  Completions mine;
  while (forks < kMinForks || (forks < kMaxForks && std::chrono::steady_clock::now() < test_end)) {
    // A block posted (in flight until this thread polls), and one freed while posted.
    const size_t size = 4096 + size_t(forks % 7) * 1000;
    void *posted = nic_malloc(size), *freed = nic_malloc(size);
    ASSERT_NE(posted, nullptr);
    ASSERT_NE(freed, nullptr);
    memset(posted, 0x11, size);
    memset(freed, 0x22, size);
    nic_sga sga;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, posted, size), 0);
    ASSERT_EQ(nic_sga_add(&sga, freed, size), 0);
    ASSERT_EQ(nic_sga_post(&sga, polled_ep, Completions::Done, &mine), 0);
    mine.posted++;
    free(freed);
    if (mine.done < mine.posted) inflight_at_fork++;

    pid_t pid = fork();
    if (pid == 0) {
      alarm(kChildAlarmSeconds);
      nic_stats s = NIC_STATS_INIT;
      nic_get_stats(&s);
      if (s.inflight_posts || s.inflight_entries || s.deferred_pending) _exit(kInflightInherited);
      if (int rc = exercise_allocator(5)) _exit(rc);
      free(posted);
      nic_get_stats(&s);
      if (s.deferred_pending) _exit(kFreeDeferred);
      const char *argv[] = {"/bin/true", nullptr};
      execv("/bin/true", const_cast<char *const *>(argv));
      _exit(kExecFailed);
    }
    ASSERT_GT(pid, 0) << strerror(errno);
    forks++;
    int status = 0;
    if (!wait_with_deadline(pid, kChildDeadline, &status))
      hung++;
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failures.push_back("fork " + std::to_string(forks) + ": " + describe_status(status));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (mine.done < mine.posted && std::chrono::steady_clock::now() < end)
      nic_poll(0);
    ASSERT_EQ(mine.done.load(), mine.posted.load()) << "the parent's own post never completed";
    free(posted);
  }
  stop = true;
  for (std::thread &t : threads)
    t.join();
  printf("forks run / hung: %d / %d (%d failed; the main thread's post in flight at %d forks; "
         "%ld posts refused)\n",
         forks, hung, int(failures.size()), inflight_at_fork, post_errors.load());
  EXPECT_EQ(hung, 0) << "children hung in the allocator, on a lock a parent thread held at fork";
  EXPECT_TRUE(failures.empty()) << failures.size() << " children failed, first: " << failures[0];
  nic_stats end = NIC_STATS_INIT;
  nic_get_stats(&end);
  EXPECT_EQ(end.inflight_posts, 0u);
  EXPECT_EQ(nic_sim_endpoint_destroy(engine_ep), 0);
  EXPECT_EQ(nic_sim_endpoint_destroy(polled_ep), 0);
}

// Threads taking and letting go of holds while the program forks: in each child, once every
// hold its table keeps is released, no page is held and the blocks' frees are done at once. A
// thread that had taken the page's reference but not yet entered the hold in the table (it waits
// for the table's lock, which fork holds) left the child a reference nothing could let go, and
// the free of that block was deferred for good.
TEST(Fork, ChildrenOfThreadsTakingHoldsKeepOnlyTheHoldsTheyCanRelease) {
  constexpr int kThreads = 2, kForks = 60;
  void *blocks[kThreads];
  for (void *&b : blocks) {
    b = nic_malloc(4096);
    ASSERT_NE(b, nullptr);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (void *b : blocks)
    threads.emplace_back([&stop, b] {
      while (!stop.load(std::memory_order_relaxed))
        if (nic_hold(b) == 0) nic_release(b);
    });
  std::vector<std::string> failures;
  for (int f = 0; f < kForks; f++) {
    int status = in_child([&] {
      for (void *b : blocks)
        while (nic_release(b) == 0) {
        }
      nic_stats s = NIC_STATS_INIT;
      nic_get_stats(&s);
      if (s.holds != 0) return int(kStatsWrong);
      for (void *b : blocks)
        free(b);
      nic_get_stats(&s);
      return s.deferred_pending ? int(kHoldLeft) : int(kChildOk);
    });
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      failures.push_back("fork " + std::to_string(f) + ": " + describe_status(status));
  }
  stop = true;
  for (std::thread &t : threads)
    t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << kForks
                                << " children failed, first: " << failures[0] << " (ChildStatus)";
  for (void *b : blocks)
    free(b);
}

// What a child's own sim endpoint receives, and whether its post completed.
struct ChildInbox {
  std::string bytes;
  int done = 0, status = 1;
  static void Receive(void *arg, void *data, size_t len) {
    if (data) static_cast<ChildInbox *>(arg)->bytes.append(static_cast<const char *>(data), len);
  }
  static void Done(void *arg, int st) {
    auto *in = static_cast<ChildInbox *>(arg);
    in->status = st;
    in->done++;
  }
};

// Posts sga to ep and polls until the message is done and received: a ChildStatus.
int post_and_receive(nic_sga *sga, nic_endpoint *ep, ChildInbox *in, const std::string &want) {
  in->bytes.clear();
  in->done = 0;
  const int rc = nic_sga_post(sga, ep, ChildInbox::Done, in);
  if (rc) return rc == -NIC_EFREED ? int(kParentsKey) : int(kNoBackend);
  for (int i = 0; i < 5000 && (!in->done || in->bytes.size() < want.size()); i++)
    if (!nic_poll(0)) usleep(1000);
  return in->done == 1 && in->status == 0 && in->bytes == want ? int(kChildOk) : int(kParentsKey);
}

// A registration is the parent's: its key makes the NIC reach the parent's pages, not the child's
// copies, and the parent's backend (its rings and queues) stays the parent's. So the child is
// handed no key of the parent's, by nic_translate or nic_register, and posts on none of the
// parent's endpoints; it opens a backend of its own and registers with it, and what it sends
// arrives whole: from a dataplane block, from other memory the parent had registered, and copied
// into an array the parent filled before the fork. The sim hands another process other keys, as
// a NIC does, and refuses one it did not make: a key of the parent's fails the child's post.
TEST(Fork, ChildRegistersWithABackendOfItsOwnAndSends) {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr) << "the suite runs with NICMALLOC_BACKEND=sim";
  char *dp = static_cast<char *>(nic_malloc(4096));
  ASSERT_NE(dp, nullptr);
  memset(dp, 'd', 4096);
  std::string control(8192, 'c'); // the control heap: the registration cache's
  nic_region_ref ref{}, cached{};
  ASSERT_EQ(nic_register(dp, 4096, 0, &ref), 0);
  ASSERT_TRUE(ref.lkey || ref.backend_handle) << "the sim's registration has a key";
  ASSERT_EQ(nic_register(control.data(), control.size(), 0, &cached), 0);
  ASSERT_EQ(cached.kind, NIC_REGION_CACHED);
  static const char copied[] = "copied before the fork"; // under the copy threshold
  nic_sga before;
  ASSERT_EQ(nic_sga_init(&before, 0), 0);
  ASSERT_EQ(nic_sga_add(&before, copied, sizeof copied), 0);
  int status = in_child([&] {
    nic_region_ref now{};
    if (nic_translate(dp, 4096, &now) != 0) return int(kWrongHeap);
    if (now.lkey || now.backend_handle) return int(kParentsKey);
    nic_sga sga;
    if (nic_sga_init(&sga, 0) != 0 || nic_sga_add(&sga, copied, sizeof copied) != 0)
      return int(kNoBackend);
    if (nic_sga_post(&sga, ep, nullptr, nullptr) != -ENODEV ||
        nic_sim_endpoint_destroy(ep) != -ENODEV)
      return int(kParentsBackend);
    nic_sga_reset(&sga);
    ChildInbox in;
    nic_endpoint *own = nic_sim_endpoint_create(ChildInbox::Receive, &in, 0);
    if (!own) return int(kNoBackend);
    if (nic_register(dp, 4096, 0, &now) != 0) return int(kNoBackend);
    if (!now.lkey && !now.backend_handle) return int(kNoBackend);
    nic_unregister(&cached); // the parent's reference: only let go
    int rc = kChildOk;
    if (nic_sga_init(&sga, 0) || nic_sga_add(&sga, dp, 4096)) return int(kNoBackend);
    if ((rc = post_and_receive(&sga, own, &in, std::string(4096, 'd')))) return rc;
    if (nic_sga_add(&sga, control.data(), control.size())) return int(kNoBackend);
    if ((rc = post_and_receive(&sga, own, &in, control))) return rc;
    if ((rc = post_and_receive(&before, own, &in, std::string(copied, sizeof copied)))) return rc;
    return nic_sim_endpoint_destroy(own) == 0 ? int(kChildOk) : int(kNoBackend);
  });
  ASSERT_TRUE(WIFEXITED(status)) << describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << describe_status(status) << " (see ChildStatus)";
  nic_region_ref again{};
  ASSERT_EQ(nic_translate(dp, 4096, &again), 0);
  EXPECT_EQ(again.lkey, ref.lkey) << "the parent keeps its registration";
  ChildInbox parent;
  ASSERT_EQ(nic_sga_post(&before, ep, ChildInbox::Done, &parent), 0) << "its copies' too";
  nic_unregister(&cached);
  for (int i = 0; i < 5000 && !parent.done; i++)
    if (!nic_poll(0)) usleep(1000);
  EXPECT_EQ(parent.done, 1);
  EXPECT_EQ(parent.status, 0);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
  free(dp);
}

// A message a sim endpoint received and the program holds is a block of the child's own copy of
// memory, under the child's copy of the hold: the child counts it held, as the parent does, and
// its nic_release frees it (the NIC backends' buffers are the parent's: not the child's to count).
TEST(Fork, AChildCountsTheSimMessagesItInheritedHeldAndFreesThemAtRelease) {
  struct Kept {
    const void *p = nullptr;
    static void Receive(void *arg, void *data, size_t) {
      if (data && nic_hold(data) == 0) static_cast<Kept *>(arg)->p = data;
    }
  } kept;
  nic_endpoint *ep = nic_sim_endpoint_create(Kept::Receive, &kept, 0);
  ASSERT_NE(ep, nullptr) << "the suite runs with NICMALLOC_BACKEND=sim";
  const std::string text(3000, 'h');
  void *msg = nic_malloc(text.size());
  ASSERT_NE(msg, nullptr);
  memcpy(msg, text.data(), text.size());
  ChildInbox sent;
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, msg, text.size()), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, ChildInbox::Done, &sent), 0);
  for (int i = 0; i < 5000 && !sent.done; i++)
    if (!nic_poll(0)) usleep(1000);
  ASSERT_EQ(sent.done, 1);
  ASSERT_NE(kept.p, nullptr);
  nic_stats held = NIC_STATS_INIT;
  nic_get_stats(&held);
  ASSERT_GE(held.recv_held_buffers, 1u);
  int status = in_child([&] {
    nic_stats s = NIC_STATS_INIT;
    nic_get_stats(&s);
    if (s.recv_held_buffers != held.recv_held_buffers || s.recv_held_bytes != held.recv_held_bytes)
      return int(kStatsWrong);
    if (nic_release(kept.p) != 0) return int(kHoldLeft);
    nic_get_stats(&s);
    if (s.recv_held_buffers != held.recv_held_buffers - 1 ||
        s.recv_held_bytes != held.recv_held_bytes - text.size())
      return int(kStatsWrong);
    // Freed: a hold on it now is refused.
    return nic_hold(kept.p) == -NIC_EFREED ? int(kChildOk) : int(kHoldLeft);
  });
  ASSERT_TRUE(WIFEXITED(status)) << describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << describe_status(status) << " (see ChildStatus)";
  EXPECT_EQ(nic_release(kept.p), 0);
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.recv_held_buffers, held.recv_held_buffers - 1);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
  free(msg);
}

// Descriptors of this process that are eventfds.
int anon_descriptors(const char *kind) {
  int n = 0;
  char link[64], target[64];
  for (int fd = 0; fd < 4096; fd++) {
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t len = readlink(link, target, sizeof target - 1);
    if (len > 0) target[len] = 0, n += strstr(target, kind) != nullptr;
  }
  return n;
}
int eventfds() {
  return anon_descriptors("eventfd");
}

// A thread blocked in nic_wait holds an eventfd of its own, which an ask of another thread's
// writes to; a child of fork has copies of every such descriptor, through which the parent's asks
// would wake the child's threads: the child closes them all, as it closes the backends' (README,
// fork), and has none of nicmalloc's eventfds left.
TEST(Fork, ChildKeepsNoWaitDescriptorOfTheParentsThreads) {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr) << "the suite runs with NICMALLOC_BACKEND=sim";
  const int before = eventfds();
  std::atomic<bool> done{false};
  std::thread waiter([&done] {
    free(malloc(16)); // a thread nicmalloc knows
    while (!done.load())
      nic_wait(-1);
  });
  for (int i = 0; i < 5000 && eventfds() == before; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(eventfds(), before + 1) << "the waiting thread's eventfd";
  int status = in_child([] { return eventfds() == 0 ? int(kChildOk) : int(kDescriptorLeft); });
  done = true;
  static char message[16];
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, message, sizeof message), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, nullptr, nullptr), 0); // its completion ends the wait
  waiter.join();
  ASSERT_TRUE(WIFEXITED(status)) << describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << describe_status(status) << ": eventfds left in the child";
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
}

// The same for the descriptors nic_thread_event_fd hands out, the epoll set of each thread's
// eventfd: the child closes every thread's, the forking thread's too (a parent's ask would make
// it readable); it has no epoll set of nicmalloc's left.
TEST(Fork, ChildKeepsNoThreadEventDescriptorOfTheParent) {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr) << "the suite runs with NICMALLOC_BACKEND=sim";
  ASSERT_GE(nic_thread_event_fd(), 0);
  std::atomic<int> other{-1};
  std::atomic<bool> done{false};
  std::thread loop([&] {
    other = nic_thread_event_fd();
    while (!done.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (other.load() == -1)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(other.load(), 0);
  ASSERT_GE(anon_descriptors("eventpoll"), 3) << "the backends' set and the two threads'";
  int status = in_child([] {
    return anon_descriptors("eventpoll") == 0 && eventfds() == 0 ? int(kChildOk)
                                                                 : int(kDescriptorLeft);
  });
  done = true;
  loop.join();
  ASSERT_TRUE(WIFEXITED(status)) << describe_status(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << describe_status(status) << ": descriptors left in the child";
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
}

// A thread's event descriptor asked for before any backend opened holds the backends' set, made
// empty then: a child of fork must make a set of its own rather than add its backends' descriptors
// to the parent's (an epoll instance is shared across fork). The parent's descriptor then woke for
// the child's completions, which no nic_poll of the parent's could clear, and the other way round.
TEST(Fork, AChildsBackendsNeverJoinTheParentsEventSet) {
  auto r = run_probe({"NICMALLOC_BACKEND=sim"}, {"fork-event-set"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.values["child_status"], "0") << r.out << r.err;
  EXPECT_EQ(r.values["child_post"], "0") << r.out << r.err;
  EXPECT_EQ(r.values["child_readable"], "1") << "the child's own descriptor wakes\n" << r.out;
  EXPECT_EQ(r.values["parent_readable"], "0") << "the parent's woke for the child's post\n"
                                              << r.out;
}

// A child forked while another thread opens the backend has that thread's half-made state
// (DPDK's EAL part set up, the dynamic loader inside the plugin's dlopen): it must take the
// backend as the parent's and never open one again on top of it. Opening DPDK takes a tenth of
// a second; the probe forks every millisecond meanwhile. A child forked once the open is over
// starts a backend of its own, but not DPDK again (its EAL runs once per process), and says so.
TEST(Fork, ChildrenForkedWhileTheBackendOpensTakeItAsTheParents) {
  auto r = run_probe({"NICMALLOC_BACKEND=dpdk", "NICMALLOC_DPDK_VDEV=net_ring0"},
                     {"fork-while-opening", "dpdk"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  if (r.values["parent_backend"] != "dpdk") GTEST_SKIP() << "DPDK does not open here: " << r.err;
  EXPECT_EQ(r.num("children_signaled"), 0) << "children died of a signal\n" << r.err;
  EXPECT_EQ(r.num("children_other_exit"), 0) << "children aborted (ld.so's assertion)\n" << r.err;
  EXPECT_EQ(r.num("children_other"), 0) << "children fell back to another backend\n" << r.err;
  EXPECT_EQ(r.num("children_refused"), 0) << r.err;
  EXPECT_LE(r.num("children_after"), 2) << "forks after the open are the last ones\n" << r.out;
  EXPECT_EQ(count_lines(r.err, "cannot start"), 0) << r.err;
  EXPECT_GE(r.num("children_parents"), 1) << "no fork came during the open\n" << r.out;
}

// A child starts its own backend of the kind its parent used, the one the program chose there
// (under auto, a sim its first endpoint started, where a fresh process would take io_uring), but
// not DPDK again, whose EAL runs once per process: it takes another and says why, and a DPDK
// endpoint is refused with the same reason.
TEST(Fork, AChildGoesOnWithItsParentsBackendKindButNeverStartsDpdkAgain) {
  auto sim = run_probe({"NICMALLOC_BACKEND=auto"}, {"fork-after-open", "sim-endpoint"});
  ASSERT_EQ(sim.exit_code, 0) << sim.out << sim.err;
  EXPECT_EQ(sim.values["child_status"], "0") << sim.out << sim.err;
  EXPECT_EQ(sim.values["parent_backend"], "sim") << sim.out;
  EXPECT_EQ(sim.values["child_backend"], "sim") << sim.out;
  EXPECT_EQ(sim.values["child_register"], "0") << sim.out << sim.err;

  auto dpdk = run_probe({"NICMALLOC_BACKEND=dpdk", "NICMALLOC_DPDK_VDEV=net_null0"},
                        {"fork-after-open", "register"});
  ASSERT_EQ(dpdk.exit_code, 0) << dpdk.out << dpdk.err;
  if (dpdk.values["parent_backend"] != "dpdk")
    GTEST_SKIP() << "DPDK does not open here: " << dpdk.err;
  EXPECT_EQ(dpdk.values["child_status"], "0") << dpdk.out << dpdk.err;
  EXPECT_NE(dpdk.values["child_backend"], "dpdk") << dpdk.out;
  EXPECT_NE(dpdk.values["child_backend"], "none") << dpdk.out;
  EXPECT_EQ(dpdk.values["child_register"], "0") << dpdk.out << dpdk.err;
  EXPECT_EQ(dpdk.values["child_dpdk_endpoint"], "ENODEV") << dpdk.out;
  EXPECT_EQ(count_lines(dpdk.err, "a child of fork leaves it to the parent"), 2)
      << "the warning and the endpoint's error\n"
      << dpdk.err;
}

// Under NICMALLOC_FENCE=protect a child's own posts are protected as its parent's are, and a free
// of a block in flight waits for its completion and then is done. Neither protect's userfaultfd
// nor its poller and free thread survive fork: without starting them again in the child, its
// posts went unprotected and the frees its completions handed to a free thread that was not
// there stayed deferred for good (3 left, 1 entry unprotected).
TEST(Fork, AChildProtectsItsOwnPostsAndMakesTheFreesTheyDeferred) {
  for (const std::string with : {"mprotect", "uffd", "wait mode"}) {
    SCOPED_TRACE(with);
    std::vector<std::string> env = {"NICMALLOC_BACKEND=sim", "NICMALLOC_FENCE_TIMEOUT_MS=5000"};
    if (with == "wait mode")
      env.push_back("NICMALLOC_FENCE=wait");
    else
      env.insert(env.end(), {"NICMALLOC_FENCE=protect", "NICMALLOC_FENCE_PROTECT=" + with});
    auto r = run_probe(env, {"fork-post"});
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.values["child_status"], "0") << r.out << r.err;
    EXPECT_EQ(r.num("child_post"), 0) << r.out << r.err;
    // The block's free, and at times the free of the sim's delivery buffer beside it.
    EXPECT_GE(r.num("child_deferred_in_flight"), 1) << r.out;
    EXPECT_EQ(r.num("child_deferred_after"), 0) << r.out << r.err;
    EXPECT_EQ(r.num("child_unprotected"), 0) << r.out << r.err;
    EXPECT_EQ(r.num("parent_post"), 0) << r.out << r.err;
  }
}

// A registration-cache miss registers with the backend under the cache's lock, and may
// allocate there: the thread's first block takes the thread list's lock, a block mapped apart
// off the main thread (a plugin's, since the lasting-thread change) the mapped blocks' lock.
// Fork's handler took those two before the cache's and waited for it: the process hung on its
// next fork (uring and dpdk, within a second every time). The first miss also opened the
// backend under that lock: DPDK's EAL, opened on nicmalloc's lasting thread, waits for its
// control thread, whose first block (its TLS) is dataplane memory under a low
// NICMALLOC_DP_MIN_SIZE and so waits for the growth lock fork held (hung every time).
TEST(Fork, ForksWhileAnotherThreadRegistersNeverWait) {
  for (const std::string backend : {"sim", "uring", "dpdk", "dpdk, 1 KiB dataplane"}) {
    SCOPED_TRACE(backend);
    const std::string name = backend.substr(0, backend.find(','));
    std::vector<std::string> env = {"NICMALLOC_BACKEND=" + name, "NICMALLOC_DPDK_VDEV=net_null0"};
    if (name != backend) env.push_back("NICMALLOC_DP_MIN_SIZE=1024");
    auto r = run_probe(env, {"fork-while-registering", "2000"});
    ASSERT_EQ(r.exit_code, 0) << "hung, ended by SIGALRM (-14)?\n" << r.out << r.err;
    if (r.values["backend"] != name) {
      std::printf("[ SKIPPED  ] %s does not open here: %s\n", name.c_str(), r.err.c_str());
      continue;
    }
    EXPECT_GE(r.num("forks"), 50) << r.out;
    EXPECT_GE(r.num("registrations"), 50) << r.out;
    EXPECT_EQ(r.num("refused"), 0) << r.out << r.err;
  }
}

} // namespace
