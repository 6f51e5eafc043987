/* The extmem areas under the dpdk backend's registrations. Each area takes one of DPDK's 128
 * memseg lists, so an area per registration would let at most 64 dataplane steps reach a port
 * (256 MiB at 4 MiB steps). Where an area is only a record of addresses, one area over the whole
 * dataplane range serves every step in it, and each step is still DMA-mapped on its own:
 *  - IOVA-as-VA: an IOVA is the address, known for pages not backed yet. In IOVA-as-PA mode each
 *    page's physical address is recorded, which exists only for the pinned pages of one step;
 *  - every port one whose driver reaches memory through the CPU (dpdk_ports.c):
 *    rte_extmem_register touches no page and tells no driver. A NIC's driver may make its own
 *    registration of the whole area around an address it has not seen DMA-mapped (mlx5 does,
 *    drivers/common/mlx5/mlx5_common_mr.c; a bonding port's member may be one), which over the
 *    range's unbacked pages would fail: with any other port, each registration gets its own area.
 * Registrations outside the dataplane range (registration-cache regions) get their own area. */
#define _GNU_SOURCE
#define NIC_DPDK_INTERNAL
#include "dpdk.h"
#include "plugin_services.h"

#include <errno.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <string.h>
#include <unistd.h>

/* The IOVA of each page of [base, base + len): its physical address in IOVA-as-PA mode (the
 * memory is pinned), else its address. */
static int page_iovas(void *base, size_t len, size_t page_sz, bool pa, rte_iova_t **out) {
  const size_t n = len / page_sz;
  rte_iova_t *iova = nic_plugin_calloc(n, sizeof *iova);
  if (!iova) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    void *va = (char *)base + i * page_sz;
    iova[i] = pa ? rte_mem_virt2phy(va) : (rte_iova_t)(uintptr_t)va;
    if (iova[i] == RTE_BAD_IOVA) {
      nic_plugin_free(iova);
      return -EIO;
    }
  }
  *out = iova;
  return 0;
}

/* Records [base, base + len) with DPDK: the largest page size both are aligned to in
 * IOVA-as-VA mode (IOVA = VA; without a table DPDK would record RTE_BAD_IOVA), 4 KiB pages with
 * their physical addresses in IOVA-as-PA mode, kept in *pa_iovas for the segments' buf_iova. */
static int extmem(void *base, size_t len, size_t *page_sz, rte_iova_t **pa_iovas) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const bool pa = rte_eal_iova_mode() == RTE_IOVA_PA;
  *page_sz = pg;
  for (size_t big = (size_t)1 << 30; !pa && big > pg; big >>= 9)
    if (!((uintptr_t)base % big) && !(len % big)) {
      *page_sz = big;
      break;
    }
  rte_iova_t *iova;
  int rc = page_iovas(base, len, *page_sz, pa, &iova);
  if (rc) return rc;
  if (rte_extmem_register(base, len, iova, (unsigned)(len / *page_sz), *page_sz)) rc = -rte_errno;
  if (rc || !pa)
    nic_plugin_free(iova);
  else
    *pa_iovas = iova;
  return rc;
}

/* The area r goes in when it can share one: the whole dataplane range. */
static bool shared_range(const struct dreg *r, void **base, size_t *len) {
  return rte_eal_iova_mode() != RTE_IOVA_PA &&
         !nic_plugin_dataplane_range(r->map_base, r->map_len, base, len);
}

int nic_dpdk_area_take(struct dbackend *be, struct dreg *r) {
  const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  const uintptr_t lo = (uintptr_t)r->base & ~(pg - 1);
  const uintptr_t hi = ((uintptr_t)r->base + r->len + pg - 1) & ~(pg - 1);
  r->map_base = (void *)lo;
  r->map_len = hi - lo;
  r->page_sz = pg;
  r->iovas = NULL;
  void *base;
  size_t len;
  const bool share = shared_range(r, &base, &len);
  int free_slot = -1;
  for (unsigned i = 0; i < NIC_DPDK_MAX_AREAS; i++) {
    struct darea *a = &be->areas[i];
    /* The dataplane range's area, or one over pages already recorded: DPDK refuses a second
     * area at the same address (EEXIST), as a cache region registered again with more access
     * would ask for. */
    if (a->users && (uintptr_t)a->base <= lo && hi - (uintptr_t)a->base <= a->len) {
      if (rte_eal_iova_mode() == RTE_IOVA_PA) {
        const int rc = page_iovas(r->map_base, r->map_len, pg, true, &r->iovas);
        if (rc) return rc;
      }
      a->users++;
      r->area = (uint8_t)i;
      return 0;
    }
    if (!a->users && free_slot < 0) free_slot = (int)i;
  }
  if (free_slot < 0) return -ENOSPC;
  if (!share || !nic_dpdk_only_cpu_ports()) {
    base = r->map_base;
    len = r->map_len;
  }
  size_t page_sz;
  int rc = extmem(base, len, &page_sz, &r->iovas);
  if (rc) return rc;
  if (base == r->map_base) r->page_sz = page_sz; /* its own pages: PA segments stop at each */
  be->areas[free_slot] = (struct darea){.base = base, .len = len, .users = 1};
  r->area = (uint8_t)free_slot;
  return 0;
}

void nic_dpdk_area_drop(struct dbackend *be, struct dreg *r) {
  struct darea *a = &be->areas[r->area];
  nic_plugin_free(r->iovas);
  r->iovas = NULL;
  if (--a->users) return;
  if (rte_extmem_unregister(a->base, a->len))
    nic_plugin_warn("dpdk: cannot unregister extmem area %p+%zu: %s", a->base, a->len,
                    rte_strerror(rte_errno));
  *a = (struct darea){0};
}
