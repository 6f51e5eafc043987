// Messages that waited behind NICMALLOC_RECV_HELD_MAX (256K here: tests/uring.cmake) are handed
// over later by whichever thread's nic_poll drains them (safety/receive.c, nic_receive_drain).
// While such a receive function runs on one thread: its endpoint's destroy answers -EBUSY, from
// another thread and from inside it (the end of a stream, an empty datagram); a thread asleep in
// nic_wait, or in its own poll on nic_event_fd, sleeps instead of spinning; and a message that
// comes meanwhile still wakes it.
#include "uring_loopback.h"

#include <condition_variable>
#include <memory>

#include <sys/syscall.h>

using namespace uring_test;

namespace {

// Holds every message while hold is set. Once it is not, the first call `which` picks blocks:
// it tries its endpoint's destroy from inside (when ep is set), says it is in, and waits for
// Let() (or the deadline).
struct Blocker {
  enum Which { kAny, kEnd, kEmpty };
  explicit Blocker(Which which) : which(which) {}
  static void Fn(void *arg, void *data, size_t len) {
    auto *b = static_cast<Blocker *>(arg);
    {
      std::lock_guard<std::mutex> g(b->mu);
      b->calls++;
      if (b->hold) {
        if (data && nic_hold(data) == 0) b->held.push_back(data);
        return;
      }
      const bool picked = b->which == kAny || (b->which == kEnd ? !data : data && !len);
      if (!picked || b->blocked) return;
      b->blocked = true;
    }
    const int inside = b->ep ? nic_uring_endpoint_destroy(b->ep) : 1;
    std::unique_lock<std::mutex> g(b->mu);
    b->inside = inside;
    b->in = true;
    b->cv.notify_all();
    b->cv.wait_until(g, Clock::now() + kLimit, [&] { return b->let; });
    b->out = true;
  }
  size_t Calls() {
    std::lock_guard<std::mutex> g(mu);
    return calls;
  }
  // Stops holding and releases what it held: the waiting messages may go.
  void Release() {
    std::vector<void *> h;
    {
      std::lock_guard<std::mutex> g(mu);
      hold = false;
      h.swap(held);
    }
    for (void *p : h)
      EXPECT_EQ(nic_release(p), 0);
  }
  bool WaitIn() {
    std::unique_lock<std::mutex> g(mu);
    return cv.wait_until(g, Clock::now() + kLimit, [&] { return in; });
  }
  void Let() {
    std::lock_guard<std::mutex> g(mu);
    let = true;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  const Which which;
  nic_endpoint *ep = nullptr;
  bool hold = true, blocked = false, in = false, let = false;
  std::atomic<bool> out{false};
  int inside = 1;
  size_t calls = 0;
  std::vector<void *> held;
};

struct Counter {
  static void Fn(void *arg, void *data, size_t) {
    if (data) static_cast<std::atomic<int> *>(arg)->fetch_add(1);
  }
};

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

pid_t Tid() {
  return static_cast<pid_t>(syscall(SYS_gettid));
}

class UringReceiveDrain : public UringSgaTest {
protected:
  void SetUp() override {
    const char *cap = getenv("NICMALLOC_RECV_HELD_MAX");
    if (!cap || strcmp(cap, "256K")) GTEST_SKIP() << "run with NICMALLOC_RECV_HELD_MAX=256K";
    UringSgaTest::SetUp();
  }
  void TearDown() override {
    if (blocker_) blocker_->Let();
    if (drainer_.joinable()) drainer_.join();
    UringSgaTest::TearDown();
  }
  // The test's receive function, which outlives the thread that may run it.
  Blocker &NewBlocker(Blocker::Which which) {
    blocker_ = std::make_unique<Blocker>(which);
    return *blocker_;
  }
  // An endpoint receiving into b, which the test destroys itself.
  nic_endpoint *OwnEndpoint(int fd, Blocker &b) {
    nic_endpoint *ep = nic_uring_endpoint_create(fd);
    EXPECT_NE(ep, nullptr) << strerror(errno);
    if (ep) {
      EXPECT_EQ(nic_endpoint_receive(ep, Blocker::Fn, &b), 0);
    }
    return ep;
  }
  // `datagrams` datagrams of 60000 bytes, then `empties` empty ones, to b's endpoint, one at a
  // time, each handed over (b holds it) or waiting: 5 reach the 256 KiB cap, the rest wait.
  void HoldToTheCap(UdpPair &pair, Blocker &b, size_t datagrams, size_t empties) {
    static const std::string kData(60000, 'd');
    const uint64_t waiting0 = NicStats().recv_waiting;
    for (size_t i = 0; i < datagrams + empties; i++) {
      const size_t len = i < datagrams ? kData.size() : 0;
      ASSERT_EQ(send(pair.tx, kData.data(), len, 0), ssize_t(len));
      ASSERT_TRUE(NicPollUntil([&] {
        return b.Calls() + (NicStats().recv_waiting - waiting0) == i + 1;
      })) << "datagram "
          << i << " was neither handed over nor waiting";
    }
    ASSERT_EQ(b.Calls(), 5u);
  }
  // b's holds released, another thread's nic_poll hands the waiting messages over until b
  // blocks in one of them: false if it never does.
  bool DrainUntilBlocked(Blocker &b) {
    EXPECT_GT(NicStats().recv_waiting, 0u) << "nothing waits: no drain would run";
    b.Release();
    drainer_ = std::thread([&b] {
      for (auto end = Clock::now() + 2 * kLimit; !b.out && Clock::now() < end;)
        if (nic_poll(0) == 0) usleep(100);
    });
    return b.WaitIn();
  }
  // While b blocks: its endpoint ep's destroy is -EBUSY from inside b's call and from here, and
  // 0 once the call returned.
  void DestroyIsBusyUntilTheCallReturns(Blocker &b, nic_endpoint *ep) {
    b.ep = ep;
    ASSERT_TRUE(DrainUntilBlocked(b)) << "the call never came";
    const int here = nic_uring_endpoint_destroy(ep);
    const bool running = !b.out;
    b.Let();
    drainer_.join();
    EXPECT_EQ(b.inside, -EBUSY) << "destroy from inside the receive function";
    EXPECT_TRUE(running);
    EXPECT_EQ(here, -EBUSY) << "destroy from another thread while the receive function runs";
    int rc = -EBUSY;
    EXPECT_TRUE(NicPollUntil([&] { return (rc = nic_uring_endpoint_destroy(ep)) != -EBUSY; }));
    EXPECT_EQ(rc, 0) << "destroy after the receive function returned";
  }
  // The share of a CPU a thread calling wait_once() in a loop uses, over half a second of wall
  // time, while b blocks in the drain on another thread.
  template <class WaitOnce> double WaiterCpuShare(UdpPair &pair, Blocker &b, WaitOnce wait_once) {
    HoldToTheCap(pair, b, 6, 0);
    if (HasFatalFailure()) return -1;
    EXPECT_TRUE(DrainUntilBlocked(b));
    std::atomic<bool> stop{false};
    double cpu = 0, wall = 1;
    std::thread waiter([&] {
      const double cpu0 = ThreadCpuSeconds();
      const auto wall0 = Clock::now();
      while (!stop)
        wait_once();
      cpu = ThreadCpuSeconds() - cpu0;
      wall = std::chrono::duration<double>(Clock::now() - wall0).count();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop = true;
    waiter.join();
    EXPECT_FALSE(b.out) << "the receive function returned before the end of the window";
    return cpu / wall;
  }
  std::unique_ptr<Blocker> blocker_;
  std::thread drainer_;
};

TEST_F(UringReceiveDrain, DestroyIsBusyWhileADrainedEndCallRuns) {
  LoopbackPair pair;
  Blocker &b = NewBlocker(Blocker::kEnd);
  nic_endpoint *ep = OwnEndpoint(pair.rx, b);
  ASSERT_NE(ep, nullptr);
  nic_uring_stats u0{};
  ASSERT_TRUE(nic_uring_get_stats(nic_backend_active(), &u0));
  const uint64_t waiting0 = NicStats().recv_waiting;
  const std::string data(320 << 10, 's'); // past the cap, within the endpoint's buffers
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = send(pair.tx, data.data() + off, data.size() - off, 0);
    ASSERT_GT(n, 0) << strerror(errno);
    off += size_t(n);
  }
  ASSERT_EQ(shutdown(pair.tx, SHUT_WR), 0);
  // Until the end is read too: each message (and the end) handed over or waiting.
  ASSERT_TRUE(NicPollUntil([&] {
    nic_uring_stats u{};
    nic_uring_get_stats(nic_backend_active(), &u);
    return b.Calls() + (NicStats().recv_waiting - waiting0) ==
           u.recv_messages - u0.recv_messages + 1;
  }));
  ASSERT_GT(NicStats().recv_waiting, waiting0) << "the end call did not wait";
  DestroyIsBusyUntilTheCallReturns(b, ep);
}

// An empty datagram holds no receive buffer: the backend cannot tell it is with the program.
TEST_F(UringReceiveDrain, DestroyIsBusyWhileADrainedEmptyDatagramIsHandedOver) {
  UdpPair pair;
  Blocker &b = NewBlocker(Blocker::kEmpty);
  nic_endpoint *ep = OwnEndpoint(pair.rx, b);
  ASSERT_NE(ep, nullptr);
  HoldToTheCap(pair, b, 6, 1);
  if (HasFatalFailure()) return;
  DestroyIsBusyUntilTheCallReturns(b, ep);
}

// Without work of its own, a waiter sleeps: one that spins uses all the CPU the scheduler gives
// it (measured: 0.9 to 1.0 s per second of wall time here), one that sleeps nearly none (it wakes
// at its 20 ms timeouts). The bound is on work done, not on time: a fifth of the wall time
// leaves room for a busy machine, which can only make a spinning waiter look better, never a
// sleeping one worse.
constexpr double kSleepingShare = 0.2;

TEST_F(UringReceiveDrain, NicWaitSleepsWhileAnotherThreadsDrainRunsAReceiveFunction) {
  UdpPair pair;
  Blocker &b = NewBlocker(Blocker::kAny);
  ASSERT_EQ(nic_endpoint_receive(Endpoint(pair.rx), Blocker::Fn, &b), 0);
  const double share = WaiterCpuShare(pair, b, [] { nic_wait(20); });
  EXPECT_LT(share, kSleepingShare) << "nic_wait spun while the only work was another's drain";
}

TEST_F(UringReceiveDrain, AnEventFdLoopSleepsWhileAnotherThreadsDrainRunsAReceiveFunction) {
  UdpPair pair;
  Blocker &b = NewBlocker(Blocker::kAny);
  ASSERT_EQ(nic_endpoint_receive(Endpoint(pair.rx), Blocker::Fn, &b), 0);
  const int efd = nic_event_fd();
  ASSERT_GE(efd, 0);
  const double share = WaiterCpuShare(pair, b, [efd] {
    pollfd p = {efd, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) nic_poll(0);
  });
  EXPECT_LT(share, kSleepingShare) << "nic_event_fd stayed readable through another's drain";
}

// While the drain runs, a message to another endpoint wakes a waiter, which hands it over; one
// to the draining endpoint wakes it too, and waits behind that endpoint's messages.
TEST_F(UringReceiveDrain, AMessageThatComesDuringADrainWakesAWaiter) {
  UdpPair pair, other;
  Blocker &b = NewBlocker(Blocker::kAny);
  ASSERT_EQ(nic_endpoint_receive(Endpoint(pair.rx), Blocker::Fn, &b), 0);
  std::atomic<int> others{0};
  ASSERT_EQ(nic_endpoint_receive(Endpoint(other.rx), Counter::Fn, &others), 0);
  HoldToTheCap(pair, b, 6, 0);
  if (HasFatalFailure()) return;
  ASSERT_TRUE(DrainUntilBlocked(b));
  while (nic_poll(0) >
         0) { // what the releases left the backend to do: the waiter's is the datagram
  }
  // A waiter asleep in nic_wait, then a datagram: what its nic_wait returned.
  auto woken_by = [&](int tx) {
    std::atomic<pid_t> tid{0};
    int ran = -1;
    std::thread waiter([&] {
      tid = Tid();
      ran = nic_wait(static_cast<int>(kLimit.count()));
    });
    while (!tid)
      std::this_thread::yield();
    EXPECT_TRUE(WaitUntilInPoll(tid));
    EXPECT_EQ(send(tx, "m", 1, 0), 1);
    waiter.join();
    return ran;
  };
  EXPECT_GT(woken_by(other.tx), 0) << "nic_wait slept through a message to another endpoint";
  EXPECT_EQ(others.load(), 1);
  const uint64_t waiting0 = NicStats().recv_waiting;
  EXPECT_GT(woken_by(pair.tx), 0) << "nic_wait slept through a message to the draining one";
  EXPECT_EQ(NicStats().recv_waiting, waiting0 + 1) << "it goes behind the drained ones";
  EXPECT_FALSE(b.out) << "the receive function returned before the end of the test";
  b.Let();
  EXPECT_TRUE(NicPollUntil([&] { return b.Calls() == 7; }));
  EXPECT_EQ(NicStats().recv_waiting, 0u);
}

} // namespace
