// An endpoint given to another kind's destroy (safety/endpoint_common.c, nic_ep_untrack): -EINVAL,
// and nothing of the endpoint changes. Run on io_uring with NICMALLOC_RECV_HELD_MAX=256K
// (tests/uring.cmake), where received messages wait behind the cap: a destroy of the right
// kind gives them back undelivered, a wrong one must not.
#include "uring_loopback.h"

using namespace uring_test;

namespace {

// Holds every message it gets until Release.
struct Holder {
  static void Fn(void *arg, void *data, size_t) {
    auto *h = static_cast<Holder *>(arg);
    std::lock_guard<std::mutex> l(h->mu);
    if (!data) return;
    h->calls++;
    if (h->hold && nic_hold(data) == 0) h->held.push_back(data);
  }
  size_t Calls() {
    std::lock_guard<std::mutex> l(mu);
    return calls;
  }
  void Release() {
    std::vector<void *> h;
    {
      std::lock_guard<std::mutex> l(mu);
      hold = false;
      h.swap(held);
    }
    for (void *p : h)
      EXPECT_EQ(nic_release(p), 0);
  }
  std::mutex mu;
  size_t calls = 0;
  bool hold = true;
  std::vector<void *> held;
};

using WrongDestroy = UringSgaTest;

TEST_F(WrongDestroy, AnotherKindsDestroyIsRefusedAndGivesBackNothing) {
  const char *cap = getenv("NICMALLOC_RECV_HELD_MAX");
  if (!cap || strcmp(cap, "256K")) GTEST_SKIP() << "run with NICMALLOC_RECV_HELD_MAX=256K";
  UdpPair pair;
  Holder holder;
  nic_endpoint *ep = Endpoint(pair.rx);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(ep, Holder::Fn, &holder), 0);
  constexpr size_t kSent = 8, kLen = 60000; // 8 of them pass the cap: some wait
  Region data(kLen + kSent, 3);
  const uint64_t waiting0 = NicStats().recv_waiting;
  for (size_t i = 0; i < kSent; i++) {
    ASSERT_EQ(send(pair.tx, data.base + i, kLen, 0), static_cast<ssize_t>(kLen));
    ASSERT_TRUE(NicPollUntil([&] {
      return holder.Calls() + (NicStats().recv_waiting - waiting0) == i + 1;
    })) << "datagram "
        << i << " was neither handed over nor waiting";
  }
  const uint64_t waiting = NicStats().recv_waiting - waiting0;
  ASSERT_GT(waiting, 0u) << "nothing waits behind the cap";

  const uint64_t dropped0 = NicStats().recv_capped_dropped, errors0 = NicStats().endpoint_errors;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_verbs_endpoint_destroy(ep), -EINVAL);
  EXPECT_EQ(nic_dpdk_endpoint_destroy(ep), -EINVAL);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), -EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(NicStats().endpoint_errors - errors0, 3u) << err;
  EXPECT_EQ(NicStats().recv_waiting - waiting0, waiting) << "waiting messages were given back";
  EXPECT_EQ(NicStats().recv_capped_dropped - dropped0, 0u);

  holder.Release();
  EXPECT_TRUE(NicPollUntil([&] { return holder.Calls() == kSent; }))
      << holder.Calls() << " of " << kSent << " handed over";
  EXPECT_EQ(NicStats().recv_waiting, waiting0);
}

} // namespace
