// Which ports the dpdk backend takes to reach memory through the CPU alone (regcache/dpdk/
// dpdk_ports.c), built from the plugin's source, on the vdevs that can be made here: every other
// port may have a device DMA into a registration's pages (bonding and failsafe over PCI NICs,
// af_xdp's zero-copy UMEM) or a peer process read them (vhost, memif), so its pages are held.
// EAL starts once per process: ctest runs each test alone.
#include <gtest/gtest.h>

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>

#include "../dpdk_app_eal.h"

extern "C" bool nic_dpdk_cpu_device(const struct rte_device *dev);
extern "C" bool nic_dpdk_only_cpu_ports(void);

namespace {

bool AloneInProcess() {
  return ::testing::UnitTest::GetInstance()->test_to_run_count() == 1;
}
#define REQUIRE_OWN_PROCESS()                                                                      \
  if (!AloneInProcess()) GTEST_SKIP() << "needs EAL to itself: run it alone (ctest does)"

// Every port EAL made, by name, whether owned by another port (failsafe's sub-device) or not.
std::map<std::string, rte_device *> Ports() {
  std::map<std::string, rte_device *> ports;
  for (uint16_t p = rte_eth_find_next(0); p < RTE_MAX_ETHPORTS; p = rte_eth_find_next(p + 1)) {
    rte_eth_dev_info info;
    char name[RTE_ETH_NAME_MAX_LEN];
    if (!rte_eth_dev_info_get(p, &info) && !rte_eth_dev_get_name_by_port(p, name))
      ports[name] = info.device;
  }
  return ports;
}

// The vdevs every machine can make (no interface, no privilege): the vhost and memif sockets in a
// directory of this process's own.
std::vector<std::string> UnprivilegedVdevs(const std::string &dir) {
  return {"--vdev=net_ring0",
          "--vdev=eth_ring1", // the alias: the driver is net_ring still
          "--vdev=net_null0",
          "--vdev=net_null1",
          "--vdev=net_null2",
          "--vdev=net_bonding0,mode=0,slave=net_null1,slave=net_null2",
          "--vdev=net_failsafe0,dev(net_null3)",
          "--vdev=net_vhost0,iface=" + dir + "/vhost.sock",
          "--vdev=net_memif0,role=server,socket=" + dir + "/memif.sock"};
}

// Brings this network namespace's loopback up (a new namespace's is down, and libpcap opens no
// interface that is down).
bool LoopbackUp() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  const bool up = fd >= 0 && !ioctl(fd, SIOCGIFFLAGS, &ifr) &&
                  (ifr.ifr_flags |= IFF_UP, !ioctl(fd, SIOCSIFFLAGS, &ifr));
  if (fd >= 0) close(fd);
  return up;
}

struct Expect {
  const char *port;
  bool cpu;
};

TEST(DpdkPorts, OnlyDriversKnownToReachMemoryThroughTheCpuAreCpuPorts) {
  REQUIRE_OWN_PROCESS();
  char tmpl[] = "/tmp/nic-dpdk-ports-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  std::vector<std::string> args = UnprivilegedVdevs(dir);
  std::vector<Expect> want = {{"net_ring0", true},     {"eth_ring1", true},
                              {"net_null0", true},     {"net_null1", true},
                              {"net_bonding0", false}, {"net_failsafe0", false},
                              {"net_vhost0", false},   {"net_memif0", false}};
  // The drivers over a kernel interface, on this process's own loopback: a network namespace of
  // its own needs root (and leaves no tap device behind).
  const bool own_net = geteuid() == 0 && unshare(CLONE_NEWNET) == 0 && LoopbackUp();
  if (own_net) {
    for (const char *v : {"--vdev=net_tap0", "--vdev=net_tun0", "--vdev=net_af_packet0,iface=lo",
                          "--vdev=net_pcap0,iface=lo", "--vdev=net_af_xdp0,iface=lo"})
      args.push_back(v);
    for (Expect e : std::vector<Expect>{{"net_tap0", true},
                                        {"net_tun0", true},
                                        {"net_af_packet0", true},
                                        {"net_pcap0", true},
                                        {"net_af_xdp0", false}})
      want.push_back(e);
  } else {
    std::printf("no network namespace of its own (not root?): net_tap, net_tun, net_af_packet, "
                "net_pcap and net_af_xdp not made\n");
  }
  ASSERT_TRUE(StartApplicationEal(args)) << "EAL did not start with these vdevs";
  const auto ports = Ports();
  for (const Expect &e : want) {
    auto it = ports.find(e.port);
    if (it == ports.end()) {
      ADD_FAILURE() << e.port << " was not made";
      continue;
    }
    EXPECT_EQ(nic_dpdk_cpu_device(it->second), e.cpu)
        << e.port << " (driver " << rte_driver_name(rte_dev_driver(it->second)) << ")";
  }
  EXPECT_FALSE(nic_dpdk_cpu_device(nullptr));
  EXPECT_FALSE(nic_dpdk_only_cpu_ports());
  unlink((dir + "/vhost.sock").c_str());
  unlink((dir + "/memif.sock").c_str());
  rmdir(dir.c_str());
}

// net_ring and net_null ports alone are CPU ports, as nicmalloc's own EAL runs in the tests.
TEST(DpdkPorts, RingAndNullPortsAloneAreAllCpuPorts) {
  REQUIRE_OWN_PROCESS();
  ASSERT_TRUE(StartApplicationEal({"--vdev=net_ring0", "--vdev=net_null0"}));
  EXPECT_TRUE(nic_dpdk_only_cpu_ports());
}

// A bonding port's members are ports of their own, ring ones here: the bonding port still is not
// a CPU port, since over PCI members the NICs DMA from its packets.
TEST(DpdkPorts, ABondingPortOverCpuPortsIsNotOne) {
  REQUIRE_OWN_PROCESS();
  ASSERT_TRUE(StartApplicationEal(
      {"--vdev=net_null0", "--vdev=net_null1", "--vdev=net_bonding0,mode=0,slave=net_null0"}));
  const auto ports = Ports();
  ASSERT_EQ(ports.count("net_bonding0"), 1u);
  EXPECT_FALSE(nic_dpdk_cpu_device(ports.at("net_bonding0")));
  EXPECT_TRUE(nic_dpdk_cpu_device(ports.at("net_null0")));
  EXPECT_FALSE(nic_dpdk_only_cpu_ports());
}

// A port with an owner (failsafe owns its sub-devices; an application may own its own PCI port) is
// counted too, though RTE_ETH_FOREACH_DEV leaves it out: here an owned bonding port beside
// net_null ones.
TEST(DpdkPorts, OwnedPortsAreCounted) {
  REQUIRE_OWN_PROCESS();
  ASSERT_TRUE(StartApplicationEal(
      {"--vdev=net_null0", "--vdev=net_null1", "--vdev=net_bonding0,mode=0,slave=net_null1"}));
  uint16_t port = RTE_MAX_ETHPORTS;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_bonding0", &port), 0);
  rte_eth_dev_owner o{};
  ASSERT_EQ(rte_eth_dev_owner_new(&o.id), 0);
  snprintf(o.name, sizeof o.name, "test");
  ASSERT_EQ(rte_eth_dev_owner_set(port, &o), 0);
  EXPECT_FALSE(nic_dpdk_only_cpu_ports()) << "the owned bonding port was left out";
}

} // namespace
