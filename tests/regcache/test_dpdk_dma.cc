// The dpdk backend's DMA mappings of a registration (regcache/dpdk/dpdk_dma.c), built from the
// plugin's source with rte_dev_dma_map and rte_dev_dma_unmap of this program's own, which record
// each call: no device here maps anything (virtual ports answer ENOTSUP) and EAL cannot run
// IOVA-as-PA here (no physical addresses in /proc/self/pagemap).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <tuple>
#include <vector>

#include <rte_common.h>
#include <rte_errno.h>

extern "C" int test_dpdk_dma(void *base, size_t len, size_t page_sz, rte_iova_t *iovas, bool map);

namespace {

// What a call asked for: map or not, the page's index, its IOVA, the pages it covers.
using Call = std::tuple<bool, size_t, rte_iova_t, size_t>;
std::vector<Call> calls;
char *base;
int fail_at = -1; // the call that fails with EIO (its index in calls), or none
int answer = 0;   // rte_errno of the calls that do not fail: 0, or ENOTSUP

int Record(bool map, void *addr, uint64_t iova, size_t len) {
  const int at = static_cast<int>(calls.size());
  calls.emplace_back(map, (static_cast<char *>(addr) - base) / 4096, iova, len / 4096);
  if (at == fail_at) {
    rte_errno = EIO;
    return -1;
  }
  rte_errno = answer;
  return answer ? -1 : 0;
}

} // namespace

extern "C" int rte_dev_dma_map(struct rte_device *, void *addr, uint64_t iova, size_t len) {
  return Record(true, addr, iova, len);
}
extern "C" int rte_dev_dma_unmap(struct rte_device *, void *addr, uint64_t iova, size_t len) {
  return Record(false, addr, iova, len);
}

namespace {

// Eight pages in four physically contiguous runs: 0x10000-0x11fff, 0x50000-0x52fff, 0x20000-
// 0x20fff, 0x30000-0x31fff.
struct DpdkPaRegistration : ::testing::Test {
  void SetUp() override {
    calls.clear();
    fail_at = -1;
    answer = 0;
    base = reinterpret_cast<char *>(uintptr_t{1} << 40);
  }
  // nic_dpdk_dma of the eight pages at base, with pa as their physical addresses (none:
  // IOVA-as-VA).
  int Dma(bool map, rte_iova_t *pa) { return test_dpdk_dma(base, 8 * 4096, 4096, pa, map); }
  rte_iova_t iovas[8] = {0x10000, 0x11000, 0x50000, 0x51000, 0x52000, 0x20000, 0x30000, 0x31000};
};

TEST_F(DpdkPaRegistration, EachRunOfContiguousPagesIsOneMappingAtItsOwnAddress) {
  ASSERT_EQ(Dma(true, iovas), 0);
  const std::vector<Call> want = {
      {true, 0, 0x10000, 2}, {true, 2, 0x50000, 3}, {true, 5, 0x20000, 1}, {true, 6, 0x30000, 2}};
  EXPECT_EQ(calls, want) << "mapped as one range from the first page's address";
  calls.clear();
  ASSERT_EQ(Dma(false, iovas), 0);
  ASSERT_EQ(calls.size(), want.size());
  for (size_t i = 0; i < want.size(); i++)
    EXPECT_EQ(calls[i],
              Call(false, std::get<1>(want[i]), std::get<2>(want[i]), std::get<3>(want[i])));
}

// A run the device refuses: the runs mapped before it are unmapped, and the error is returned.
TEST_F(DpdkPaRegistration, AFailedRunUnmapsTheRunsBeforeIt) {
  fail_at = 2;
  EXPECT_EQ(Dma(true, iovas), -EIO);
  const std::vector<Call> want = {{true, 0, 0x10000, 2},
                                  {true, 2, 0x50000, 3},
                                  {true, 5, 0x20000, 1},
                                  {false, 0, 0x10000, 2},
                                  {false, 2, 0x50000, 3}};
  EXPECT_EQ(calls, want);
}

// A device without DMA mapping (a virtual one) answers ENOTSUP: success, every run asked.
TEST_F(DpdkPaRegistration, ADeviceWithoutDmaMappingIsNoError) {
  answer = ENOTSUP;
  EXPECT_EQ(Dma(true, iovas), 0);
  EXPECT_EQ(calls.size(), 4u);
}

// IOVA-as-VA: one mapping of the whole range at its own address.
TEST_F(DpdkPaRegistration, WithoutPhysicalAddressesTheRangeIsOneMapping) {
  ASSERT_EQ(Dma(true, nullptr), 0);
  EXPECT_EQ(calls, (std::vector<Call>{{true, 0, reinterpret_cast<uintptr_t>(base), 8}}));
}

} // namespace
