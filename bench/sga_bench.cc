// Cost per scatter-gather entry by path (arena / registration-cache hit / copy), per write-fence
// mode (nic_fence_write, and what each mode adds to a post), and of free while something else is in
// flight, side by side in one process on the sim backend (NICMALLOC_BACKEND=sim, no DMA delay).
// Names: BM_<what>/<path or mode>/<size>; the "per entry" figures are the time column divided by
// the entries counter (items_per_second).
#include "default_settings.h"
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "fence.h"
#include "safety.h"
#include "sim_nic.h"
}

namespace {

constexpr int kEntries = 16;      // per array
constexpr size_t kStride = 16384; // gap between pieces, so that none coalesce
constexpr size_t kSpan = kStride * kEntries;

enum Path { kArena, kCacheHit, kCopy };

char *Buffer(Path path) {
  static char *arena = static_cast<char *>(nic_malloc(kSpan));
  static char *control = static_cast<char *>(malloc(kSpan));
  memset(path == kArena ? arena : control, 1, kSpan);
  return path == kArena ? arena : control;
}

// nic_sga_add of kEntries pieces, then nic_sga_reset: resolution, references, copies.
void BM_SgaAdd(benchmark::State &state, Path path) {
  const size_t size = static_cast<size_t>(state.range(0));
  char *buf = Buffer(path);
  nic_sga sga;
  nic_sga_init(&sga, kEntries);
  for (int i = 0; i < kEntries; i++) // warm the cache (a miss registers)
    nic_sga_add(&sga, buf + i * kStride, size);
  nic_sga_reset(&sga);
  for (auto _ : state) {
    for (int i = 0; i < kEntries; i++)
      if (nic_sga_add(&sga, buf + i * kStride, size)) state.SkipWithError("add failed");
    nic_sga_reset(&sga);
  }
  state.SetItemsProcessed(state.iterations() * kEntries);
}

// Short entries from the caller's stack (headers, lengths): copied, after proving them readable.
void BM_SgaAddStack(benchmark::State &state) {
  const size_t size = static_cast<size_t>(state.range(0));
  char stack[kEntries][256];
  memset(stack, 1, sizeof stack);
  nic_sga sga;
  nic_sga_init(&sga, kEntries);
  for (auto _ : state) {
    for (int i = 0; i < kEntries; i++)
      if (nic_sga_add(&sga, stack[i], size)) state.SkipWithError("add failed");
    nic_sga_reset(&sga);
  }
  state.SetItemsProcessed(state.iterations() * kEntries);
}

std::atomic<long> done_count{0};
void Done(void *, int) {
  done_count.fetch_add(1, std::memory_order_relaxed);
}

// add + post + completion (page references taken and dropped, deferred-free retry) per message
// of kEntries entries; includes the sim's engine hand-off, which dominates.
void BM_SgaPost(benchmark::State &state, Path path) {
  const size_t size = static_cast<size_t>(state.range(0));
  char *buf = Buffer(path);
  static nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, NIC_EP_ENGINE_COMPLETIONS);
  nic_sga sga;
  nic_sga_init(&sga, kEntries);
  for (auto _ : state) {
    for (int i = 0; i < kEntries; i++)
      nic_sga_add(&sga, buf + i * kStride, size);
    long target = done_count.load() + 1;
    if (nic_sga_post(&sga, ep, Done, nullptr)) state.SkipWithError("post failed");
    while (done_count.load(std::memory_order_relaxed) < target)
      std::this_thread::yield();
  }
  state.SetItemsProcessed(state.iterations() * kEntries);
}

// nic_fence_write on a 4 KiB range with nothing of it in flight: off vs wait. "busy" keeps
// one unrelated page in flight (a hold), so wait must look the range's pages up.
void BM_Fence(benchmark::State &state, enum nic_fence_mode mode, bool busy) {
  struct nic_safety_config c = *nic_safety_config(), saved = c;
  c.fence = mode;
  nic_safety_config_set(&c);
  char *p = static_cast<char *>(nic_malloc(4096)), *other = static_cast<char *>(nic_malloc(64));
  if (busy) nic_hold(other);
  for (auto _ : state)
    benchmark::DoNotOptimize(nic_fence_write(p, 4096));
  if (busy) nic_release(other);
  free(p);
  free(other);
  nic_safety_config_set(&saved);
}

// One entry of `size` bytes of dataplane memory, post + completion, per fence mode: what each
// mode adds to a post (protect: write-protect at post, unprotect at completion; detect: a
// checksum at post and one more as the NIC reads). Nothing writes to the memory meanwhile.
enum FenceCase { kOff, kWait, kProtectUffd, kProtectMprotect, kDetect };
void BM_PostFence(benchmark::State &state, FenceCase fc) {
  const size_t size = static_cast<size_t>(state.range(0));
  struct nic_safety_config c = *nic_safety_config(), saved = c;
  c.fence = fc == kOff      ? NIC_FENCE_OFF
            : fc == kWait   ? NIC_FENCE_WAIT
            : fc == kDetect ? NIC_FENCE_DETECT
                            : NIC_FENCE_PROTECT;
  nic_safety_config_set(&c);
  if ((fc == kProtectUffd || fc == kProtectMprotect) &&
      nic_fence_protect_use(fc == kProtectUffd ? NIC_PROTECT_UFFD : NIC_PROTECT_MPROTECT)) {
    state.SkipWithError("this protect mechanism is not available here");
    nic_safety_config_set(&saved);
    return;
  }
  static nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, NIC_EP_ENGINE_COMPLETIONS);
  char *buf = static_cast<char *>(nic_aligned_alloc(4096, size));
  memset(buf, 1, size);
  nic_sga sga;
  nic_sga_init(&sga, 1);
  for (auto _ : state) {
    nic_sga_add(&sga, buf, size);
    long target = done_count.load() + 1;
    if (nic_sga_post(&sga, ep, Done, nullptr)) state.SkipWithError("post failed");
    while (done_count.load(std::memory_order_relaxed) < target)
      std::this_thread::yield();
  }
  free(buf);
  nic_safety_config_set(&saved);
}

