// DPDK's 64 extmem areas through libnicmalloc.so, as an application meets them
// (NICMALLOC_BACKEND=dpdk on net_ring0, tests/plugins.cmake): every registration of memory
// outside the dataplane range takes an area of its own, and the registration cache must give
// idle ones back when they run out, to its own misses and to a dataplane step. Each case is a
// process of its own: whether a step was registered before decides where the areas go.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nicmalloc.h"

namespace {

const size_t kPage = 4096;
const int kAreas = 64; // NIC_DPDK_MAX_AREAS

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

// Pages of their own, one apart, so that no two registrations merge.
char *Pages(int n, int flags = MAP_PRIVATE | MAP_ANONYMOUS) {
  void *m = mmap(nullptr, 2 * kPage * n, PROT_READ | PROT_WRITE, flags, -1, 0);
  EXPECT_NE(m, MAP_FAILED);
  memset(m, 1, 2 * kPage * n);
  return static_cast<char *>(m);
}

// Registered once and let go: cached, idle.
int Distinct(char *m, int i) {
  nic_region_ref r;
  const int rc = nic_register(m + 2 * kPage * i, kPage, NIC_REG_LOCAL, &r);
  if (rc == 0) nic_unregister(&r);
  return rc;
}

// Areas held by registrations the program keeps (shared memory is never cached: each gets one
// of its own), the rest filled by idle cached regions: the step's first registration finds none
// free and must take one from the cache.
TEST(DpdkRoom, AStepTakesTheAreaOfAnIdleCachedRegion) {
  const int held = 16;
  char *shared = Pages(held, MAP_SHARED | MAP_ANONYMOUS);
  std::vector<nic_region_ref> refs(held);
  for (int i = 0; i < held; i++)
    ASSERT_EQ(nic_register(shared + 2 * kPage * i, kPage, NIC_REG_LOCAL, &refs[i]), 0) << i;
  char *m = Pages(kAreas);
  int cached = 0;
  while (cached < kAreas && Distinct(m, cached) == 0)
    cached++;
  EXPECT_GE(held + cached, kAreas - 1) << "the areas are not all taken: the case proves nothing";

  char *d = static_cast<char *>(nic_malloc(100000));
  memset(d, 3, 100000);
  nic_region_ref r;
  ASSERT_EQ(nic_register(d, 100000, NIC_REG_LOCAL, &r), 0)
      << "a dataplane step kept from the port by idle cached control memory";
  EXPECT_EQ(r.kind, NIC_REGION_ARENA);
  nic_unregister(&r);
  nic_sga s;
  nic_sga_init(&s, 0);
  ASSERT_EQ(nic_sga_add(&s, d, 100000), 0);
  EXPECT_EQ(s.entry[0].kind, static_cast<uint32_t>(NIC_REGION_ARENA)) << "copied, not registered";
  nic_sga_reset(&s);
  EXPECT_GE(Stats().rcache_evictions, 1u);
  for (nic_region_ref &h : refs)
    nic_unregister(&h);
  nic_free(d);
}

// A step registered first (in IOVA-as-VA mode with only virtual ports, one area covers the
// dataplane range), then far more distinct control ranges than there are areas: each is
// registered, evicting an idle one when none is left, and a large control entry is registered
// rather than copied.
TEST(DpdkRoom, ControlMemoryRegistersPastTheAreas) {
  char *d = static_cast<char *>(nic_malloc(100000));
  memset(d, 3, 100000);
  nic_sga s;
  nic_sga_init(&s, 0);
  ASSERT_EQ(nic_sga_add(&s, d, 100000), 0);
  nic_sga_reset(&s);
  const int n = 3 * kAreas;
  char *m = Pages(n);
  for (int i = 0; i < n; i++)
    ASSERT_EQ(Distinct(m, i), 0) << "registration " << i << " of distinct control memory";
  char *big = static_cast<char *>(malloc(1 << 20));
  memset(big, 4, 1 << 20);
  nic_sga_init(&s, 0);
  ASSERT_EQ(nic_sga_add(&s, big, 1 << 20), 0);
  EXPECT_EQ(s.entry[0].kind, static_cast<uint32_t>(NIC_REGION_CACHED)) << "copied, not registered";
  nic_sga_reset(&s);
  const nic_stats st = Stats();
  EXPECT_GT(st.rcache_evictions, 0u);
  EXPECT_LT(st.rcache_regions, static_cast<uint32_t>(kAreas))
      << "the cache keeps no room for steps";
  free(big);
  nic_free(d);
}

} // namespace
