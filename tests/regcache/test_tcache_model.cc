// The NIC translation-cache model: LRU hits and misses, MPT + MTT counting, page size, the
// working-set window, invalidation, presets and settings.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "settings.h"
#include "tcache_model.h"
}

namespace {

constexpr uint64_t K4 = 4096, M2 = 2u << 20;
constexpr uintptr_t BASE = 0x10000000; // 2 MiB aligned, so page counts are easy to follow

struct Free {
  void operator()(nic_tcache *m) const { nic_tcache_free(m); }
};
using Model = std::unique_ptr<nic_tcache, Free>;

Model make(uint32_t capacity, uint32_t mpt, uint64_t page, uint32_t window = 0) {
  nic_tcache_params p = {capacity, mpt, page, 1000, window};
  Model m(nic_tcache_new(&p));
  EXPECT_NE(m, nullptr);
  return m;
}

nic_tcache_counters counters(const Model &m) {
  nic_tcache_counters c;
  nic_tcache_get(m.get(), &c);
  return c;
}

// One access of a single page of region 1, by page number.
uint32_t page(const Model &m, uint64_t n) {
  return nic_tcache_access(m.get(), 1, BASE, BASE + n * K4, 64);
}

} // namespace

TEST(TcacheModel, FirstAccessMissesMptAndMttThenHits) {
  Model m = make(8, 1, K4);
  EXPECT_EQ(nic_tcache_access(m.get(), 1, BASE, BASE + 100, 64), 2u) << "MPT + one MTT";
  EXPECT_EQ(nic_tcache_access(m.get(), 1, BASE, BASE + 200, 64), 0u) << "same page: all cached";
  nic_tcache_counters c = counters(m);
  EXPECT_EQ(c.accesses, 2u);
  EXPECT_EQ(c.lookups, 4u);
  EXPECT_EQ(c.hits, 2u);
  EXPECT_EQ(c.misses, 2u);
  EXPECT_EQ(c.mpt_misses, 1u);
  EXPECT_EQ(c.mtt_misses, 1u);
  EXPECT_EQ(c.modeled_ns, 2000u);
  EXPECT_EQ(c.resident, 2u);
}

TEST(TcacheModel, SequentialPagesEachMissOnce) {
  Model m = make(64, 0, K4);
  for (int pass = 0; pass < 2; pass++)
    for (uint64_t n = 0; n < 32; n++)
      EXPECT_EQ(page(m, n), pass == 0 ? 1u : 0u) << n;
  EXPECT_EQ(counters(m).misses, 32u);
}

TEST(TcacheModel, EvictsLeastRecentlyUsed) {
  Model m = make(4, 0, K4); // MTT only, four entries
  for (uint64_t n : {0, 1, 2, 3})
    EXPECT_EQ(page(m, n), 1u);
  EXPECT_EQ(page(m, 0), 0u); // 0 becomes most recent: LRU order is now 1 2 3 0
  EXPECT_EQ(page(m, 4), 1u); // evicts 1
  EXPECT_EQ(page(m, 0), 0u);
  EXPECT_EQ(page(m, 2), 0u); // 3 is now the least recent
  EXPECT_EQ(page(m, 1), 1u); // evicts 3
  EXPECT_EQ(page(m, 3), 1u); // evicts 4
  EXPECT_EQ(page(m, 2), 0u);
  EXPECT_EQ(page(m, 4), 1u);
  nic_tcache_counters c = counters(m);
  EXPECT_EQ(c.evictions, 4u);
  EXPECT_EQ(c.resident, 4u);
}

