// Several backends in one process: the sim and io_uring endpoints side by side, with
// NICMALLOC_BACKEND=sim (the default backend) and the uring backend started by its endpoint's
// constructor. Each message carries dataplane, control-heap and short (copied) memory and is
// checked byte for byte where it lands; completions of both come from nic_poll / nic_wait and
// nic_event_fd. Each step of a dataplane chunk gets one registration per backend (one backed
// before the second backend started included, and one backed after), and a released chunk or a
// step given back inside a live chunk leaves both (tests/uring.cmake).
#include "uring_loopback.h"

#include <mimalloc.h> // before chunks.h includes it inside extern "C"
extern "C" {
#include "backend.h"
#include "chunk_reg.h"
#include "sim_nic.h"
}

#include <sys/epoll.h>
#include <sys/wait.h>

#include <map>

using namespace uring_test;

namespace {

struct Done {
  std::atomic<int> calls{0}, status{1};
  static void Fn(void *arg, int status) {
    auto *d = static_cast<Done *>(arg);
    d->status = status;
    d->calls++;
  }
};

// What the sim endpoint received, from nic_poll.
struct SimInbox {
  std::string bytes;
  int messages = 0;
  static void Fn(void *arg, void *data, size_t len) {
    auto *in = static_cast<SimInbox *>(arg);
    if (!data) return;
    in->bytes.append(static_cast<const char *>(data), len);
    in->messages++;
  }
};

// Dataplane, control-heap and short (bounce-copied) memory in one message.
struct Parts {
  explicit Parts(unsigned seed, char *dp_block = nullptr)
      : dp(dp_block ? dp_block : static_cast<char *>(nic_malloc(9000))), own_dp(!dp_block) {
    ctl = static_cast<char *>(malloc(7000));
    for (int i = 0; i < 9000; i++)
      dp[i] = static_cast<char>(seed * 7 + i);
    for (int i = 0; i < 7000; i++)
      ctl[i] = static_cast<char>(seed * 13 + i * 3);
    for (int i = 0; i < 100; i++)
      small[i] = static_cast<char>(seed + i);
  }
  ~Parts() {
    if (own_dp) free(dp);
    free(ctl);
  }
  int Add(nic_sga *sga) const {
    int rc = nic_sga_add(sga, small, sizeof small);
    if (!rc) rc = nic_sga_add(sga, dp, 9000);
    if (!rc) rc = nic_sga_add(sga, ctl, 7000);
    return rc;
  }
  std::string Bytes() const {
    return std::string(small, sizeof small) + std::string(dp, 9000) + std::string(ctl, 7000);
  }
  char *dp, *ctl;
  bool own_dp;
  char small[100];
};

int Post(const Parts &parts, nic_endpoint *ep, Done *done) {
  nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  if (!rc) rc = parts.Add(&sga);
  if (!rc) rc = nic_sga_post(&sga, ep, Done::Fn, done);
  if (rc) nic_sga_reset(&sga);
  return rc;
}

std::string ReadExactly(int fd, size_t n) {
  std::string out;
  char buf[1 << 16];
  const auto end = Clock::now() + kLimit;
  while (out.size() < n && Clock::now() < end) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t got = read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (got <= 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  return out;
}

// Byte for byte; a mismatch is said in one line (sizes and the first offset that differs).
testing::AssertionResult SameBytes(const std::string &got, const std::string &want) {
  if (got == want) return testing::AssertionSuccess();
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at])
    at++;
  return testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size()
                                     << ", first difference at " << at;
}

// Waits with nic_wait (its own deadline bounds the loop) until pred holds.
template <class Pred> bool WaitUntil(Pred pred) {
  for (auto end = Clock::now() + kLimit; !pred(); nic_wait(100))
    if (Clock::now() > end) return false;
  return true;
}

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

unsigned ChunkOf(const void *p) {
  nic_region_ref ref;
  EXPECT_EQ(nic_translate(p, 1, &ref), 0);
  return ref.chunk_index;
}

