/* The DMA mappings of a registration for a port's device (nic_dpdk_dma, dpdk.h). In IOVA-as-VA
 * mode the registration is one range at its own address. In IOVA-as-PA mode its pages are pinned
 * but not physically contiguous, and each segment of a chain carries its page's physical address
 * (dpdk_mbuf.c): one mapping of the whole range at the first page's address would have the device
 * reach every page after it through the wrong address. So each run of pages whose physical
 * addresses follow on is a mapping of its own, as DPDK maps its own memory page by page there. */
#define _GNU_SOURCE
#define NIC_DPDK_INTERNAL
#include "dpdk.h"

#include <errno.h>
#include <rte_dev.h>
#include <rte_errno.h>

/* 0, or -rte_errno. A device whose bus has no DMA mapping answers ENOTSUP: success, as a vdev
 * whose driver has none (net_bonding, net_failsafe) already gets 0 from the vdev bus. For such a
 * port over NICs what matters is that its registrations hold their pages (not a CPU port,
 * dpdk_ports.c), so that no NIC is left with a page the process let go. Its members' IOMMU
 * mappings are not made here (DPDK names no member of a vdev): behind VFIO they come from the
 * application, or from an endpoint on a member port, else the members' DMA faults, which loses
 * packets but never writes a wrong page. */
static int dma_range(struct rte_device *dev, void *va, rte_iova_t iova, size_t len, bool map) {
  const int rc = map ? rte_dev_dma_map(dev, va, iova, len) : rte_dev_dma_unmap(dev, va, iova, len);
  return rc && rte_errno != ENOTSUP ? -rte_errno : 0;
}

/* Maps (or unmaps) the runs of r's pages before page end, one mapping each. 0, or the first
 * error: a map that fails unmaps the runs before it; an unmap goes on past a failure. */
static int pa_runs(struct rte_device *dev, const struct dreg *r, size_t end, bool map) {
  int rc = 0;
  for (size_t i = 0, j; i < end && !(map && rc); i = j) {
    for (j = i + 1; j < end && r->iovas[j] == r->iovas[j - 1] + r->page_sz; j++) {
    }
    const int e = dma_range(dev, (char *)r->map_base + i * r->page_sz, r->iovas[i],
                            (j - i) * r->page_sz, map);
    if (e && !rc) {
      rc = e;
      if (map) pa_runs(dev, r, i, false);
    }
  }
  return rc;
}

int nic_dpdk_dma(struct rte_device *dev, struct dreg *r, bool map) {
  if (r->iovas) return pa_runs(dev, r, r->map_len / r->page_sz, map);
  return dma_range(dev, r->map_base, (rte_iova_t)(uintptr_t)r->map_base, r->map_len, map);
}