TEST(TcacheModel, EntrySpanningPagesCountsEachPage) {
  Model m = make(64, 1, K4);
  // 200 bytes across the boundary between pages 0 and 1: MPT + 2 MTT.
  EXPECT_EQ(nic_tcache_access(m.get(), 7, BASE, BASE + 4000, 200), 3u);
  // Three whole pages starting at page 2: three new MTT entries, MPT cached.
  EXPECT_EQ(nic_tcache_access(m.get(), 7, BASE, BASE + 2 * K4, 3 * K4), 3u);
  // A different region over the same addresses has its own entries.
  EXPECT_EQ(nic_tcache_access(m.get(), 8, BASE, BASE + 4000, 200), 3u);
  nic_tcache_counters c = counters(m);
  EXPECT_EQ(c.mpt_misses, 2u);
  EXPECT_EQ(c.mtt_misses, 7u);
}

TEST(TcacheModel, MptPerRegionTakesThatManyEntries) {
  Model m = make(64, 3, K4);
  EXPECT_EQ(nic_tcache_access(m.get(), 1, BASE, BASE, 1), 4u);
  EXPECT_EQ(counters(m).mpt_misses, 3u);
}

TEST(TcacheModel, LargerPagesNeedFewerEntries) {
  const size_t len = 8u << 20; // 8 MiB
  Model small = make(1u << 16, 1, K4);
  Model huge = make(1u << 16, 1, M2);
  EXPECT_EQ(nic_tcache_access(small.get(), 1, BASE, BASE, len), 1u + 2048u);
  EXPECT_EQ(nic_tcache_access(huge.get(), 1, BASE, BASE, len), 1u + 4u);
  nic_tcache_params p4 = {16, 1, K4, 1000, 0}, p2 = {16, 1, M2, 1000, 0};
  EXPECT_EQ(nic_tcache_entries_for(&p4, BASE, len), 2049u);
  EXPECT_EQ(nic_tcache_entries_for(&p2, BASE, len), 5u);
  EXPECT_EQ(nic_tcache_entries_for(&p2, BASE + M2 - 1, 2), 3u) << "straddles two 2M pages";
  // A working set that thrashes 4K pages fits in 2M pages.
  Model s2 = make(8, 0, K4), h2 = make(8, 0, M2);
  for (int pass = 0; pass < 2; pass++)
    for (uint64_t off = 0; off < (64u << 10); off += K4) {
      nic_tcache_access(s2.get(), 1, BASE, BASE + off, 64);
      nic_tcache_access(h2.get(), 1, BASE, BASE + off, 64);
    }
  EXPECT_EQ(counters(s2).misses, 32u) << "16 pages through 8 entries: every access misses";
  EXPECT_EQ(counters(h2).misses, 1u);
}

TEST(TcacheModel, ForgetDropsOnlyThatRegion) {
  Model m = make(8, 1, K4);
  nic_tcache_access(m.get(), 1, BASE, BASE, 2 * K4);
  nic_tcache_access(m.get(), 2, BASE, BASE, K4);
  EXPECT_EQ(counters(m).resident, 5u);
  nic_tcache_forget(m.get(), 1);
  EXPECT_EQ(counters(m).resident, 2u);
  EXPECT_EQ(nic_tcache_access(m.get(), 2, BASE, BASE, K4), 0u);
  EXPECT_EQ(nic_tcache_access(m.get(), 1, BASE, BASE, K4), 2u);
}

