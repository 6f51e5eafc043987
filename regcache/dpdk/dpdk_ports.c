/* Which ports reach a registration's memory through the CPU alone (dpdk.h, nic_dpdk_cpu_device):
 * with only such ports, and IOVA = address, a registration is a record of addresses that the
 * drivers load from and store to, and the pages under it may go and come back
 * (caps.pages_follow). Being on DPDK's vdev bus says nothing of it: net_bonding and net_failsafe
 * send through their member ports, PCI NICs among them, which DMA from the very mbufs;
 * net_af_xdp's NIC writes its zero-copy UMEM; net_virtio_user (vhost-user, vDPA), net_vhost and
 * net_memif let a peer process or a device read the memory an mbuf points at. A page dropped
 * under any of them would leave the device or the peer with the old one. So only the drivers
 * below, whose DPDK 22.11 sources were read for it, count; any other port, a vdev or not, is
 * taken as a NIC that DMAs: its registrations keep their pages and are DMA-mapped for it (a
 * driver without a mapping of its own maps nothing, dpdk_dma.c). */
#define _GNU_SOURCE
#define NIC_DPDK_INTERNAL
#include "dpdk.h"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <string.h>

/* Driver names as RTE_PMD_REGISTER_VDEV gives them (an alias, eth_ring, still binds net_ring).
 *  - net_ring: tx enqueues the mbuf pointers on an rte_ring and rx dequeues them; the receiver
 *    is a port of this process, reading the sender's memory with loads.
 *  - net_null: tx frees the mbufs (copy=1: memcpy of each into a dummy packet first); rx takes
 *    mbufs from the queue's pool and writes them with stores.
 *  - net_pcap: tx hands the data to libpcap (pcap_sendpacket, a send(2); or pcap_dump to a
 *    file), a chain first copied into a buffer of its own (rte_pktmbuf_read); rx copies from
 *    libpcap's buffer into a pool mbuf.
 *  - net_af_packet: tx memcpy's each frame into the socket's TPACKET_V2 ring and frees the mbuf
 *    before the kernel is told to send; rx memcpy's from that ring into a pool mbuf.
 *  - net_tap, net_tun (one driver, rte_eth_tap.c): tx writev(2)s the segments to the tap
 *    descriptor (checksums computed in a copy of the headers), rx readv(2)s into pool mbufs: the
 *    kernel copies inside the call, through this process's page tables, which fault a dropped
 *    page in again as a load would. */
static const char *const cpu_drivers[] = {"net_ring",      "net_null", "net_pcap",
                                          "net_af_packet", "net_tap",  "net_tun"};

bool nic_dpdk_cpu_device(const struct rte_device *dev) {
  const struct rte_bus *bus = dev ? rte_dev_bus(dev) : NULL;
  const struct rte_driver *drv = dev ? rte_dev_driver(dev) : NULL;
  const char *name = drv ? rte_driver_name(drv) : NULL;
  if (!bus || !name || strcmp(rte_bus_name(bus), "vdev")) return false;
  for (size_t i = 0; i < sizeof cpu_drivers / sizeof cpu_drivers[0]; i++)
    if (!strcmp(name, cpu_drivers[i])) return true;
  return false;
}

/* Every port, those with an owner included (failsafe owns its sub-devices, an application may
 * own a port of its own): RTE_ETH_FOREACH_DEV would leave them out. */
bool nic_dpdk_only_cpu_ports(void) {
  for (uint16_t port = rte_eth_find_next(0); port < RTE_MAX_ETHPORTS;
       port = rte_eth_find_next(port + 1)) {
    struct rte_eth_dev_info info;
    if (rte_eth_dev_info_get(port, &info) || !nic_dpdk_cpu_device(info.device)) return false;
  }
  return true;
}
