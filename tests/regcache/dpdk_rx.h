// What the DPDK suites share as the receiving side of a port: one packet, and its bytes.
#pragma once

#include <chrono>
#include <string>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

// The next packet on rx queue 0 of port, or NULL after ms milliseconds.
inline rte_mbuf *RxOne(uint16_t port, int ms = 2000) {
  rte_mbuf *m = nullptr;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
       std::chrono::steady_clock::now() < end;)
    if (rte_eth_rx_burst(port, 0, &m, 1)) return m;
  return nullptr;
}

// The packet's bytes, every segment in order.
inline std::string Bytes(const rte_mbuf *m) {
  std::string s;
  for (; m; m = m->next)
    s.append(rte_pktmbuf_mtod(m, const char *), m->data_len);
  return s;
}