// Whether the step holding p has a registration with the backend of that kind.
bool RegisteredWith(const void *p, enum nic_backend_kind kind) {
  return __atomic_load_n(&nic_chunk_regs[nic_chunk_index(p)][nic_step_index(p)][kind].registered,
                         __ATOMIC_ACQUIRE) != 0;
}

class MultiBackend : public testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(nic_sim_is(nic_backend_active())) << "runs with NICMALLOC_BACKEND=sim";
    sim_ep_ = nic_sim_endpoint_create(SimInbox::Fn, &inbox_, 0);
    ASSERT_NE(sim_ep_, nullptr);
  }
  void TearDown() override {
    if (uring_ep_) {
      WaitUntil([&] { return nic_uring_endpoint_destroy(uring_ep_) == 0; });
      uring_ep_ = nullptr;
    }
    if (sim_ep_) WaitUntil([&] { return nic_sim_endpoint_destroy(sim_ep_) == 0; });
  }
  nic_endpoint *UringEndpoint() {
    uring_ep_ = nic_uring_endpoint_create(pair_.tx);
    return uring_ep_;
  }
  SimInbox inbox_;
  Done done_[2];
  LoopbackPair pair_;
  nic_endpoint *sim_ep_ = nullptr, *uring_ep_ = nullptr;
};

// The io_uring endpoint works though the default backend is sim: its constructor starts uring
// beside it, and the sga (resolved against the default backend) is resolved again for it.
TEST_F(MultiBackend, SimAndUringEndpointsBothDeliverEveryByte) {
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  EXPECT_EQ(nic_backend_count(), 2u);
  EXPECT_STREQ(Stats().backend, "sim+uring");
  for (unsigned round = 0; round < 8; round++) {
    Parts to_sim(round * 2 + 1), to_uring(round * 2 + 2);
    Done sim_done, uring_done;
    ASSERT_EQ(Post(to_sim, sim_ep_, &sim_done), 0);
    ASSERT_EQ(Post(to_uring, uring_ep_, &uring_done), 0);
    const std::string want = to_uring.Bytes();
    EXPECT_TRUE(SameBytes(ReadExactly(pair_.rx, want.size()), want)) << "round " << round;
    ASSERT_TRUE(WaitUntil([&] { return sim_done.calls && uring_done.calls; }));
    EXPECT_EQ(sim_done.status, 0);
    EXPECT_EQ(uring_done.status, 0);
    ASSERT_TRUE(WaitUntil([&] { return inbox_.messages == static_cast<int>(round) + 1; }));
    const std::string sim_want = to_sim.Bytes();
    ASSERT_GE(inbox_.bytes.size(), sim_want.size());
    EXPECT_TRUE(SameBytes(inbox_.bytes.substr(inbox_.bytes.size() - sim_want.size()), sim_want))
        << "round " << round;
  }
  nic_sim_stats sim = {};
  nic_sim_get_stats(nic_backend_started(NIC_BACKEND_SIM), &sim);
  EXPECT_EQ(sim.protection_errors, 0u);
  nic_uring_stats ur = {};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_started(NIC_BACKEND_URING), &ur));
  EXPECT_EQ(ur.protection_errors, 0u);
  EXPECT_GT(ur.slots_used, 0u) << "uring registered memory of its own";
}