TEST(TcacheWindow, CountsDistinctRegionsAndPagesOfTheLastLookups) {
  Model m = make(1024, 1, K4, 8); // the last 8 entries looked up
  auto ws = [&] { return counters(m); };
  nic_tcache_access(m.get(), 1, BASE, BASE, 4 * K4); // r1 p0-p3: 5 lookups
  EXPECT_EQ(ws().ws_regions, 1u);
  EXPECT_EQ(ws().ws_pages, 4u);
  EXPECT_EQ(ws().ws_entries, 5u) << "1 MPT + 4 MTT";
  nic_tcache_access(m.get(), 2, BASE, BASE, 64); // r2 p0: 7 lookups
  EXPECT_EQ(ws().ws_regions, 2u);
  EXPECT_EQ(ws().ws_pages, 5u);
  EXPECT_EQ(ws().ws_entries, 7u);
  nic_tcache_access(m.get(), 2, BASE, BASE, 64); // 9 lookups: r1's p0 leaves, the oldest
  EXPECT_EQ(ws().ws_regions, 2u);
  EXPECT_EQ(ws().ws_pages, 4u);
  nic_tcache_access(m.get(), 2, BASE, BASE, 64); // then its p1 and p2
  EXPECT_EQ(ws().ws_regions, 2u);
  EXPECT_EQ(ws().ws_pages, 2u) << "r1 p3, r2 p0";
  EXPECT_EQ(ws().ws_entries, 4u);
  nic_tcache_access(m.get(), 2, BASE, BASE, 64); // r1 leaves: only r2 p0 remains
  EXPECT_EQ(ws().ws_regions, 1u);
  EXPECT_EQ(ws().ws_pages, 1u);
  EXPECT_EQ(ws().ws_entries, 2u);
  EXPECT_EQ(ws().ws_peak_entries, 7u);
  EXPECT_TRUE(ws().ws_valid);
}

// A cache that misses on every lookup (each access a region never seen) shows a working set
// past its capacity with every preset: a window of accesses (4096 of them, each 1 MPT + 1 MTT
// entry) topped out at 8192 entries, half of cx5's capacity, whatever the program did.
TEST(TcacheWindow, ACacheMissingEveryLookupShowsOverCapacity) {
  for (size_t i = 0; const nic_tcache_preset *p = nic_tcache_preset_at(i); i++) {
    Model m(nic_tcache_new(&p->params));
    ASSERT_NE(m, nullptr) << p->name;
    const uint64_t accesses = 2ull * p->params.capacity;
    for (uint64_t r = 1; r <= accesses; r++)
      nic_tcache_access(m.get(), r, BASE, BASE, 64);
    nic_tcache_counters c = counters(m);
    EXPECT_EQ(c.misses, c.lookups) << p->name;
    EXPECT_GT(c.ws_entries, p->params.capacity) << p->name;
    EXPECT_EQ(c.ws_entries, p->params.window) << p->name << ": every lookup a distinct entry";
  }
}

// One access of more pages than the window holds fills it with its last pages and ages out
// like any other. The window used to stop counting for good once it had held max(16 x capacity,
// 64K) distinct keys: after one large post its figures stayed frozen, and the pressure high.
TEST(TcacheWindow, AnAccessLargerThanTheWindowFillsItAndAgesOut) {
  Model m = make(8, 0, K4, 32);
  nic_tcache_access(m.get(), 1, BASE, BASE, 70000 * K4);
  nic_tcache_counters c = counters(m);
  EXPECT_TRUE(c.ws_valid);
  EXPECT_EQ(c.ws_pages, 32u) << "its last 32 pages";
  EXPECT_EQ(c.misses, 70000u) << "the cache model itself looks every page up";
  for (int i = 0; i < 31; i++)
    nic_tcache_access(m.get(), 2, BASE, BASE, 64);
  EXPECT_EQ(counters(m).ws_regions, 2u);
  EXPECT_EQ(counters(m).ws_pages, 2u) << "its last page, and region 2's";
  nic_tcache_access(m.get(), 2, BASE, BASE, 64);
  c = counters(m);
  EXPECT_TRUE(c.ws_valid);
  EXPECT_EQ(c.ws_regions, 1u);
  EXPECT_EQ(c.ws_entries, 1u);
}

