// A sim endpoint's receiver replaced (nic_endpoint_receive) while messages arrive on the NIC's
// thread (safety/endpoint.c, deliver): each call must get the arg given with its own function,
// never the other one's. Run with no DMA delay (tests/safety.cmake), so that the receivers change
// many times a message.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "nicmalloc.h"

namespace {

int a_tag, b_tag;
std::atomic<long> calls{0}, mismatched{0};

void ReceiveA(void *arg, void *, size_t) {
  calls++;
  if (arg != &a_tag) mismatched++;
}
void ReceiveB(void *arg, void *, size_t) {
  calls++;
  if (arg != &b_tag) mismatched++;
}

TEST(SimReceiveSwap, EachReceiverIsCalledWithItsOwnArg) {
  constexpr long kMessages = 100000, kAhead = 64;
  nic_endpoint *ep = nic_sim_endpoint_create(ReceiveA, &a_tag, NIC_EP_ENGINE_COMPLETIONS);
  ASSERT_NE(ep, nullptr);
  void *buf = nic_malloc(64);
  ASSERT_NE(buf, nullptr);
  memset(buf, 'x', 64);
  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0};
  std::thread swapper([&] {
    for (long i = 0; !stop; i++, swaps++)
      if (nic_endpoint_receive(ep, i & 1 ? ReceiveA : ReceiveB, i & 1 ? &a_tag : &b_tag) != 0)
        ADD_FAILURE() << "nic_endpoint_receive refused";
  });
  std::atomic<long> done{0};
  long posted = 0;
  for (; posted < kMessages && !HasFailure(); posted++) {
    nic_sga sga;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, buf, 64), 0);
    ASSERT_EQ(nic_sga_post(
                  &sga, ep, [](void *d, int) { ++*static_cast<std::atomic<long> *>(d); }, &done),
              0);
    while (posted - done > kAhead)
      nic_poll(0);
  }
  while (done < posted)
    nic_poll(0);
  stop = true;
  swapper.join();
  EXPECT_EQ(calls.load(), posted);
  EXPECT_GT(swaps.load(), 0);
  EXPECT_EQ(mismatched.load(), 0) << "of " << calls.load() << " calls, over " << swaps.load()
                                  << " changes of receiver";
  free(buf);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
}

} // namespace
