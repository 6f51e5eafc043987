// Two net_ring ports of the application's own, wired to each other (what a transmits, b
// receives) and started with one rx and one tx queue over a small pool of the application's: the
// DPDK endpoint suites' "application port" cases (test_public_endpoints.cc,
// test_dpdk_receive.cc). Names are prefixed so that suites in one process do not collide.
#ifndef NIC_TEST_DPDK_RING_PORTS_H
#define NIC_TEST_DPDK_RING_PORTS_H

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <string>

// "" with ports[0..1] started, or what failed. Multi-segment transmit is configured unless
// multi_segs is false, as an application sending chains must.
inline std::string StartRingPortPair(const std::string &prefix, unsigned ring_size, int ports[2],
                                     bool multi_segs = true) {
  rte_ring *ab = rte_ring_create((prefix + "_ab").c_str(), ring_size, SOCKET_ID_ANY,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring *ba = rte_ring_create((prefix + "_ba").c_str(), ring_size, SOCKET_ID_ANY,
                                 RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_mempool *pool = rte_pktmbuf_pool_create((prefix + "_rx").c_str(), 63, 0, 0,
                                              RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  if (!ab || !ba || !pool) return "rings or pool";
  ports[0] = rte_eth_from_rings((prefix + "_a").c_str(), &ba, 1, &ab, 1, SOCKET_ID_ANY);
  ports[1] = rte_eth_from_rings((prefix + "_b").c_str(), &ab, 1, &ba, 1, SOCKET_ID_ANY);
  for (int i = 0; i < 2; i++) {
    const int port = ports[i];
    rte_eth_conf conf{};
    conf.txmode.offloads = multi_segs ? RTE_ETH_TX_OFFLOAD_MULTI_SEGS : 0;
    if (port < 0) return "rte_eth_from_rings";
    if (rte_eth_dev_configure(port, 1, 1, &conf)) return "configure";
    if (rte_eth_rx_queue_setup(port, 0, 64, SOCKET_ID_ANY, nullptr, pool)) return "rx queue";
    if (rte_eth_tx_queue_setup(port, 0, 64, SOCKET_ID_ANY, nullptr)) return "tx queue";
    if (rte_eth_dev_start(port)) return "start";
  }
  return "";
}

#endif