// A chunk mapped and registered with sim before uring started is registered with uring on its
// first use there, and the very block is sent through both.
TEST_F(MultiBackend, ChunkMappedBeforeTheSecondBackendIsUsableOnIt) {
  if (nic_backend_started(NIC_BACKEND_URING))
    GTEST_SKIP() << "uring started already: ctest runs each case in a process of its own";
  char *block = static_cast<char *>(nic_malloc(9000));
  ASSERT_NE(block, nullptr);
  {
    Parts first(41, block);
    Done done;
    ASSERT_EQ(Post(first, sim_ep_, &done), 0);
    ASSERT_TRUE(WaitUntil([&] { return done.calls.load() > 0; }));
    EXPECT_EQ(done.status, 0);
  }
  EXPECT_TRUE(RegisteredWith(block, NIC_BACKEND_SIM));
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  EXPECT_FALSE(RegisteredWith(block, NIC_BACKEND_URING));
  Parts second(42, block);
  Done done;
  ASSERT_EQ(Post(second, uring_ep_, &done), 0);
  const std::string want = second.Bytes();
  EXPECT_TRUE(SameBytes(ReadExactly(pair_.rx, want.size()), want));
  ASSERT_TRUE(WaitUntil([&] { return done.calls.load() > 0; }));
  EXPECT_EQ(done.status, 0);
  EXPECT_TRUE(RegisteredWith(block, NIC_BACKEND_URING));
  free(block);
}

// A chunk released by the heap leaves every backend it was registered with.
TEST_F(MultiBackend, ReleasedChunkIsDeregisteredFromBoth) {
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  nic_stats s = Stats();
  std::vector<char *> blocks;
  for (size_t used = 0; used < 2 * s.chunk_size; used += 1 << 20)
    blocks.push_back(static_cast<char *>(nic_malloc(1 << 20)));
  std::map<unsigned, const char *> chunks; // each chunk and a block in it
  for (char *b : blocks) {
    chunks.emplace(ChunkOf(b), b);
    memset(b, 0x5a, 64);
    nic_sga sga;
    Done sim_done, uring_done;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, b, 4096), 0);
    ASSERT_EQ(nic_sga_post(&sga, sim_ep_, Done::Fn, &sim_done), 0);
    ASSERT_EQ(nic_sga_add(&sga, b, 4096), 0);
    ASSERT_EQ(nic_sga_post(&sga, uring_ep_, Done::Fn, &uring_done), 0);
    EXPECT_EQ(ReadExactly(pair_.rx, 4096).size(), 4096u);
    ASSERT_TRUE(WaitUntil([&] { return sim_done.calls && uring_done.calls; }));
    ASSERT_EQ(sim_done.status, 0);
    ASSERT_EQ(uring_done.status, 0);
  }
  ASSERT_GE(chunks.size(), 2u);
  for (auto [c, b] : chunks) {
    EXPECT_TRUE(RegisteredWith(b, NIC_BACKEND_SIM)) << "chunk " << c;
    EXPECT_TRUE(RegisteredWith(b, NIC_BACKEND_URING)) << "chunk " << c;
  }
  nic_sim_stats sim_before = {};
  nic_sim_get_stats(nic_backend_started(NIC_BACKEND_SIM), &sim_before);
  nic_uring_stats ur_before = {};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_started(NIC_BACKEND_URING), &ur_before));
  for (char *b : blocks)
    free(b);
  nic_stats after = NIC_STATS_INIT;
  for (auto end = Clock::now() + kLimit; Clock::now() < end;) {
    nic_collect();
    nic_poll(0);
    nic_get_stats(&after);
    if (after.chunks_released > s.chunks_released) break;
    usleep(20000);
  }
  ASSERT_GT(after.chunks_released, s.chunks_released);
  nic_sim_stats sim_after = {};
  nic_sim_get_stats(nic_backend_started(NIC_BACKEND_SIM), &sim_after);
  nic_uring_stats ur_after = {};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_started(NIC_BACKEND_URING), &ur_after));
  EXPECT_LT(sim_after.regions, sim_before.regions);
  EXPECT_LT(ur_after.slots_used, ur_before.slots_used);
  unsigned released = 0;
  for (auto [c, b] : chunks)
    if (!RegisteredWith(b, NIC_BACKEND_SIM)) {
      released++;
      EXPECT_FALSE(RegisteredWith(b, NIC_BACKEND_URING)) << "chunk " << c;
    }
  EXPECT_GT(released, 0u);
}