// protect's own cost per post, without the NIC: write-protecting an entry's pages and making
// them writable again (nic_fence_protect + nic_fence_unprotect), per mechanism and entry size.
// The unit is the chunk's page: 4 KiB on THP or 4 KiB chunks, the hugepage on hugetlb ones
// (NICMALLOC_PAGE_KIND=2m with a hugepage pool), as the label says.
void BM_ProtectCycle(benchmark::State &state, nic_fence_protect_with with) {
  const size_t size = static_cast<size_t>(state.range(0));
  struct nic_safety_config c = *nic_safety_config(), saved = c;
  c.fence = NIC_FENCE_PROTECT;
  nic_safety_config_set(&c);
  if (nic_fence_protect_use(with)) {
    state.SkipWithError("this protect mechanism is not available here");
    nic_safety_config_set(&saved);
    return;
  }
  char *buf = static_cast<char *>(nic_aligned_alloc(4096, size));
  memset(buf, 1, size);
  nic_sga_entry e = {};
  e.addr = buf;
  e.len = static_cast<uint32_t>(size);
  e.kind = NIC_REGION_ARENA;
  for (auto _ : state) {
    nic_fence_protect(&e, 1);
    nic_fence_unprotect(&e, 1);
  }
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  state.SetLabel(std::string(nic_fence_protect_name()) + ", " + nic_page_kind_name(s.page_kind) +
                 " pages");
  free(buf);
  nic_safety_config_set(&saved);
}

// malloc/free of 64 B with nothing in flight (the one-load filter), with an unrelated page held
// (every free looks its pages up), and with an unrelated block's free deferred (every free also
// asks whether it is that block), on 1 and 2 threads.
enum FilterCase { kNothingInFlight, kOtherPageHeld, kOtherFreeDeferred };

void BM_FreeFilter(benchmark::State &state, FilterCase what) {
  static char *other;
  if (state.thread_index() == 0) {
    other = static_cast<char *>(nic_malloc(64));
    if (what != kNothingInFlight) nic_hold(other);
    if (what == kOtherFreeDeferred) free(other);
  }
  for (auto _ : state) {
    char *q = static_cast<char *>(malloc(64));
    benchmark::DoNotOptimize(q);
    free(q);
  }
  if (state.thread_index() == 0) {
    if (what != kNothingInFlight) nic_release(other); // does the deferred free, if any
    if (what != kOtherFreeDeferred) free(other);
  }
}

BENCHMARK_CAPTURE(BM_SgaAdd, arena, kArena)->Arg(1024)->Arg(8192);
BENCHMARK_CAPTURE(BM_SgaAdd, cache_hit, kCacheHit)->Arg(1024)->Arg(8192);
BENCHMARK_CAPTURE(BM_SgaAdd, copy, kCopy)->Arg(64)->Arg(256);
BENCHMARK(BM_SgaAddStack)->Arg(64)->Arg(256);
BENCHMARK_CAPTURE(BM_SgaPost, arena, kArena)->Arg(1024)->UseRealTime();
BENCHMARK_CAPTURE(BM_SgaPost, cache_hit, kCacheHit)->Arg(1024)->UseRealTime();
BENCHMARK_CAPTURE(BM_SgaPost, copy, kCopy)->Arg(256)->UseRealTime();
BENCHMARK_CAPTURE(BM_Fence, off, NIC_FENCE_OFF, false);
BENCHMARK_CAPTURE(BM_Fence, wait, NIC_FENCE_WAIT, false);
BENCHMARK_CAPTURE(BM_Fence, wait_other_page_held, NIC_FENCE_WAIT, true);
BENCHMARK_CAPTURE(BM_PostFence, off, kOff)->Arg(4096)->Arg(65536)->Arg(2 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_PostFence, wait, kWait)->Arg(4096)->Arg(65536)->Arg(2 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_PostFence, protect_uffd, kProtectUffd)
    ->Arg(4096)
    ->Arg(65536)
    ->Arg(2 << 20)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PostFence, protect_mprotect, kProtectMprotect)
    ->Arg(4096)
    ->Arg(65536)
    ->Arg(2 << 20)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PostFence, detect, kDetect)
    ->Arg(4096)
    ->Arg(65536)
    ->Arg(2 << 20)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_ProtectCycle, uffd, NIC_PROTECT_UFFD)->Arg(4096)->Arg(65536)->Arg(2 << 20);
BENCHMARK_CAPTURE(BM_ProtectCycle, mprotect, NIC_PROTECT_MPROTECT)
    ->Arg(4096)
    ->Arg(65536)
    ->Arg(2 << 20);
BENCHMARK_CAPTURE(BM_FreeFilter, nothing_in_flight, kNothingInFlight)->ThreadRange(1, 2);
BENCHMARK_CAPTURE(BM_FreeFilter, other_page_held, kOtherPageHeld)->ThreadRange(1, 2);
BENCHMARK_CAPTURE(BM_FreeFilter, other_free_deferred, kOtherFreeDeferred)->ThreadRange(1, 2);

} // namespace

int main(int argc, char **argv) {
  nic_bench_default_settings(argv,
                             {{"NICMALLOC_BACKEND", "sim"}, {"NICMALLOC_SIM_DELAYS", "fixed:0"}});
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
