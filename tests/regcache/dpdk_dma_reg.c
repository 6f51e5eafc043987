/* A registration handed to nic_dpdk_dma for test_dpdk_dma.cc, whose C++ cannot include the
 * plugin's internal structures (C11 atomics). */
#define NIC_DPDK_INTERNAL
#include "dpdk.h"

int test_dpdk_dma(void *base, size_t len, size_t page_sz, rte_iova_t *iovas, bool map) {
  struct dreg r = {.map_base = base, .map_len = len, .page_sz = page_sz, .iovas = iovas};
  return nic_dpdk_dma(NULL, &r, map);
}
