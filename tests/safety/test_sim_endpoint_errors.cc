// The sim endpoint's errors (safety/endpoint.c): nic_sim_endpoint_destroy of something that is not
// a sim endpoint (-EINVAL, counted in endpoint_errors and said once on stderr, as the other
// backends' destroys do), and a message no receive buffer can be had for. Runs with
// NICMALLOC_ON_PIN_FAIL=fail, so that a dataplane request larger than a chunk fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "nicmalloc.h"

namespace {

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}
uint64_t EndpointErrors() {
  return Stats().endpoint_errors;
}

TEST(SimEndpointErrors, DestroyingWhatNoSimConstructorMadeIsCountedAndSaidOnce) {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr);
  int not_an_endpoint = 0;
  const uint64_t before = EndpointErrors();
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sim_endpoint_destroy(nullptr), -EINVAL);
  EXPECT_EQ(nic_sim_endpoint_destroy(reinterpret_cast<nic_endpoint *>(&not_an_endpoint)), -EINVAL);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), -EINVAL) << "destroyed twice";
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(EndpointErrors() - before, 3u);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("not an endpoint made by nic_sim_endpoint_create"), std::string::npos) << err;
}

// The sim endpoint receives each message into a dataplane buffer of its own. One longer than a
// chunk cannot have one (NICMALLOC_ON_PIN_FAIL=fail): the message is dropped, its post completes
// with -ENOMEM, each drop is counted in recv_no_buffer and the cause said once. It was said on
// every message, counted nowhere, and the post completed with 0, as if delivered.
TEST(SimEndpointErrors, AMessageWithNoReceiveBufferFailsItsPostAndIsCountedAndSaidOnce) {
  std::atomic<int> received{0}, done{0}, failed{0}, status{1};
  nic_endpoint *ep = nic_sim_endpoint_create(
      [](void *arg, void *, size_t) { ++*static_cast<std::atomic<int> *>(arg); }, &received, 0);
  ASSERT_NE(ep, nullptr);
  struct Counts {
    std::atomic<int> *done, *failed, *status;
  } counts{&done, &failed, &status};
  auto on_done = [](void *arg, int st) {
    auto *c = static_cast<Counts *>(arg);
    if (st) ++*c->failed;
    *c->status = st;
    ++*c->done;
  };
  const size_t part = Stats().chunk_size / 2 + 4096; // two of them: more than a chunk
  char *a = static_cast<char *>(nic_malloc(part)), *b = static_cast<char *>(nic_malloc(part));
  ASSERT_TRUE(a && b && nic_is_dataplane(a) && nic_is_dataplane(b));
  memset(a, 'a', part);
  memset(b, 'b', part);
  const uint64_t dropped = Stats().recv_no_buffer;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; i++) {
    nic_sga sga;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, a, part), 0);
    ASSERT_EQ(nic_sga_add(&sga, b, part), 0);
    ASSERT_EQ(nic_sga_post(&sga, ep, on_done, &counts), 0);
    while (done.load() < i + 1)
      nic_poll(0);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(failed.load(), 3);
  EXPECT_EQ(status.load(), -ENOMEM);
  EXPECT_EQ(received.load(), 0);
  EXPECT_EQ(Stats().recv_no_buffer - dropped, 3u);
  size_t said = 0;
  for (size_t at = 0; (at = err.find("no dataplane memory", at)) != std::string::npos; at++)
    said++;
  EXPECT_EQ(said, 1u) << err;

  // A message that fits still arrives.
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, a, 1000), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, on_done, &counts), 0);
  while (done.load() < 4)
    nic_poll(0);
  EXPECT_EQ(status.load(), 0);
  EXPECT_EQ(received.load(), 1);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  free(a);
  free(b);
}

} // namespace
