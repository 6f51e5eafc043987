// malloc/free cost of glibc, Debian's mimalloc, nicmalloc's control path (malloc/free) and its
// dataplane path (nic_malloc/free), side by side in one process.
//
// Names are BM_<pattern>/<allocator>/<size>[/real_time/threads:N], with pattern
//   pair   one allocation, touch its first byte, free it;
//   batch  kBatch allocations, touching each, then free them in allocation order;
// and the counter "batch" = malloc/free pairs per iteration. bench/compare_malloc.sh pairs them up.
#include "bench_allocators.h"

#include <benchmark/benchmark.h>

#include <string>

namespace {

constexpr int kBatch = 64;
constexpr long kSizes[] = {16, 64, 256, 1024, 4096, 16384, 65536};

struct Glibc {
  static void *Alloc(size_t n) { return glibc_malloc(n); }
  static void Free(void *p) { glibc_free(p); }
};
struct Mimalloc {
  static void *Alloc(size_t n) { return mi_malloc(n); }
  static void Free(void *p) { mi_free(p); }
};
struct NicControl {
  static void *Alloc(size_t n) { return malloc(n); }
  static void Free(void *p) { free(p); }
};
struct NicDataplane {
  static void *Alloc(size_t n) { return nic_malloc(n); }
  static void Free(void *p) { free(p); }
};

template <class A> char *Touched(size_t size, int i) {
  char *p = static_cast<char *>(A::Alloc(size));
  p[0] = static_cast<char>(i);
  benchmark::DoNotOptimize(p);
  return p;
}

template <class A> void Pair(benchmark::State &state, size_t size) {
  for (auto _ : state)
    A::Free(Touched<A>(size, 1));
  state.counters["batch"] = benchmark::Counter(1, benchmark::Counter::kAvgThreads);
}

template <class A> void Batch(benchmark::State &state, size_t size) {
  char *ptrs[kBatch];
  for (auto _ : state) {
    for (int i = 0; i < kBatch; i++)
      ptrs[i] = Touched<A>(size, i);
    for (int i = 0; i < kBatch; i++)
      A::Free(ptrs[i]);
  }
  state.counters["batch"] = benchmark::Counter(kBatch, benchmark::Counter::kAvgThreads);
}

template <class A> void Register(const char *pattern, const char *name, long size, int threads) {
  const std::string full = std::string("BM_") + pattern + "/" + name + "/" + std::to_string(size);
  auto *fn = std::string(pattern) == "pair" ? Pair<A> : Batch<A>;
  benchmark::RegisterBenchmark(full.c_str(), fn, static_cast<size_t>(size))
      ->Threads(threads)
      ->UseRealTime();
}

} // namespace

int main(int argc, char **argv) {
  bench_init();
  // A resident dataplane block, as an application's rings and pools would be, keeps the first chunk
  // mapped between runs. Without it the reaper releases the empty chunk after
  // NICMALLOC_RELEASE_DELAY_MS and the next run's first nic_malloc pays for mapping and pinning a
  // fresh one, a stall that Google Benchmark may report as the cost of one iteration.
  // NICMALLOC_BENCH_RESIDENT=0 leaves it out.
  const char *resident_env = getenv("NICMALLOC_BENCH_RESIDENT");
  void *resident = resident_env && !strcmp(resident_env, "0") ? nullptr : nic_malloc(64);
  // Same configuration for the four allocators registered back to back, so they run side by side.
  for (const char *pattern : {"pair", "batch"})
    for (int threads : {1, 2})
      for (long size : kSizes) {
        Register<Glibc>(pattern, "glibc", size, threads);
        Register<Mimalloc>(pattern, "mimalloc", size, threads);
        Register<NicControl>(pattern, "nic_control", size, threads);
        Register<NicDataplane>(pattern, "nic_dataplane", size, threads);
      }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  free(resident);

  nic_stats st = NIC_STATS_INIT;
  nic_get_stats(&st);
  fprintf(stderr,
          "nicmalloc: chunks created %llu, released %llu, dataplane fallbacks %llu, dataplane "
          "failures %llu, invalid frees %llu\n",
          (unsigned long long)st.chunks_created, (unsigned long long)st.chunks_released,
          (unsigned long long)st.dataplane_fallbacks, (unsigned long long)st.dataplane_failures,
          (unsigned long long)st.invalid_frees);
  if (st.dataplane_fallbacks || st.dataplane_failures || st.invalid_frees) {
    fprintf(stderr,
            "nicmalloc: WARNING: fallbacks, failures or invalid frees; figures are suspect\n");
    return 3;
  }
  return 0;
}
