// The kernel's memory settings some expectations depend on, read by the tests that hold them.
#ifndef NIC_TESTS_VM_MODES_H
#define NIC_TESTS_VM_MODES_H

#include <fstream>
#include <string>

// The transparent-huge-page mode, which decides what a first touch of anonymous memory faults
// in: "always" (2 MiB wherever a whole aligned 2 MiB fits the mapping), "madvise", "never", or ""
// on a kernel without THP.
inline std::string nic_thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(in, all);
  const auto open = all.find('['), close = all.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return all.substr(open + 1, close - open - 1);
}

// vm.overcommit_memory=2: every commit counts against the commit limit, so nicmalloc makes no
// huge-block classes (they would commit up to twice the request) and a heap fills at the limit,
// not at the end of its address space.
inline bool nic_strict_overcommit() {
  std::ifstream in("/proc/sys/vm/overcommit_memory");
  int mode = 0;
  in >> mode;
  return mode == 2;
}

#endif
