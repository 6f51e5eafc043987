// nicmalloc copies its NICMALLOC_* settings when the process starts, so a setenv in main comes
// too late: a benchmark that wants a default of its own sets it and runs itself again.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <utility>

inline void
nic_bench_default_settings(char **argv,
                           std::initializer_list<std::pair<const char *, const char *>> defaults) {
  bool missing = false;
  for (const auto &d : defaults)
    if (!getenv(d.first)) {
      setenv(d.first, d.second, 0);
      missing = true;
    }
  if (!missing) return;
  execv("/proc/self/exe", argv);
  perror("execv /proc/self/exe"); // run on without the defaults
}
