// NICMALLOC_FENCE=detect on the sim backend: a write to posted memory before the NIC read it is
// reported, with the range and the block's allocation site; nothing is reported for untouched
// posts or for copied (bounce) entries. Runs with NICMALLOC_FENCE=detect in the environment
// (tests/safety.cmake), which makes the allocator record the sites of blocks from the start.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "safety.h"
#include "sim_nic.h"
}

#include "sim_endpoint_fixture.h"

namespace {

// Named in the reports; in tests/safety/fence_detect_sites.c, a library of its own.
extern "C" char *AllocatedForTheWire(size_t size);
extern "C" char *AllocatedOnTheControlHeap(size_t size);

std::string Hex(const void *p) {
  char buf[32];
  snprintf(buf, sizeof buf, "%#lx", reinterpret_cast<unsigned long>(p));
  return buf;
}

class Detect : public SimEndpointTest {
protected:
  void SetUp() override {
    ASSERT_EQ(nic_safety_config()->fence, NIC_FENCE_DETECT) << "run with NICMALLOC_FENCE=detect";
    SimEndpointTest::SetUp();
  }
  // Lets the NIC read, and returns what was said on stderr meanwhile.
  std::string DrainSaying(int target) {
    testing::internal::CaptureStderr();
    Drain(target);
    return testing::internal::GetCapturedStderr();
  }
  void WrittenBeforeTheRead(char *p, size_t size, const char *site);
};

void Detect::WrittenBeforeTheRead(char *p, size_t size, const char *site) {
  memset(p, 'A', size);
  const uint64_t mismatches = Stats().fence_mismatches;
  const int target = done_count.load() + 1;
  PostPaused(p, size);
  memset(p + 1000, 'B', 10);
  std::string err = DrainSaying(target);
  EXPECT_EQ(Stats().fence_mismatches, mismatches + 1);
  EXPECT_NE(err.find("NICMALLOC_FENCE=detect: [" + Hex(p) + ", " + Hex(p + size) + ") (" +
                     std::to_string(size) +
                     " bytes) was written between nic_sga_post and the "
                     "NIC's read"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("in the block [" + Hex(p) + ", "), std::string::npos) << err;
  EXPECT_NE(err.find(site), std::string::npos) << "the allocation site is named\n" << err;
  std::string want(size, 'A');
  want.replace(1000, 10, 10, 'B');
  EXPECT_EQ(inbox.msgs.at(0), want) << "detect reports; it does not hold the writer";
}

TEST_F(Detect, DataplaneWriteBeforeTheReadIsReportedWithItsSite) {
  char *p = AllocatedForTheWire(8192);
  WrittenBeforeTheRead(p, 8192, "AllocatedForTheWire");
  free(p);
}

TEST_F(Detect, ControlHeapWriteBeforeTheReadIsReportedWithItsSite) {
  char *p = AllocatedOnTheControlHeap(6000);
  WrittenBeforeTheRead(p, 6000, "AllocatedOnTheControlHeap");
  free(p);
}

TEST_F(Detect, UntouchedPostsAreNotReported) {
  char *p = AllocatedForTheWire(8192);
  memset(p, 'C', 8192);
  const uint64_t mismatches = Stats().fence_mismatches;
  const int target = done_count.load() + 20;
  for (int i = 0; i < 20; i++)
    Post(p + i * 400, 800);
  std::string err = DrainSaying(target);
  EXPECT_EQ(Stats().fence_mismatches, mismatches);
  EXPECT_EQ(err.find("NICMALLOC_FENCE=detect"), std::string::npos) << err;
  free(p);
}

// A short entry is copied at nic_sga_add: the NIC reads the copy, so a later write is harmless
// and not reported.
TEST_F(Detect, CopiedEntriesAreNeitherAffectedNorReported) {
  char *p = AllocatedForTheWire(4096);
  memset(p, 'D', 4096);
  const uint64_t mismatches = Stats().fence_mismatches;
  const int target = done_count.load() + 1;
  PostPaused(p, 100);
  memset(p, 'E', 100);
  std::string err = DrainSaying(target);
  EXPECT_EQ(Stats().fence_mismatches, mismatches) << err;
  EXPECT_EQ(inbox.msgs.at(0), std::string(100, 'D'));
  free(p);
}

} // namespace
