// Small helpers of the fragmentation driver: errors, clocks, the seeded generator and the
// bookkeeping tables that stay out of the allocator under test.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <sys/mman.h>

namespace frag {

[[noreturn]] inline void die(const char *fmt, const char *arg = "") {
  fprintf(stderr, "frag_churn: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

inline double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline void sleep_ms(unsigned ms) {
  timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, nullptr);
}

struct Rng { // splitmix64: the op sequence depends only on the seed, never on the allocator
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double unit() { return (double)(next() >> 11) * 0x1.0p-53; }
  uint64_t below(uint64_t n) { return next() % n; }
};

// Driver bookkeeping lives in mmap'd, prefaulted memory so that it never touches the allocator
// under test and adds a constant to RSS, which the baseline subtracts.
template <class T> struct MapArray {
  T *p = nullptr;
  size_t cap = 0;
  void map(size_t n) {
    cap = n;
    void *m = mmap(nullptr, n * sizeof(T) + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) die("cannot map %s of bookkeeping", std::to_string(n).c_str());
    p = (T *)m;
    madvise(m, n * sizeof(T), MADV_HUGEPAGE); // random lookups: spare the TLB
    memset(m, 0, n * sizeof(T));
  }
  void unmap() {
    if (p) munmap(p, cap * sizeof(T) + 1);
    p = nullptr;
  }
};

// One cached value: its block (null for the slab model, which allocates nothing), its size and
// when it was written.
struct Item {
  void *ptr;
  uint64_t size : 24; // values are below 1 MiB (memcached's item limit)
  uint64_t seq : 40;  // insertion order, for the FIFO shrink
};

} // namespace frag
