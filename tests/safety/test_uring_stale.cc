// Memory whose pages change with no call the registration cache hears of: a thread's stack, which
// glibc unmaps after the thread and maps again for the next thread by calls of its own, and a
// file's pages under a mapping of it (a hole punched, a truncate). On io_uring over loopback UDP
// through the public API: each post is one datagram, and the kernel sends the pages the
// registration pinned, so a registration kept past such a change shows as the old bytes at the
// receiver. And memory whose pages another thread drops or replaces, by a call the cache does
// hear of, while a miss registers them.
#include "uring_loopback.h"

#include <fcntl.h>
#include <pthread.h>

#include <random>

using namespace uring_test;

namespace {

constexpr size_t kSent = 4096; // registered, not copied: above the copy threshold

// Posts kSent bytes at p as one datagram and waits for its completion: 0 or the error.
int PostOne(nic_endpoint *ep, const void *p) {
  Done done;
  int rc = PostParts(ep, {{p, kSent}}, &done);
  if (rc) return rc;
  if (!NicPollUntil([&] { return done.calls == 1; })) return -ETIMEDOUT;
  return done.status;
}

// The datagrams the reader got, once n of them came (fewer at the deadline).
std::vector<std::string> Datagrams(Reader &reader, size_t n) {
  EXPECT_TRUE(reader.WaitFor(n * kSent)) << "fewer than " << n << " datagrams";
  return reader.Reads();
}

// What a datagram says about a buffer filled with `fill`: "" when it holds just that.
std::string Mismatch(const std::string &got, char fill) {
  if (got.size() != kSent) return "a datagram of " + std::to_string(got.size()) + " bytes";
  if (got.find_first_not_of(fill) == std::string::npos) return "";
  return std::string("filled '") + fill + "', sent '" + got[got.find_first_not_of(fill)] + "'";
}

struct StackRound {
  nic_endpoint *ep;
  char fill;
  uintptr_t buffer = 0;
  int rc[2] = {-1, -1};
  uint64_t hits = 0; // registration-cache hits of the second post
};

// Sends a buffer on its own stack twice: the second post finds the first one's cached region.
void *PostFromOwnStack(void *arg) {
  auto *r = static_cast<StackRound *>(arg);
  alignas(4096) char buf[2 * kSent];
  memset(buf, r->fill, sizeof buf);
  r->buffer = reinterpret_cast<uintptr_t>(buf);
  r->rc[0] = PostOne(r->ep, buf);
  const uint64_t hits = NicStats().rcache_hits;
  r->rc[1] = PostOne(r->ep, buf);
  r->hits = NicStats().rcache_hits - hits;
  return nullptr;
}

// Stacks above glibc's cache of them (40 MiB): each is unmapped at the join and the next one
// mapped, by glibc's own calls, where it was. The registration of the thread before must not
// send the next thread's buffer from its pages.
TEST_F(UringSgaTest, AThreadsStackIsSentFromItsOwnPagesNotThoseOfTheThreadBefore) {
  UdpPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  ASSERT_NE(ep, nullptr);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 64 << 20), 0);
  const std::string fills = "ABCDEF";
  std::vector<StackRound> rounds;
  for (char fill : fills) {
    rounds.push_back(StackRound{ep, fill});
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, &attr, PostFromOwnStack, &rounds.back()), 0);
    ASSERT_EQ(pthread_join(t, nullptr), 0);
  }
  pthread_attr_destroy(&attr);
  int same_place = 0;
  for (size_t i = 0; i < rounds.size(); i++) {
    EXPECT_EQ(rounds[i].rc[0], 0) << "thread " << i;
    EXPECT_EQ(rounds[i].rc[1], 0) << "thread " << i;
    EXPECT_GE(rounds[i].hits, 1u) << "thread " << i << ": its stack was not cached while it ran";
    same_place += i > 0 && rounds[i].buffer == rounds[i - 1].buffer;
  }
  ASSERT_GT(same_place, 0) << "no thread's stack was mapped where the one before had been";
  const std::vector<std::string> got = Datagrams(reader, 2 * rounds.size());
  ASSERT_EQ(got.size(), 2 * rounds.size());
  for (size_t i = 0; i < got.size(); i++)
    EXPECT_EQ(Mismatch(got[i], rounds[i / 2].fill), "") << "thread " << i / 2 << ", post " << i % 2;
}

