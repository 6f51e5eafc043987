// EAL started as an application starts it, before nicmalloc's dpdk backend opens (which then
// finds it running and starts none of its own): no hugepages, no PCI, no shared config, one lcore
// on the calling CPU, and the caller's extra arguments (a --vdev). For the tests that play a DPDK
// application (tests/regcache/test_dpdk_backend.cc, tests/safety/test_public_endpoints.cc); EAL
// starts once per process, so each such test runs in a process of its own.
#pragma once

#include <rte_eal.h>
#include <sched.h>

#include <string>
#include <vector>

// Whether rte_eal_init succeeded.
inline bool StartApplicationEal(const std::vector<std::string> &extra = {}) {
  std::vector<std::string> args = {"app",
                                   "--no-huge",
                                   "-m",
                                   "128",
                                   "--no-pci",
                                   "--no-shconf",
                                   "--no-telemetry",
                                   "--log-level=notice",
                                   "--lcores=0@" + std::to_string(sched_getcpu())};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return rte_eal_init(static_cast<int>(argv.size()), argv.data()) >= 0;
}
