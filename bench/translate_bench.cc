// Translation and registration costs, side by side in one run:
//   BM_translate_arena      nic_translate on dataplane memory (target <= 5 ns)
//   BM_call_baseline        the same loop around a call that only fills the result
//   BM_rcache_hit           registration-cache lookup + reference for ordinary heap memory
//                           (target <= 25 ns)
//   BM_rcache_miss          a miss: register the page range, then drop it (munmap-invalidated)
//   BM_register/<backend>/<page kind>/<size>  one backend registration + deregistration of a
//                           region backed by 4 KiB pages, THP, 2 MiB or 1 GiB hugetlb pages
//                           (hugetlb rows skip unless the pool has the pages: reserve them in
//                           /sys/kernel/mm/hugepages first)
// Backends: sim always; uring when io_uring works here; dpdk (rte_extmem_register and a DMA map
// for net_ring0) when the plugin was built. Run with NICMALLOC_BACKEND=sim.
#include "default_settings.h"
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <linux/mman.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "plugin_host.h"
#include "rcache.h"
}

namespace {

void BM_translate_arena(benchmark::State &state) {
  char *p = static_cast<char *>(nic_malloc(4096));
  nic_region_ref ref;
  for (auto _ : state) {
    benchmark::DoNotOptimize(nic_translate(p + 128, 512, &ref));
    benchmark::ClobberMemory();
  }
  free(p);
}
BENCHMARK(BM_translate_arena);

// The same loop around a call that only fills the reference: what the harness and an
// out-of-line call cost by themselves, for reading BM_translate_arena.
__attribute__((noinline)) int fill_only(const void *p, size_t len, nic_region_ref *out) {
  out->kind = NIC_REGION_ARENA;
  out->chunk_index = 0;
  out->region_base = const_cast<void *>(p);
  out->region_len = len;
  out->offset = 0;
  out->lkey = out->rkey = 0;
  out->backend_handle = 0;
  out->cache_slot = 0;
  out->cache_gen = 0;
  return 0;
}
void BM_call_baseline(benchmark::State &state) {
  char *p = static_cast<char *>(nic_malloc(4096));
  nic_region_ref ref;
  for (auto _ : state) {
    benchmark::DoNotOptimize(fill_only(p + 128, 512, &ref));
    benchmark::ClobberMemory();
  }
  free(p);
}
BENCHMARK(BM_call_baseline);

void BM_rcache_hit(benchmark::State &state) {
  char *p = static_cast<char *>(malloc(4096));
  memset(p, 0, 4096);
  nic_rcache_ref ref;
  if (nic_rcache_acquire(nic_rcache_process(), p, 4096, NIC_ACCESS_LOCAL, &ref) != 0)
    state.SkipWithError("register");
  nic_rcache_release(nic_rcache_process(), ref.slot);
  for (auto _ : state) {
    nic_rcache_acquire(nic_rcache_process(), p + 64, 512, NIC_ACCESS_LOCAL, &ref);
    nic_rcache_release(nic_rcache_process(), ref.slot);
  }
  free(p);
}
BENCHMARK(BM_rcache_hit);

// A miss and its invalidation: the munmap that drops the region is timed (the cache's
// invalidation hook runs there), the mmap that makes fresh memory is not.
void BM_rcache_miss(benchmark::State &state) {
  const size_t len = 16 * 4096;
  for (auto _ : state) {
    state.PauseTiming();
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    state.ResumeTiming();
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap");
      break;
    }
    nic_rcache_ref ref;
    if (nic_rcache_acquire(nic_rcache_process(), p, len, NIC_ACCESS_LOCAL, &ref) != 0) {
      state.SkipWithError("register");
      munmap(p, len);
      break;
    }
    nic_rcache_release(nic_rcache_process(), ref.slot);
    munmap(p, len); // invalidates: the next round misses again
  }
}
BENCHMARK(BM_rcache_miss)->Unit(benchmark::kMicrosecond);

enum Kind { k4K, kTHP, k2M, k1G };
const char *kind_name[] = {"4k", "thp", "2m", "1g"};

// Prefaulted and locked, as a dataplane chunk is before it is registered.
void *map_region(Kind kind, size_t len) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (kind == k2M) flags |= MAP_HUGETLB;
  if (kind == k1G) flags |= MAP_HUGETLB | (30 << MAP_HUGE_SHIFT);
  void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (kind == kTHP) madvise(p, len, MADV_HUGEPAGE); /* before the first touch, or it is too late */
  memset(p, 1, len);
  mlock(p, len);
  return p;
}

// The dpdk backend is a plugin next to libnicmalloc.so, loaded as backend.c loads it, and EAL
// starts once per process: it is opened once (on net_ring0) and never closed.
nic_backend *dpdk_open() {
  static nic_backend *b = [] {
    void *h = dlopen(NIC_PLUGIN_DIR "/libnicmalloc-dpdk.so", RTLD_NOW | RTLD_LOCAL);
    auto take = h ? reinterpret_cast<void (*)(const nic_plugin_settings *)>(
                        dlsym(h, "nic_backend_dpdk_settings"))
                  : nullptr;
    nic_plugin_settings s{};
    s.dpdk_vdev = "net_ring0"; // a device to DMA-map for, as in use
    if (take) take(&s);
    auto open =
        h ? reinterpret_cast<nic_plugin_open_fn>(dlsym(h, "nic_backend_dpdk_open")) : nullptr;
    return open ? open(nic_plugin_host_table()) : nullptr;
  }();
  return b;
}

void BM_register(benchmark::State &state, nic_backend *(*open)(), Kind kind) {
  const size_t len = size_t(state.range(0));
  if (kind == k1G && len % (1ul << 30)) {
    state.SkipWithError("1 GiB pages only back whole GiB regions");
    return;
  }
  nic_backend *b = open ? open() : nullptr;
  void *p = b ? map_region(kind, len) : nullptr;
  if (!b || !p) {
    state.SkipWithError(!b ? "backend cannot run here"
                           : "no memory of this page kind (hugetlb pool?)");
    return;
  }
  for (auto _ : state) {
    nic_registration reg;
    if (b->reg(b, p, len, NIC_ACCESS_LOCAL, &reg) != 0 || b->dereg(b, &reg) != 0) {
      state.SkipWithError("registration failed");
      break;
    }
  }
  munmap(p, len);
  if (open != dpdk_open) b->close(b);
}

void register_all() {
  struct {
    const char *name;
    nic_backend *(*open)();
  } backends[] = {
      {"sim", nic_backend_sim_open}, {"uring", nic_backend_uring_open}, {"dpdk", dpdk_open}};
  for (auto &be : backends)
    for (Kind k : {k4K, kTHP, k2M, k1G}) {
      std::string name = std::string("BM_register/") + be.name + "/" + kind_name[k];
      benchmark::RegisterBenchmark(name.c_str(), BM_register, be.open, k)
          ->Arg(2 << 20)
          ->Arg(64 << 20)
          ->Arg(1 << 30)
          ->Unit(benchmark::kMicrosecond)
          ->Iterations(3);
    }
}

} // namespace

int main(int argc, char **argv) {
  nic_bench_default_settings(argv, {{"NICMALLOC_BACKEND", "sim"}});
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
