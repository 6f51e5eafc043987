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

// The readable report (nic_print_stats), through a pipe.
std::string Report() {
  int fds[2];
  if (pipe(fds)) return "";
  nic_print_stats(fds[1]);
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    text.append(buf, size_t(n));
  close(fds[0]);
  return text;
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
    // Pressure builds up during the first 20 posts; every one after needed a new registration,
    // and most are copied: the copies' own bounce slab takes the window over, and registering
    // starts again only once the working set is back under 90% of the capacity.
    EXPECT_GT(mid.pressure_copies, 0u);
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
  const std::string text = Report();
  const char *report = text.c_str();
  EXPECT_NE(strstr(report, "NIC cache"), nullptr) << report;
  EXPECT_NE(strstr(report, "busiest: "), nullptr) << report;
  EXPECT_NE(strstr(report, "cache region near"), nullptr) << report;
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  free(area);
}

// The report's busiest regions name a dataplane step by its chunk and its step in the chunk. It
// used to print the step's number across chunks (chunk x 512 + step) as "chunk N".
TEST(Pressure, TheBusiestDataplaneRegionsAreNamedByChunkAndStep) {
  Inbox inbox;
  nic_endpoint *ep = nic_sim_endpoint_create(Receive, &inbox, 0);
  ASSERT_NE(ep, nullptr);
  const size_t n = 24u << 20;
  char *b = static_cast<char *>(nic_malloc(n));
  ASSERT_NE(b, nullptr);
  memset(b, 'd', n);
  char *last = b + n - 8192;
  nic_region_ref first_ref, last_ref;
  ASSERT_EQ(nic_translate(b, 4096, &first_ref), 0);
  ASSERT_EQ(nic_translate(last, 4096, &last_ref), 0);
  for (int i = 0; i < 30; i++)
    post_and_wait(ep, last, 4096);
  for (int i = 0; i < 20; i++)
    post_and_wait(ep, b, 4096);
  const std::string report = Report();
  const char *busiest = strstr(report.c_str(), "busiest: ");
  ASSERT_NE(busiest, nullptr) << report;
  unsigned chunk[2], step[2];
  unsigned long long entries[2];
  ASSERT_EQ(sscanf(busiest, "busiest: chunk %u step %u: %llu entries, chunk %u step %u: %llu",
                   &chunk[0], &step[0], &entries[0], &chunk[1], &step[1], &entries[1]),
            6)
      << busiest;
  EXPECT_EQ(chunk[0], last_ref.chunk_index);
  EXPECT_EQ(chunk[1], first_ref.chunk_index);
  EXPECT_EQ(entries[0], 30u);
  EXPECT_EQ(entries[1], 20u);
  const nic_stats s = Stats();
  EXPECT_LT(step[0], s.chunk_size / s.pin_step);
  EXPECT_EQ(step[0] - step[1], size_t(static_cast<char *>(last_ref.region_base) -
                                      static_cast<char *>(first_ref.region_base)) /
                                   s.pin_step);
  free(b);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
}

// n pages a page apart in one mapping, each its own registration-cache region once posted, and
// a sim endpoint that drops what it receives, destroyed once its posts are done.
struct Pages {
  char *area;
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  explicit Pages(int n) : area(static_cast<char *>(aligned_alloc(4096, size_t(n) * 2 * 4096))) {
    memset(area, 'p', size_t(n) * 2 * 4096);
  }
  ~Pages() {
    while (ep && nic_sim_endpoint_destroy(ep) == -EBUSY)
      nic_poll(0);
    free(area);
  }
  char *at(int i) const { return area + size_t(i) * 2 * 4096; }
  // Posts 2 KiB of page i and waits for it, count times.
  void post(int i, int count = 1) {
    for (int k = 0; k < count; k++)
      post_and_wait(ep, at(i), 2048);
  }
};

// Once the tiny cache is overcommitted, one buffer posted again and again, copied each time
// while the pressure lasts: the copies are read through their bounce slab, whose translations
// are all the NIC needs then, so the working set falls, copying stops and the buffer is
// registered. Copies used to be left out of the working set: it never moved again, and every
// post after was copied for good (the audit's stall: 10000 posts, 10035 copies, 125% throughout).
TEST(Pressure, CopiesAgeTheWindowSoThePressureFalls) {
  Pages pages(41);
  ASSERT_NE(pages.ep, nullptr);
  for (int i = 0; i < 40; i++)
    pages.post(i);
  nic_stats high = Stats();
  ASSERT_GT(high.pressure_copies, 0u) << "40 regions overcommit an 8-entry cache";
  pages.post(40, 100);
  nic_stats later = Stats();
  pages.post(40, 100);
  nic_stats end = Stats();
  EXPECT_LT(end.nic_pressure_pct, 90u);
  EXPECT_EQ(end.pressure_copies, later.pressure_copies) << "the buffer is registered now";
  EXPECT_LT(end.pressure_copies, high.pressure_copies + 100);
}

// Copying starts above 100% and stops only under 90%. In the tiny cache (8 entries, a window of
// 32 lookups, 2 per post of a registered page): five regions make 10 entries, then one of them
// posted again and again pushes the others out one by one, through 8 entries (100%: copying
// goes on, a new region is copied) down to 6 and under (75%: a new region is registered).
TEST(Pressure, CopyingStopsOnlyUnderNinetyPercent) {
  Pages pages(7);
  ASSERT_NE(pages.ep, nullptr);
  for (int i = 0; i < 5; i++)
    pages.post(i);
  ASSERT_EQ(Stats().nic_working_set, 10u);
  ASSERT_EQ(Stats().pressure_copies, 0u);
  int posts = 0;
  while (Stats().nic_pressure_pct > 100 && posts++ < 100)
    pages.post(0); // cached: posted as it is, whatever the pressure
  ASSERT_EQ(Stats().nic_pressure_pct, 100u) << "after " << posts << " posts";
  pages.post(5);
  EXPECT_EQ(Stats().pressure_copies, 1u) << "at 100% a new region is still copied";
  posts = 0;
  while (Stats().nic_pressure_pct >= 90 && posts++ < 100)
    pages.post(0);
  ASSERT_LT(Stats().nic_pressure_pct, 90u) << "after " << posts << " posts";
  pages.post(6);
  EXPECT_EQ(Stats().pressure_copies, 1u) << "under 90% a new region is registered";
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
  EXPECT_GT(s.nic_pressure_pct, 100u);
  EXPECT_GT(s.pressure_copies, 0u) << "past the capacity, new small entries are copied";
  EXPECT_EQ(received.load(), kRegions);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  free(area);
}

// The percentage rounds up: a working set one entry over the capacity, where copying starts,
// shows over 100%. Rounded down, 201 entries of 200 showed 100% while small entries were copied.
TEST(Pressure, OneEntryOverTheCapacityShowsOverOneHundredPercent) {
  Pages pages(101);
  ASSERT_NE(pages.ep, nullptr);
  ASSERT_EQ(Stats().nic_cache_capacity, 200u) << "run with NICMALLOC_SIM_TCACHE_ENTRIES=200";
  for (int i = 0; i < 99; i++)
    pages.post(i);                              // 198 entries: an MPT and an MTT entry each
  post_and_wait(pages.ep, pages.at(100), 8192); // 3: an MPT and two MTT entries
  nic_stats s = Stats();
  ASSERT_EQ(s.nic_working_set, 201u);
  EXPECT_EQ(s.nic_pressure_pct, 101u);
  pages.post(99);
  EXPECT_EQ(Stats().pressure_copies, 1u) << "over the capacity: a new small region is copied";
}

} // namespace