namespace {
// Child of OutOfMemoryRestartsTheWindowAndRecovers: its exit status says what went wrong.
int window_out_of_memory() {
  Model m = make(8, 0, K4, 1u << 16);
  long vm_pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld", &vm_pages) != 1) return 10;
  fclose(f);
  rlimit old, tight;
  getrlimit(RLIMIT_AS, &old);
  tight = {rlim_t(vm_pages) * 4096 + (1u << 20), old.rlim_max}; // 1 MiB more may be mapped
  if (setrlimit(RLIMIT_AS, &tight)) return 11;
  uint64_t n = 0; // distinct pages, one access each, until the table cannot grow
  while (counters(m).ws_valid && n < (1u << 16))
    page(m, n++);
  setrlimit(RLIMIT_AS, &old);
  if (counters(m).ws_valid) return 1;      // never ran out
  if (counters(m).ws_pages != 0) return 2; // the window starts afresh
  for (uint64_t i = 0; i + 1 < (1u << 16); i++)
    page(m, n++);
  if (counters(m).ws_valid) return 3; // whole again before a window of lookups
  page(m, n++);
  nic_tcache_counters c = counters(m);
  if (!c.ws_valid) return 4; // never whole again
  if (c.ws_pages != (1u << 16)) return 5;
  return 0;
}
} // namespace

