// nic_endpoint_receive and nic_endpoint_status, the receive shape every backend shares, on the
// sim backend: the receiver can be given after the endpoint is made, messages land in dataplane
// memory, held ones are counted as on every backend, and bad calls are refused with one line. The
// real backends' receive paths have suites of their own (tests/regcache,
// tests/safety/test_uring_*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nicmalloc.h"

namespace {

struct Got {
  std::vector<std::string> msgs;
  int dataplane = 0;
  static void Fn(void *arg, void *data, size_t len) {
    auto *g = static_cast<Got *>(arg);
    g->msgs.emplace_back(static_cast<char *>(data), len);
    g->dataplane += nic_is_dataplane(data);
  }
};

void PostAndDrain(nic_endpoint *ep, const char *text) {
  void *p = nic_malloc(strlen(text));
  ASSERT_NE(p, nullptr);
  memcpy(p, text, strlen(text));
  int done = 0;
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, strlen(text)), 0);
  ASSERT_EQ(nic_sga_post(
                &sga, ep, [](void *arg, int) { ++*static_cast<int *>(arg); }, &done),
            0);
  while (!done)
    nic_poll(0);
  free(p);
}

TEST(Receive, AReceiverGivenLaterGetsTheMessagesInDataplaneMemory) {
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  Got first, later;
  nic_endpoint *ep = nic_sim_endpoint_create(Got::Fn, &first, 0);
  ASSERT_NE(ep, nullptr);
  PostAndDrain(ep, "one");
  EXPECT_EQ(nic_endpoint_status(ep), 0);
  ASSERT_EQ(nic_endpoint_receive(ep, Got::Fn, &later), 0);
  PostAndDrain(ep, "two");
  ASSERT_EQ(first.msgs.size(), 1u);
  EXPECT_EQ(first.msgs[0], "one");
  ASSERT_EQ(later.msgs.size(), 1u);
  EXPECT_EQ(later.msgs[0], "two");
  EXPECT_EQ(later.dataplane, 1) << "a received message lies in dataplane memory";
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  EXPECT_EQ(s.recv_messages - before.recv_messages, 2u) << "counted as on every backend";
  EXPECT_EQ(s.recv_bytes - before.recv_bytes, 6u);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
}

// A message the receiver holds is kept past its function, as on the NIC backends, and counted
// the same: recv_held_buffers and recv_held_bytes go up by the held messages, and back down once
// the last hold on them is released.
TEST(Receive, HeldMessagesAreCountedUntilReleased) {
  struct Holder {
    std::vector<std::pair<const char *, std::string>> kept;
    static void Fn(void *arg, void *data, size_t len) {
      ASSERT_EQ(nic_hold(data), 0);
      static_cast<Holder *>(arg)->kept.emplace_back(static_cast<const char *>(data),
                                                    std::string(static_cast<char *>(data), len));
    }
  } holder;
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  nic_endpoint *ep = nic_sim_endpoint_create(Holder::Fn, &holder, 0);
  ASSERT_NE(ep, nullptr);
  size_t bytes = 0;
  for (int i = 0; i < 8; i++) {
    const std::string text(100 + i * 3000, static_cast<char>('a' + i));
    PostAndDrain(ep, text.c_str());
    bytes += text.size();
  }
  ASSERT_EQ(holder.kept.size(), 8u);
  nic_stats held = NIC_STATS_INIT;
  nic_get_stats(&held);
  EXPECT_EQ(held.recv_held_buffers - before.recv_held_buffers, 8u);
  EXPECT_EQ(held.recv_held_bytes - before.recv_held_bytes, bytes);
  // Kept, not freed: it can be posted on after its receive function returned, as a forwarder
  // does (a freed block is refused with -NIC_EFREED).
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  EXPECT_EQ(nic_sga_add(&sga, holder.kept[0].first, holder.kept[0].second.size()), 0);
  nic_sga_reset(&sga);
  for (const auto &k : holder.kept) {
    EXPECT_EQ(std::string(k.first, k.second.size()), k.second) << "changed while held";
    EXPECT_EQ(nic_release(k.first), 0);
  }
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.recv_held_buffers, before.recv_held_buffers);
  EXPECT_EQ(after.recv_held_bytes, before.recv_held_bytes);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
}

TEST(Receive, BadCallsAreRefused) {
  Got g;
  int not_an_endpoint = 0;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_endpoint_receive(nullptr, Got::Fn, &g), -EINVAL);
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr);
  EXPECT_EQ(nic_endpoint_receive(ep, nullptr, &g), -EINVAL);
  EXPECT_EQ(nic_endpoint_receive(reinterpret_cast<nic_endpoint *>(&not_an_endpoint), Got::Fn, &g),
            -EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("nic_endpoint_receive"), std::string::npos) << err;
  EXPECT_EQ(nic_sim_endpoint_destroy(ep), 0);
}

// No endpoint is an error, as for nic_endpoint_receive and nic_endpoint_limits, not "open":
// counted on every call, said once.
TEST(Receive, StatusOfNoEndpointIsRefusedAndSaidOnce) {
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_endpoint_status(nullptr), -EINVAL);
  EXPECT_EQ(nic_endpoint_status(nullptr), -EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  nic_get_stats(&after);
  EXPECT_EQ(after.endpoint_errors - before.endpoint_errors, 2u);
  EXPECT_NE(err.find("nic_endpoint_status: no endpoint"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

} // namespace
