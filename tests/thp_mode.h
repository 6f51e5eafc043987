// The system's transparent-huge-page mode, which decides what a first touch of anonymous memory
// faults in: "always" (2 MiB wherever a whole aligned 2 MiB fits the mapping), "madvise", "never",
// or "" on a kernel without THP.
#ifndef NIC_TESTS_THP_MODE_H
#define NIC_TESTS_THP_MODE_H

#include <fstream>
#include <string>

inline std::string nic_thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(in, all);
  const auto open = all.find('['), close = all.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return all.substr(open + 1, close - open - 1);
}

#endif
