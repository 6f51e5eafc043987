// Memory whose pages change with no call the registration cache hears of: a thread's stack, which
// glibc unmaps after the thread and maps again for the next thread by calls of its own, and a
// file's pages under a mapping of it (a hole punched, a truncate). On io_uring over loopback UDP
// through the public API: each post is one datagram, and the kernel sends the pages the
// registration pinned, so a registration kept past such a change shows as the old bytes at the
// receiver.
#include "uring_loopback.h"

#include <fcntl.h>
#include <pthread.h>

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

} // namespace
