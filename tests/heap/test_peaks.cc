// The peaks of dataplane live and pinned bytes (alloc/heap/peaks.h): what a program that can only
// be asked at exit (an unmodified server under LD_PRELOAD) reports about its busiest moment.
#include "nicmalloc.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <stdio.h>
#include <unistd.h>

namespace {

constexpr size_t kMiB = size_t{1} << 20;

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

// Resident memory of the process, from the kernel: a look that reads no nicmalloc statistics.
size_t ResidentBytes() {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Live bytes that come and go between two reads of the statistics are still in the live peak
// read afterwards: the reaper saw them. A read keeps what it sees, so nothing reads the
// statistics while the block is live: the process's resident memory tells that a reaper pass has
// run (a pass samples the peaks before it purges the huge-block cache, which gives back a freed
// 20 MiB control block). Runs with NICMALLOC_PURGE_DELAY_MS=40: a pass every 10 ms.
TEST(Peaks, LiveBytesBetweenTwoReadsAreInThePeak) {
  const nic_stats before = Stats();
  const size_t size = before.dataplane_live_peak + 24 * kMiB;
  char *block = static_cast<char *>(nic_malloc(size));
  ASSERT_NE(block, nullptr);
  ASSERT_TRUE(nic_is_dataplane(block));
  memset(block, 1, size);
  // A control block over 16 MiB goes to the huge-block cache when freed, and out of it at the
  // first pass after the purge delay.
  char *huge = static_cast<char *>(malloc(20 * kMiB));
  ASSERT_NE(huge, nullptr);
  memset(huge, 2, 20 * kMiB);
  const size_t with_huge = ResidentBytes();
  free(huge);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool purged = false;
  while (!(purged = ResidentBytes() + 16 * kMiB <= with_huge) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(purged) << "no reaper pass within 30 s";
  free(block);
  const nic_stats after = Stats();
  EXPECT_LT(after.dataplane_live, size);
  EXPECT_GE(after.dataplane_live_peak, size);
  EXPECT_GE(after.dataplane_pinned_peak, size);
  EXPECT_GE(after.dataplane_pinned_peak, after.dataplane_pinned);
}

// A read counts what it sees: a block allocated and read is in the peaks at once.
TEST(Peaks, AReadCountsWhatItSees) {
  char *block = static_cast<char *>(nic_malloc(4 * kMiB));
  ASSERT_NE(block, nullptr);
  const nic_stats s = Stats();
  EXPECT_GE(s.dataplane_live_peak, s.dataplane_live);
  EXPECT_GE(s.dataplane_live, 4 * kMiB);
  EXPECT_GE(s.dataplane_pinned_peak, s.dataplane_pinned);
  EXPECT_GT(s.dataplane_pinned, 0u);
  free(block);
}

// A peak never goes down: what one read saw is in every later read's peak, though no reaper pass
// ran while it was live (the block lives for two calls), and the pass nic_collect makes
// afterwards sees it gone. Before, a read kept nothing: the program that read its figures before
// it freed its buffers read a lower peak after, and the exit report said 0.
TEST(Peaks, APeakReadOnceNeverGoesDown) {
  char *block = static_cast<char *>(nic_malloc(32 * kMiB));
  ASSERT_NE(block, nullptr);
  const nic_stats seen = Stats();
  free(block);
  nic_collect();
  const nic_stats later = Stats();
  EXPECT_GE(seen.dataplane_live_peak, 32 * kMiB);
  EXPECT_GE(later.dataplane_live_peak, seen.dataplane_live_peak);
  EXPECT_GE(later.dataplane_pinned_peak, seen.dataplane_pinned_peak);
}

} // namespace