// A file's pages change under its mappings, shared or private, without a call of the process's
// that unmaps them: a punched hole, a truncate and a grow back. Each buffer is sent as it is at
// its post. Private anonymous memory is still cached.
TEST_F(UringSgaTest, AFilesMemoryIsSentAsItIsAfterItsPagesChangedUnderTheMapping) {
  UdpPair pair;
  Reader reader(pair.rx);
  nic_endpoint *ep = Endpoint(pair.tx);
  ASSERT_NE(ep, nullptr);
  constexpr size_t kLen = 16 * kSent;
  const int fd = memfd_create("uring_stale", 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(ftruncate(fd, kLen), 0);
  char *shared =
      static_cast<char *>(mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  char *priv = static_cast<char *>(mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
  ASSERT_NE(shared, MAP_FAILED);
  ASSERT_NE(priv, MAP_FAILED);
  auto truncate_and_grow = [fd] {
    ASSERT_EQ(ftruncate(fd, 0), 0);
    ASSERT_EQ(ftruncate(fd, kLen), 0);
  };
  struct Step {
    const char *what;
    char *buffer;
    std::function<void()> before;
    char fill;
  };
  const Step steps[] = {
      {"shared", shared, [] {}, 'A'},
      {"shared, after a hole punched", shared,
       [fd] { ASSERT_EQ(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kLen), 0); },
       'B'},
      {"shared, after a truncate", shared, truncate_and_grow, 'C'},
      {"private", priv, [] {}, 'D'},
      {"private, after a truncate", priv, truncate_and_grow, 'E'},
  };
  const nic_stats before = NicStats();
  for (const Step &step : steps) {
    step.before();
    memset(step.buffer, step.fill, kSent);
    EXPECT_EQ(PostOne(ep, step.buffer), 0) << step.what;
  }
  EXPECT_EQ(NicStats().rcache_hits, before.rcache_hits) << "a file's memory was cached";
  Region anon(kSent);
  memset(anon.base, 'F', kSent);
  ASSERT_EQ(PostOne(ep, anon.base), 0);
  ASSERT_EQ(PostOne(ep, anon.base), 0);
  EXPECT_GE(NicStats().rcache_hits - before.rcache_hits, 1u) << "anonymous memory was not cached";
  const std::vector<std::string> got = Datagrams(reader, std::size(steps) + 2);
  ASSERT_EQ(got.size(), std::size(steps) + 2);
  for (size_t i = 0; i < std::size(steps); i++)
    EXPECT_EQ(Mismatch(got[i], steps[i].fill), "") << steps[i].what;
  munmap(shared, kLen);
  munmap(priv, kLen);
  close(fd);
}

// How the other thread changes the buffer's pages.
enum class Change { kDropped, kReplaced };

// A thread that changes the pages of [buf, buf + len) once per round, a given delay after the
// round starts, and says when its call began and returned.
class Changer {
public:
  Changer(char *buf, size_t len, Change how)
      : buf_(buf), len_(len), how_(how), thread_([this] { Run(); }) {}
  ~Changer() {
    round_ = -1;
    thread_.join();
  }
  // Starts round n, whose change comes `delay` after `from`.
  void Start(int n, Clock::time_point from, std::chrono::nanoseconds delay) {
    from_ = from;
    delay_ = delay;
    round_.store(n, std::memory_order_release);
  }
  // Waits for round n's change; false at the deadline.
  bool Wait(int n) {
    for (auto end = Clock::now() + kLimit; done_.load(std::memory_order_acquire) != n;)
      if (Clock::now() > end) return false;
    return true;
  }
  Clock::time_point began, returned; // round n's call, once Wait(n) returned
  int failed_errno = 0;

private:
  void Run() {
    for (int n = 1;; n++) {
      int r;
      while ((r = round_.load(std::memory_order_acquire)) != n)
        if (r < 0)
          return;
        else
          std::this_thread::yield();
      while (Clock::now() < from_ + delay_) {
      }
      began = Clock::now();
      bool ok = how_ == Change::kDropped
                    ? madvise(buf_, len_, MADV_DONTNEED) == 0
                    : mmap(buf_, len_, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == buf_;
      returned = Clock::now();
      if (!ok) failed_errno = errno;
      done_.store(n, std::memory_order_release);
    }
  }
  char *buf_;
  size_t len_;
  Change how_;
  Clock::time_point from_;
  std::chrono::nanoseconds delay_{0};
  std::atomic<int> round_{0}, done_{0};
  std::thread thread_; // last: starts once the rest is built
};

// One thread's nic_sga_add of a buffer misses the cache and registers (pins) its pages while
// another thread drops them (madvise) or maps anew over them (mmap MAP_FIXED). Once both calls
// returned, the buffer is written and posted: the datagram must carry what was written, not the
// pages the registration pinned before the change. The change comes at a delay spread over the
// time a miss takes, so that it lands while the miss pins the pages in many rounds; the rounds
// go on until enough of them overlapped the miss, or the deadline.
void PostAfterAChangeRacingAMiss(nic_endpoint *ep, Reader &reader, Change how) {
  constexpr size_t kLen = 1 << 20; // pinned page by page: a wide window, no huge page
  constexpr int kOverlapping = 300, kMaxRounds = 4000;
  char *buf = static_cast<char *>(
      mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(buf, MAP_FAILED);
  // Each round's nic_sga_add misses: the madvise before it is heard, and the last round's region
  // goes. The slowest of a few such misses sets the spread of the change's delays.
  auto miss = [&](nic_sga *sga) {
    madvise(buf, kLen, MADV_DONTNEED);
    memset(buf, 'A', kLen);
    nic_sga_init(sga, 0);
  };
  std::chrono::nanoseconds slowest{0};
  for (int i = 0; i < 8; i++) {
    nic_sga sga;
    miss(&sga);
    const auto t0 = Clock::now();
    ASSERT_EQ(nic_sga_add(&sga, buf, kLen), 0);
    slowest = std::max(slowest, std::chrono::nanoseconds(Clock::now() - t0));
    nic_sga_reset(&sga);
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> spread(0, slowest.count() * 3 / 2);
  int rounds = 0, overlapping = 0, stale = 0;
  std::string first_stale;
  {
    Changer changer(buf, kLen, how);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    for (int n = 1; n <= kMaxRounds && overlapping < kOverlapping && Clock::now() < deadline; n++) {
      nic_sga sga;
      miss(&sga);
      const auto t0 = Clock::now();
      changer.Start(n, t0, std::chrono::nanoseconds(spread(rng)));
      const int rc = nic_sga_add(&sga, buf, kLen);
      const auto t1 = Clock::now();
      ASSERT_TRUE(changer.Wait(n)) << "round " << n << ": the change never returned";
      ASSERT_EQ(changer.failed_errno, 0) << strerror(changer.failed_errno);
      nic_sga_reset(&sga);
      ASSERT_EQ(rc, 0) << "round " << n << ": " << strerror(-rc);
      rounds = n;
      overlapping += changer.began < t1 && t0 < changer.returned;
      // Both calls returned: the buffer's pages are those mapped there now.
      memset(buf, 'B', kSent);
      ASSERT_EQ(PostOne(ep, buf), 0) << "round " << n;
      ASSERT_TRUE(reader.WaitFor(static_cast<size_t>(n) * kSent)) << "round " << n;
      const std::string why = Mismatch(reader.Reads().back(), 'B');
      if (why.empty()) continue;
      if (!stale++) first_stale = "round " + std::to_string(n) + ": " + why;
      if (stale == 5) break; // enough to tell
    }
  }
  munmap(buf, kLen);
  EXPECT_EQ(stale, 0) << stale << " of " << rounds
                      << " posts after the change carried the pages the registration pinned "
                         "before it; first: "
                      << first_stale;
  EXPECT_GT(overlapping, 0) << "in " << rounds << " rounds no change met a miss: nothing tested";
}

// A loopback pair and an endpoint for each race.
class UringChangeRacingAMiss : public UringSgaTest {
protected:
  void Race(Change how) {
    UdpPair pair;
    Reader reader(pair.rx);
    nic_endpoint *ep = Endpoint(pair.tx);
    ASSERT_NE(ep, nullptr);
    PostAfterAChangeRacingAMiss(ep, reader, how);
  }
};

TEST_F(UringChangeRacingAMiss, ABufferDroppedWhileAMissRegistersItIsSentFromItsNewPages) {
  Race(Change::kDropped);
}

TEST_F(UringChangeRacingAMiss, ABufferMappedOverWhileAMissRegistersItIsSentFromItsNewPages) {
  Race(Change::kReplaced);
}

} // namespace