// Posts len bytes at p alone to ep and waits for the completion (and the bytes, for uring).
void PostOne(const char *p, size_t len, nic_endpoint *ep, int rx_fd) {
  nic_sga sga;
  Done done;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, len), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, Done::Fn, &done), 0);
  if (rx_fd >= 0) {
    EXPECT_TRUE(SameBytes(ReadExactly(rx_fd, len), std::string(p, len)));
  }
  ASSERT_TRUE(WaitUntil([&] { return done.calls.load() > 0; }));
  EXPECT_EQ(done.status, 0);
}

uint32_t UringSlotsUsed() {
  nic_uring_stats ur = {};
  EXPECT_TRUE(nic_uring_get_stats(nic_backend_started(NIC_BACKEND_URING), &ur));
  return ur.slots_used;
}

uint64_t SimRegions() {
  nic_sim_stats sim = {};
  nic_sim_get_stats(nic_backend_started(NIC_BACKEND_SIM), &sim);
  return sim.regions;
}

// A step first backed after the second backend started is registered with it on its first post
// there, once for the step: a second range of the same step posted to it finds that
// registration (no slot more), and both arrive whole.
TEST_F(MultiBackend, StepBackedAfterTheSecondBackendStartedIsUsedThroughIt) {
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  const uint64_t backed = Stats().steps_backed;
  // 20 MiB: a step of its own (NICMALLOC_PIN_STEP 32M), backed now, after uring started.
  char *b = static_cast<char *>(nic_malloc(20u << 20));
  ASSERT_NE(b, nullptr);
  for (size_t i = 0; i < 16384; i++)
    b[i] = static_cast<char>(i * 5 + 1);
  EXPECT_GT(Stats().steps_backed, backed);
  ASSERT_EQ(nic_step_index(b), nic_step_index(b + 16383));
  EXPECT_FALSE(RegisteredWith(b, NIC_BACKEND_URING));
  const uint32_t slots = UringSlotsUsed();
  PostOne(b, 4096, uring_ep_, pair_.rx);
  EXPECT_TRUE(RegisteredWith(b, NIC_BACKEND_URING));
  EXPECT_EQ(UringSlotsUsed(), slots + 1) << "one registration for the step";
  PostOne(b + 8192, 8192, uring_ep_, pair_.rx);
  EXPECT_EQ(UringSlotsUsed(), slots + 1) << "the step's registration found again";
  free(b);
}

// A step given back inside a live chunk while registered with both backends leaves both (their
// registrations gone from the backends too), and a block there later is registered anew.
TEST_F(MultiBackend, StepGivenBackWhileRegisteredWithBothLeavesBoth) {
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  void *keep = nic_malloc(64); // keeps the chunk live
  ASSERT_NE(keep, nullptr);
  char *b = static_cast<char *>(nic_malloc(20u << 20)); // a step of its own
  ASSERT_NE(b, nullptr);
  memset(b, 0x3c, 4096);
  PostOne(b, 4096, sim_ep_, -1);
  PostOne(b, 4096, uring_ep_, pair_.rx);
  ASSERT_TRUE(RegisteredWith(b, NIC_BACKEND_SIM));
  ASSERT_TRUE(RegisteredWith(b, NIC_BACKEND_URING));
  const uint64_t regions = SimRegions();
  const uint32_t slots = UringSlotsUsed();
  const uint64_t released = Stats().steps_released;
  free(b);
  for (auto end = Clock::now() + kLimit; Stats().steps_released == released;) {
    ASSERT_LT(Clock::now(), end) << "the step was not given back";
    usleep(20000);
  }
  EXPECT_FALSE(RegisteredWith(b, NIC_BACKEND_SIM));
  EXPECT_FALSE(RegisteredWith(b, NIC_BACKEND_URING));
  EXPECT_LT(SimRegions(), regions);
  EXPECT_LT(UringSlotsUsed(), slots);
  nic_region_ref ref;
  if (nic_translate(b, 4096, &ref) == 0) {
    EXPECT_EQ(ref.lkey, 0u) << "a stale key";
  }
  free(keep);
}

