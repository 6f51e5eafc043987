// Messages that waited behind NICMALLOC_RECV_HELD_MAX (256K here: tests/uring.cmake) are handed
// over later by whichever thread's nic_poll drains them (safety/receive.c, nic_receive_drain).
// While such a receive function runs on one thread, its endpoint's destroy answers -EBUSY, from
// another thread and from inside it (the end of a stream, an empty datagram).
#include "uring_loopback.h"

#include <condition_variable>
#include <memory>

using namespace uring_test;

namespace {

// Holds every message while hold is set. Once it is not, the first call `which` picks blocks:
// it tries its endpoint's destroy from inside (when ep is set), says it is in, and waits for
// Let() (or the deadline).
struct Blocker {
  enum Which { kEnd, kEmpty };
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
      const bool picked = b->which == kEnd ? !data : data && !len;
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

} // namespace
