// NIC translation-cache pressure on the sim backend with a tiny (8-entry) NIC cache: posting
// from many separate registrations pushes the working set over the capacity, after which small
// entries that would need a new registration are copied instead, and the report names the
// busiest regions. The first test runs a second time with the default cache, where nothing is
// copied. The pressure model is the process's: each test runs in a process of its own, with
// the settings ctest gives it (tests/safety.cmake).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
#include "sim_inbox.h"

namespace {

std::atomic<int> done{0};
void OnDone(void *, int) {
  done++;
}

// Posts one 2 KiB entry from each buffer (above the copy threshold, so each needs registering).
void post_each(nic_endpoint *ep, const std::vector<char *> &buffers) {
  for (char *b : buffers) {
    nic_sga sga;
    ASSERT_EQ(nic_sga_init(&sga, 0), 0);
    ASSERT_EQ(nic_sga_add(&sga, b, 2048), 0);
    ASSERT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), 0);
  }
}

// Posts one entry and waits for its completion: a registration in flight stays in the cache,
// which makes room for the next ones by merging neighbours instead.
void post_and_wait(nic_endpoint *ep, char *p, size_t len) {
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, len), 0);
  const int before = done;
  ASSERT_EQ(nic_sga_post(&sga, ep, OnDone, nullptr), 0);
  while (done == before)
    nic_poll(0);
}

TEST(Pressure, ManyRegionsInATinyCacheCopySmallNewEntries) {
  const bool tiny =
      getenv("NICMALLOC_SIM_TCACHE") && !strcmp(getenv("NICMALLOC_SIM_TCACHE"), "tiny");
  Inbox inbox;
  nic_endpoint *ep = nic_sim_endpoint_create(Receive, &inbox, 0);
  ASSERT_NE(ep, nullptr);
  // 40 buffers a page apart in an mmap: 40 separate cache registrations (gaps prevent merging).
  char *area = static_cast<char *>(aligned_alloc(4096, 80 * 4096));
  std::vector<char *> first, later;
  for (int i = 0; i < 20; i++)
    first.push_back(area + 2 * i * 4096);
  for (int i = 20; i < 40; i++)
    later.push_back(area + 2 * i * 4096);
  for (char *b : first)
    memset(b, 'a', 2048);
  for (char *b : later)
    memset(b, 'b', 2048);
  post_each(ep, first);
  nic_stats mid = Stats();
  post_each(ep, later);
  while (done < 40)
    nic_poll(0);
  nic_stats end = Stats();
  EXPECT_EQ(end.nic_cache_capacity, tiny ? 8u : 16384u);
  EXPECT_GE(end.nic_regions, 1u);
  if (tiny) {
    EXPECT_GT(end.nic_working_set, end.nic_cache_capacity);
    EXPECT_GT(mid.nic_pressure_pct, 100u);
    // Pressure builds up during the first 20 posts; every one after needed a new registration.
    EXPECT_GE(end.pressure_copies, 20u);
    EXPECT_LT(end.pressure_copies, 40u) << "the first posts, before any pressure, registered";
  } else {
    EXPECT_GE(end.nic_working_set, 40u) << "40 regions, each an MPT and an MTT entry";
    EXPECT_LT(end.nic_pressure_pct, 100u);
    EXPECT_EQ(end.pressure_copies, 0u);
  }
  // The bytes arrive either way.
  ASSERT_EQ(inbox.msgs.size(), 40u);
  for (auto &m : inbox.msgs)
    EXPECT_TRUE(m == std::string(2048, 'a') || m == std::string(2048, 'b'));
  char report[4096] = {0};
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  nic_print_stats(fds[1]);
  close(fds[1]);
  ASSERT_GT(read(fds[0], report, sizeof report - 1), 0);
  close(fds[0]);
  EXPECT_NE(strstr(report, "NIC cache"), nullptr) << report;
  EXPECT_NE(strstr(report, "busiest: cache region near"), nullptr) << report;
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  free(area);
}

// The default cache (cx5, 16,384 entries) with every lookup a miss: 9000 registrations of a
// page each, posted once, need 18,000 entries. A window of 4096 accesses never showed more than
// 8192 of them (50%), and nothing was ever copied.
TEST(Pressure, EveryLookupMissingGoesPastTheCapacity) {
  constexpr int kRegions = 9000;
  std::atomic<int> received{0};
  nic_endpoint *ep = nic_sim_endpoint_create(
      [](void *arg, void *, size_t) { ++*static_cast<std::atomic<int> *>(arg); }, &received, 0);
  ASSERT_NE(ep, nullptr);
  // A page apart, so that no two registrations merge; only the first half of each page is sent.
  char *area = static_cast<char *>(aligned_alloc(4096, size_t(kRegions) * 2 * 4096));
  ASSERT_NE(area, nullptr);
  for (int i = 0; i < kRegions; i++) {
    char *b = area + size_t(i) * 2 * 4096;
    memset(b, 'c', 2048);
    post_and_wait(ep, b, 2048);
  }
  nic_stats s = Stats();
  EXPECT_EQ(s.nic_cache_capacity, 16384u);
  EXPECT_GE(s.nic_modeled_misses, 2u * (kRegions - s.pressure_copies)) << "all missed";
  EXPECT_GT(s.nic_working_set, s.nic_cache_capacity);
  EXPECT_GE(s.nic_pressure_pct, 100u);
  EXPECT_GT(s.pressure_copies, 0u) << "past the capacity, new small entries are copied";
  EXPECT_EQ(received.load(), kRegions);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  free(area);
}

} // namespace