// One descriptor for both: it polls readable while either backend has a completion for
// nic_poll, and stays the same descriptor when a backend starts after it was handed out.
TEST_F(MultiBackend, EventFdSignalsCompletionsOfBothBackends) {
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0);
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  EXPECT_EQ(nic_event_fd(), efd);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev), 0);
  // The fixture's: a completion that comes after a failed wait must not write a dead frame.
  for (int i = 0; i < 2; i++) {
    nic_endpoint *to = i == 0 ? uring_ep_ : sim_ep_;
    Parts parts(7);
    Done &done = done_[i];
    ASSERT_EQ(Post(parts, to, &done), 0);
    if (to == uring_ep_) {
      EXPECT_TRUE(SameBytes(ReadExactly(pair_.rx, parts.Bytes().size()), parts.Bytes()));
    }
    for (auto end = Clock::now() + kLimit; !done.calls && Clock::now() < end;) {
      epoll_event got;
      if (epoll_wait(ep, &got, 1, 100) == 1) {
        nic_poll(0);
      }
    }
    EXPECT_EQ(done.calls, 1) << (to == uring_ep_ ? "uring" : "sim");
    EXPECT_EQ(done.status, 0);
  }
  close(ep);
}

// A child of fork has none of its parent's backends: it neither polls them (the parent's
// completions of both stay the parent's), nor posts to, nor destroys their endpoints. It starts
// its own, both kinds again (the sim as the default, as in the parent), and sends through them.
TEST_F(MultiBackend, ForkChildHasNoneOfThemAndStartsItsOwn) {
  ASSERT_NE(UringEndpoint(), nullptr) << "errno " << errno;
  Parts to_sim(3), to_uring(4), from_child(5);
  nic_sim_pause(nic_backend_started(NIC_BACKEND_SIM), true); // the sim post stays in flight
  ASSERT_EQ(Post(to_sim, sim_ep_, &done_[0]), 0);
  ASSERT_EQ(Post(to_uring, uring_ep_, &done_[1]), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);
    int ran = 0;
    for (int i = 0; i < 200; i++, usleep(1000))
      ran += nic_poll(0);
    if (ran) _exit(1);
    Done mine[2];
    if (nic_backend_count() != 0 || Post(from_child, sim_ep_, &mine[0]) != -ENODEV ||
        Post(from_child, uring_ep_, &mine[0]) != -ENODEV ||
        nic_uring_endpoint_destroy(uring_ep_) != -ENODEV)
      _exit(2);
    SimInbox in;
    nic_endpoint *sim = nic_sim_endpoint_create(SimInbox::Fn, &in, 0);
    nic_endpoint *uring = nic_uring_endpoint_create(pair_.tx);
    if (!sim || !uring || !nic_sim_is(nic_backend_active()) || nic_backend_count() != 2) _exit(3);
    if (Post(from_child, sim, &mine[0]) || Post(from_child, uring, &mine[1])) _exit(4);
    if (!WaitUntil([&] { return mine[0].calls && mine[1].calls && in.messages; })) _exit(5);
    if (mine[0].status || mine[1].status || in.bytes != from_child.Bytes()) _exit(6);
    _exit(nic_sim_endpoint_destroy(sim) == 0 ? 0 : 7);
  }
  ExpectChildExitsZero(pid, "1: the child ran a parent's completion; 2: it had a backend of the "
                            "parent's to use; 3-7: its own did not start or send (see the test)");
  nic_sim_pause(nic_backend_started(NIC_BACKEND_SIM), false);
  EXPECT_TRUE(SameBytes(ReadExactly(pair_.rx, to_uring.Bytes().size()), to_uring.Bytes()));
  EXPECT_TRUE(SameBytes(ReadExactly(pair_.rx, from_child.Bytes().size()), from_child.Bytes()))
      << "the child's message through its own ring";
  ASSERT_TRUE(WaitUntil([&] { return done_[0].calls && done_[1].calls; }))
      << "a parent's completion was lost";
  EXPECT_EQ(done_[0].status, 0);
  EXPECT_EQ(done_[1].status, 0);
}

} // namespace
