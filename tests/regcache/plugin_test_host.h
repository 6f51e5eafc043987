// A host table (regcache/cache/plugin_host.h) for suites and benchmarks that open a backend
// plugin themselves, playing libnicmalloc's part: its own (hidden) table is out of their reach.
// Settings are not in it but the newer ones (verbs_async_events): the suites hand the others over
// with nic_backend_<name>_settings.
#ifndef NIC_PLUGIN_TEST_HOST_H
#define NIC_PLUGIN_TEST_HOST_H

#include "plugin_host.h"

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

// The range the table's dataplane_range answers with (libnicmalloc's: its chunks); none unless
// a test sets it.
struct TestDataplaneRange {
  void *base = nullptr;
  size_t span = 0;
};
inline TestDataplaneRange &TestRange() {
  static TestDataplaneRange range;
  return range;
}

// Run by the table's calloc before it allocates, while set: a test's way in between two steps
// of a plugin's call (a post allocates its record there).
inline void (*&TestCallocHook())() {
  static void (*hook)() = nullptr;
  return hook;
}

// What the table's verbs_async_events answers (NICMALLOC_VERBS_ASYNC_EVENTS); off unless a test
// sets it.
inline std::atomic<bool> &TestVerbsAsyncEvents() {
  static std::atomic<bool> on{false};
  return on;
}

// What the table's completion_error counted.
inline std::atomic<uint64_t> &TestCompletionErrors() {
  static std::atomic<uint64_t> n{0};
  return n;
}

// What the table's rx_dropped counted.
inline std::atomic<uint64_t> &TestRxDropped() {
  static std::atomic<uint64_t> n{0};
  return n;
}

inline const nic_plugin_host *TestPluginHost() {
  static const nic_plugin_host host = {
      sizeof host,
      [](nic_plugin_log_level level, const void *, const char *fmt, va_list ap) {
        std::fprintf(stderr, "nicmalloc: %s",
                     level == NIC_PLUGIN_LOG_ERROR  ? "error: "
                     : level == NIC_PLUGIN_LOG_WARN ? "warning: "
                                                    : "");
        std::vfprintf(stderr, fmt, ap);
        std::fputc('\n', stderr);
      },
      [](size_t n, size_t size) {
        if (void (*hook)() = TestCallocHook()) hook();
        return std::calloc(n, size);
      },
      [](void *p) { std::free(p); },
      [](nic_plugin_api_family) {},
      [] {}, // the suites run outside secure execution: nothing to keep quiet
      [](const void *p, size_t len, void **base, size_t *span) {
        const TestDataplaneRange &r = TestRange();
        const uintptr_t a = reinterpret_cast<uintptr_t>(p),
                        lo = reinterpret_cast<uintptr_t>(r.base);
        if (!r.base || a - lo >= r.span || len > r.span - (a - lo)) return -ENOENT;
        *base = r.base;
        *span = r.span;
        return 0;
      },
      [] { TestCompletionErrors()++; },
      [] { return TestVerbsAsyncEvents().load(); },
      [] { TestRxDropped()++; },
  };
  return &host;
}

#endif
