// Empty UDP datagrams waiting on an io_uring endpoint ahead of a message (regcache/uring/
// uring_recv.c). Run with one receive buffer (tests/uring.cmake): the empties the queue lets
// wait once left the message that followed them no slot, and it was written over the oldest
// one, handed over first, then again after its buffer had gone back to the kernel.
#include "uring_loopback.h"

#include <algorithm>

using namespace uring_test;

namespace {

struct Got {
  static void Fn(void *arg, void *data, size_t len) {
    auto *g = static_cast<Got *>(arg);
    std::lock_guard<std::mutex> l(g->mu);
    if (data) g->msgs.emplace_back(static_cast<char *>(data), len);
  }
  size_t Calls() {
    std::lock_guard<std::mutex> l(mu);
    return msgs.size();
  }
  std::mutex mu;
  std::vector<std::string> msgs;
};

// Whether the kernel has taken every datagram off fd, so that the endpoint's receive has
// completed for each. No nic_poll meanwhile: they all wait in the endpoint's queue.
bool Drained(int fd) {
  char c;
  for (auto end = Clock::now() + kLimit; Clock::now() < end; usleep(200))
    if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN) return true;
  return false;
}

uint64_t EmptiesDropped() {
  nic_uring_stats s{};
  EXPECT_TRUE(nic_uring_get_stats(nic_backend_active(), &s));
  return s.recv_empty_dropped;
}

using UringReceiveEmpties = UringSgaTest;

// As many empties wait as twice the buffers; one more is dropped (counted, said once), and the
// message after them still has its place, last.
TEST_F(UringReceiveEmpties, AMessageAfterAsManyEmptiesAsMayWaitComesOnceInItsPlace) {
  const unsigned buffers = static_cast<unsigned>(atoi(getenv("NICMALLOC_RECV_BUFFERS") ?: "32"));
  UdpPair pair;
  Got got;
  nic_endpoint *ep = Endpoint(pair.rx);
  ASSERT_NE(ep, nullptr);
  ASSERT_EQ(nic_endpoint_receive(ep, Got::Fn, &got), 0);
  const uint64_t dropped0 = EmptiesDropped();
  testing::internal::CaptureStderr();
  const size_t waiting = 2 * buffers;
  for (size_t i = 0; i < waiting + 1; i++)
    ASSERT_EQ(send(pair.tx, "", 0, 0), 0);
  ASSERT_EQ(send(pair.tx, "HELLO", 5, 0), 5);
  ASSERT_TRUE(Drained(pair.rx)) << "the kernel never took the datagrams";
  ASSERT_TRUE(NicPollUntil([&] { return got.Calls() >= waiting + 1; }));
  for (int i = 0; i < 20; i++) // a message handed over twice would come now
    nic_poll(0);
  ASSERT_EQ(send(pair.tx, "AGAIN", 5, 0), 5);
  ASSERT_TRUE(NicPollUntil([&] { return got.Calls() >= waiting + 2; }));
  const std::string err = testing::internal::GetCapturedStderr();

  std::vector<std::string> want(waiting, "");
  want.push_back("HELLO");
  want.push_back("AGAIN");
  EXPECT_EQ(got.msgs, want);
  EXPECT_EQ(EmptiesDropped() - dropped0, 1u);
  EXPECT_EQ(err.find("given back twice"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "the drop, said once: " << err;
}

} // namespace