// The window's table out of memory (an address-space limit, in a child process): the window
// starts afresh and says its figures are partial, until it has counted a window of lookups.
TEST(TcacheWindow, OutOfMemoryRestartsTheWindowAndRecovers) {
  fflush(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(window_out_of_memory());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: never ran out, 2: not afresh, 3: whole too soon, "
                                       "4: never whole again, 5: wrong count, 1x: set-up";
}

TEST(TcacheWindow, WindowOffCountsNothing) {
  Model m = make(16, 1, K4, 0);
  nic_tcache_access(m.get(), 1, BASE, BASE, 3 * K4);
  EXPECT_EQ(counters(m).ws_entries, 0u);
}

TEST(TcacheModel, RejectsBadParams) {
  nic_tcache_params zero = {0, 1, K4, 1000, 0}, odd_page = {8, 1, 3000, 1000, 0},
                    tiny_page = {8, 1, 2048, 1000, 0};
  EXPECT_EQ(nic_tcache_new(&zero), nullptr);
  EXPECT_EQ(nic_tcache_new(&odd_page), nullptr);
  EXPECT_EQ(nic_tcache_new(&tiny_page), nullptr);
  EXPECT_EQ(nic_tcache_new_preset("no-such-nic"), nullptr);
}

TEST(TcachePresets, EachHasNumbersAndABasis) {
  size_t n = 0;
  for (const nic_tcache_preset *p; (p = nic_tcache_preset_at(n)); n++) {
    EXPECT_TRUE(nic_tcache_params_valid(&p->params)) << p->name;
    EXPECT_GT(p->params.miss_ns, 0u) << p->name;
    EXPECT_GT(std::string(p->basis).size(), 20u) << p->name;
    EXPECT_EQ(nic_tcache_preset_find(p->name), p);
    Model m(nic_tcache_new_preset(p->name));
    EXPECT_NE(m, nullptr) << p->name;
  }
  EXPECT_EQ(n, 5u);
  for (const char *name : {"tiny", "cx4", "cx5", "cx6dx", "bluefield2"})
    EXPECT_NE(nic_tcache_preset_find(name), nullptr) << name;
  EXPECT_EQ(nic_tcache_preset_find(nullptr), nullptr);
  EXPECT_EQ(nic_tcache_preset_find("tiny")->params.capacity, 8u);
}

namespace {
int Lines(const std::string &s) {
  return (int)std::count(s.begin(), s.end(), '\n');
}
const char *const tcache_vars[] = {"NICMALLOC_SIM_TCACHE", "NICMALLOC_SIM_TCACHE_ENTRIES",
                                   "NICMALLOC_SIM_TCACHE_PAGE", "NICMALLOC_SIM_MISS_NS",
                                   "NICMALLOC_SIM_TCACHE_WINDOW"};
} // namespace

TEST(TcacheSettings, PresetAndOverridesFromEnvironment) {
  setenv("NICMALLOC_SIM_TCACHE", "cx4", 1);
  setenv("NICMALLOC_SIM_TCACHE_ENTRIES", "100", 1);
  setenv("NICMALLOC_SIM_TCACHE_PAGE", "2M", 1);
  setenv("NICMALLOC_SIM_MISS_NS", "500", 1);
  setenv("NICMALLOC_SIM_TCACHE_WINDOW", "64", 1);
  nic_settings_reload(false); // settings are copied at start-up
  nic_tcache_params p;
  testing::internal::CaptureStderr();
  nic_tcache_params_from_env(&p);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(p.capacity, 100u);
  EXPECT_EQ(p.page_size, M2);
  EXPECT_EQ(p.miss_ns, 500u);
  EXPECT_EQ(p.window, 64u);
  EXPECT_EQ(p.mpt_per_region, nic_tcache_preset_find("cx4")->params.mpt_per_region);
  for (const char *v : tcache_vars)
    unsetenv(v);
}

TEST(TcacheSettings, ACapacityGivenAloneScalesTheWindow) {
  setenv("NICMALLOC_SIM_TCACHE_ENTRIES", "100", 1);
  nic_settings_reload(false);
  nic_tcache_params p;
  nic_tcache_params_from_env(&p);
  EXPECT_EQ(p.capacity, 100u);
  EXPECT_EQ(p.window, 100u * NIC_TCACHE_WINDOW_PER_ENTRY);
  unsetenv("NICMALLOC_SIM_TCACHE_ENTRIES");
  nic_settings_reload(false);
}

TEST(TcacheSettings, BadValuesWarnOnceEachAndKeepDefaults) {
  setenv("NICMALLOC_SIM_TCACHE", "cx99", 1);
  setenv("NICMALLOC_SIM_TCACHE_ENTRIES", "0", 1);
  setenv("NICMALLOC_SIM_TCACHE_PAGE", "3000", 1);
  setenv("NICMALLOC_SIM_MISS_NS", "fast", 1);
  setenv("NICMALLOC_SIM_TCACHE_WINDOW", "-1", 1);
  nic_settings_reload(false); // settings are copied at start-up
  nic_tcache_params p;
  testing::internal::CaptureStderr();
  nic_tcache_params_from_env(&p);
  nic_tcache_params_from_env(&p); // a second reader is not warned again
  std::string err = testing::internal::GetCapturedStderr();
  const nic_tcache_params &d = nic_tcache_preset_find(NIC_TCACHE_DEFAULT_PRESET)->params;
  EXPECT_EQ(p.capacity, d.capacity);
  EXPECT_EQ(p.page_size, d.page_size);
  EXPECT_EQ(p.miss_ns, d.miss_ns);
  EXPECT_EQ(p.window, d.window);
  EXPECT_EQ(Lines(err), 5) << err;
  for (const char *v : tcache_vars)
    EXPECT_NE(err.find(std::string(v) + "="), std::string::npos) << v << ": " << err;
  for (const char *v : tcache_vars)
    unsetenv(v);
}

// tcache_model maps NICMALLOC_SIM_TCACHE's words to presets: each word is a preset.
TEST(TcacheSettings, EveryWordOfTheSettingIsAPreset) {
  std::string words = nic_setting_row(NIC_S_SIM_TCACHE)->words;
  int n = 0;
  for (size_t at = 0; at <= words.size(); n++) {
    size_t bar = words.find('|', at);
    std::string w = words.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    at = bar == std::string::npos ? words.size() + 1 : bar + 1;
    const nic_tcache_preset *want = nic_tcache_preset_find(w.c_str());
    ASSERT_NE(want, nullptr) << w;
    setenv("NICMALLOC_SIM_TCACHE", w.c_str(), 1);
    nic_settings_reload(false);
    nic_tcache_params p;
    nic_tcache_params_from_env(&p);
    EXPECT_EQ(p.capacity, want->params.capacity) << w;
    EXPECT_EQ(p.mpt_per_region, want->params.mpt_per_region) << w;
    EXPECT_EQ(p.page_size, want->params.page_size) << w;
  }
  EXPECT_EQ(n, 5);
  unsetenv("NICMALLOC_SIM_TCACHE");
  nic_settings_reload(false);
}
