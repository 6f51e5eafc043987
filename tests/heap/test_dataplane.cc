// Dataplane memory: the explicit API, the thread scope, the site ABI, the size threshold,
// translation, chunk growth, and what happens when no chunk can hold a request.
#include <gtest/gtest.h>

#include <malloc.h>

#include <new>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "nicmalloc.h"
#include "probe_runner.h"

namespace {

TEST(Dataplane, ExplicitApiReturnsDataplaneMemory) {
  void *a = nic_malloc(100);
  void *b = nic_calloc(10, 100);
  void *c = nic_aligned_alloc(4096, 5000);
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(nic_is_dataplane(a));
  EXPECT_TRUE(nic_is_dataplane(b));
  EXPECT_TRUE(nic_is_dataplane(c));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 4096, 0u);
  for (int i = 0; i < 1000; i++)
    ASSERT_EQ(static_cast<char *>(b)[i], 0);
  memset(a, 1, 100);
  memset(c, 2, 5000);
  free(a);
  free(b);
  free(c);
}

TEST(Dataplane, NicReallocMovesControlBlocksIntoDataplane) {
  char *p = static_cast<char *>(malloc(64));
  strcpy(p, "payload");
  ASSERT_FALSE(nic_is_dataplane(p));
  p = static_cast<char *>(nic_realloc(p, 64));
  ASSERT_TRUE(nic_is_dataplane(p));
  EXPECT_STREQ(p, "payload");
  // Plain realloc keeps a dataplane block in dataplane memory.
  p = static_cast<char *>(realloc(p, 100000));
  EXPECT_TRUE(nic_is_dataplane(p));
  EXPECT_STREQ(p, "payload");
  free(p);
}

TEST(Dataplane, ScopeRoutesOnlyThisThread) {
  nic_dataplane_begin();
  void *inside = malloc(256);
  char *str = new char[32];
  void *other = nullptr;
  std::thread([&] { other = malloc(256); }).join();
  nic_dataplane_begin(); // nests
  nic_dataplane_end();
  void *still_inside = malloc(8);
  nic_dataplane_end();
  void *after = malloc(256);
  EXPECT_TRUE(nic_is_dataplane(inside));
  EXPECT_TRUE(nic_is_dataplane(str));
  EXPECT_TRUE(nic_is_dataplane(still_inside));
  EXPECT_FALSE(nic_is_dataplane(other)) << "the scope belongs to the thread that opened it";
  EXPECT_FALSE(nic_is_dataplane(after));
  nic_dataplane_end(); // unbalanced end is harmless
  void *later = malloc(8);
  EXPECT_FALSE(nic_is_dataplane(later));
  for (void *p : {inside, other, still_inside, after, later})
    free(p);
  delete[] str;
}

TEST(Dataplane, SitesCanBeSwitchedOffAtRunTime) {
  const uint32_t site = 4242;
  ASSERT_EQ(nic_site_is_enabled(site), 1);
  void *on = nic_malloc_site(128, site);
  ASSERT_EQ(nic_site_set_enabled(site, 0), 0);
  void *off = nic_malloc_site(128, site);
  void *off_calloc = nic_calloc_site(4, 32, site);
  void *other_site = nic_malloc_site(128, site + 1);
  ASSERT_EQ(nic_site_set_enabled(site, 1), 0);
  void *on_again = nic_malloc_site(128, site);
  EXPECT_TRUE(nic_is_dataplane(on));
  EXPECT_FALSE(nic_is_dataplane(off));
  EXPECT_FALSE(nic_is_dataplane(off_calloc));
  EXPECT_TRUE(nic_is_dataplane(other_site));
  EXPECT_TRUE(nic_is_dataplane(on_again));
  EXPECT_EQ(nic_site_set_enabled(NIC_MAX_SITES, 1), -EINVAL);
  for (void *p : {on, off, off_calloc, other_site, on_again})
    free(p);
}

TEST(Dataplane, SiteVariantsHonourAlignmentAndNewSemantics) {
  void *a = nic_aligned_alloc_site(512, 512, 7);
  void *b = nullptr;
  ASSERT_EQ(nic_posix_memalign_site(&b, 1024, 1024, 7), 0);
  EXPECT_EQ(nic_posix_memalign_site(&b, 3, 16, 7), EINVAL);
  void *n = nic_new_site(64, 7);
  void *r = nic_realloc_site(nullptr, 32, 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 512, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 1024, 0u);
  for (void *p : {a, b, n, r}) {
    EXPECT_TRUE(nic_is_dataplane(p));
    free(p);
  }
  EXPECT_THROW(nic_new_site(SIZE_MAX - 4096, 7), std::bad_alloc);
}

// The aligned, nothrow and array operator new variants the LLVM pass emits: dataplane while the
// site is on, ordinary memory while it is off, aligned as asked, and each failing the way its
// operator does (bad_alloc, or NULL for nothrow).
TEST(Dataplane, NewSiteVariantsFollowTheSiteAndTheirOperator) {
  const uint32_t site = 9;
  const std::nothrow_t &tag = std::nothrow;
  ASSERT_EQ(nic_site_set_enabled(site, 1), 0);
  void *aligned = nic_new_aligned_site(300, 256, site);
  void *nothrow = nic_new_nothrow_site(300, &tag, site);
  void *both = nic_new_aligned_nothrow_site(300, 4096, &tag, site);
  void *array = nic_new_array_site(300, site);
  void *array_aligned = nic_new_array_aligned_site(300, 256, site);
  void *array_nothrow = nic_new_array_nothrow_site(300, &tag, site);
  void *array_both = nic_new_array_aligned_nothrow_site(300, 4096, &tag, site);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(both) % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(array_aligned) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(array_both) % 4096, 0u);
  for (void *p : {aligned, nothrow, both, array, array_aligned, array_nothrow, array_both}) {
    EXPECT_TRUE(nic_is_dataplane(p));
    free(p);
  }
  ASSERT_EQ(nic_site_set_enabled(site, 0), 0);
  void *off_aligned = nic_new_aligned_site(300, 256, site);
  void *off_nothrow = nic_new_nothrow_site(300, &tag, site);
  void *off_array = nic_new_array_site(300, site);
  void *off_array_aligned = nic_new_array_aligned_site(300, 256, site);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(off_aligned) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(off_array_aligned) % 256, 0u);
  for (void *p : {off_aligned, off_nothrow, off_array, off_array_aligned}) {
    ASSERT_NE(p, nullptr);
    EXPECT_FALSE(nic_is_dataplane(p));
    free(p);
  }
  ASSERT_EQ(nic_site_set_enabled(site, 1), 0);
  EXPECT_EQ(nic_new_nothrow_site(SIZE_MAX - 4096, &tag, site), nullptr);
  EXPECT_EQ(nic_new_aligned_nothrow_site(SIZE_MAX - 4096, 64, &tag, site), nullptr);
  EXPECT_EQ(nic_new_array_nothrow_site(SIZE_MAX - 4096, &tag, site), nullptr);
  EXPECT_EQ(nic_new_array_aligned_nothrow_site(SIZE_MAX - 4096, 64, &tag, site), nullptr);
  errno = 0;
  EXPECT_EQ(nic_new_aligned_nothrow_site(64, 48, &tag, site), nullptr) << "not a power of two";
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(nic_new_array_aligned_nothrow_site(64, 48, &tag, site), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_THROW(nic_new_aligned_site(SIZE_MAX - 4096, 64, site), std::bad_alloc);
  EXPECT_THROW(nic_new_array_site(SIZE_MAX - 4096, site), std::bad_alloc);
  EXPECT_THROW(nic_new_array_aligned_site(SIZE_MAX - 4096, 64, site), std::bad_alloc);
}

// The region is the pointer's step (NICMALLOC_PIN_STEP): each step is its own registration.
TEST(Dataplane, TranslateIsStepAndOffset) {
  char *p = static_cast<char *>(nic_malloc(1000));
  nic_region_ref ref;
  ASSERT_EQ(nic_translate(p + 10, 100, &ref), 0);
  EXPECT_EQ(ref.kind, NIC_REGION_ARENA);
  EXPECT_EQ(static_cast<char *>(ref.region_base) + ref.offset, p + 10);
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  EXPECT_EQ(ref.region_len, s.pin_step);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ref.region_base) % s.pin_step, 0u);
  EXPECT_EQ(ref.rkey, 0u) << "no remote key unless remote access was asked for";
  // Errors: a range crossing the step end, an empty or overflowing range, control memory.
  char *step_end = static_cast<char *>(ref.region_base) + ref.region_len;
  EXPECT_EQ(nic_translate(step_end - 8, 16, &ref), -NIC_ECROSS);
  EXPECT_EQ(nic_translate(step_end - 8, 8, &ref), 0);
  EXPECT_EQ(nic_translate(p, 0, &ref), -NIC_ERANGE);
  EXPECT_EQ(nic_translate(p, SIZE_MAX, &ref), -NIC_ERANGE);
  void *control = malloc(100);
  EXPECT_EQ(nic_translate(control, 10, &ref), -NIC_ENOTDP);
  EXPECT_EQ(nic_translate(control, 0, &ref), -NIC_ERANGE); // a bad range first, wherever it is
  int on_stack = 0;
  EXPECT_EQ(nic_translate(&on_stack, sizeof on_stack, &ref), -NIC_ENOTDP);
  free(control);
  free(p);
}

TEST(Dataplane, StatsFollowLiveBytes) {
  nic_stats before = NIC_STATS_INIT, during = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  std::vector<void *> blocks;
  for (int i = 0; i < 64; i++)
    blocks.push_back(nic_malloc(64 << 10));
  nic_get_stats(&during);
  for (void *p : blocks)
    free(p);
  nic_get_stats(&after);
  EXPECT_GE(during.dataplane_live, before.dataplane_live + (4u << 20));
  EXPECT_EQ(after.dataplane_live, before.dataplane_live);
  EXPECT_GE(during.chunks_live, 1u);
  EXPECT_NE(during.page_kind, NIC_PAGE_NONE);
  EXPECT_GE(during.dataplane_mapped, during.chunk_size);
  EXPECT_EQ(during.dataplane_reserved, size_t(during.chunks_max) * during.chunk_size);
}

// Every size up to past the largest small size class: the live total must move by exactly the
// usable bytes mimalloc reports, block by block.
TEST(Dataplane, LiveBytesAreExactForEverySmallSize) {
  nic_stats before = NIC_STATS_INIT, during = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  std::vector<void *> blocks;
  size_t usable = 0;
  for (size_t size = 0; size <= 1100; size++) {
    void *p = nic_malloc(size);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(nic_is_dataplane(p)) << size;
    usable += malloc_usable_size(p);
    blocks.push_back(p);
  }
  nic_get_stats(&during);
  for (void *p : blocks)
    free(p);
  nic_get_stats(&after);
  EXPECT_EQ(during.dataplane_live - before.dataplane_live, usable);
  EXPECT_EQ(after.dataplane_live, before.dataplane_live);
}

// dataplane_live is read from mimalloc's pages (alloc/heap/dp_live.c). A block freed by another
// thread stays counted in its page's blocks in use until the owner takes the free back, which an
// owner that allocates nothing more never does: the free waits on the page's thread-free list,
// or, once the page was found full, on the owner heap's delayed-free list. Neither may count.
TEST(Dataplane, LiveBytesDropAtFreesFromOtherThreadsWhileTheOwnerIdles) {
  constexpr int kBlocks = 6000; // 64-byte blocks: several pages, all but the last found full
  std::vector<void *> blocks(kBlocks);
  std::mutex m;
  std::condition_variable cv;
  bool allocated = false, done = false;
  nic_stats before = NIC_STATS_INIT, during = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  std::thread owner([&] {
    for (int i = 0; i < kBlocks; i++)
      blocks[i] = nic_malloc(64);
    std::unique_lock<std::mutex> lock(m);
    allocated = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; }); // alive, and out of nicmalloc, until the checks are made
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return allocated; });
  }
  size_t usable = 0;
  for (void *p : blocks) {
    ASSERT_TRUE(nic_is_dataplane(p));
    usable += malloc_usable_size(p);
  }
  nic_get_stats(&during);
  for (int i = 0; i < kBlocks / 2; i++)
    free(blocks[i]); // the oldest: pages found full
  nic_get_stats(&after);
  EXPECT_EQ(during.dataplane_live - before.dataplane_live, usable);
  EXPECT_EQ(during.dataplane_live - after.dataplane_live, usable / 2);
  for (int i = kBlocks / 2; i < kBlocks; i++)
    free(blocks[i]); // the newest: the last page is the owner's current one, not full
  nic_get_stats(&after);
  EXPECT_EQ(after.dataplane_live, before.dataplane_live);
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  owner.join();
  nic_get_stats(&after);
  EXPECT_EQ(after.dataplane_live, before.dataplane_live);
}

// Blocks of every kind of mimalloc page: small, medium, large and huge (a segment of its own,
// past 16 MiB), counted at their usable size and not at all once freed.
TEST(Dataplane, LiveBytesAreExactForLargeAndHugeBlocks) {
  static const size_t sizes[] = {100, 20000, 300000, 4u << 20, 20u << 20};
  for (size_t size : sizes) {
    nic_stats before = NIC_STATS_INIT, during = NIC_STATS_INIT, after = NIC_STATS_INIT;
    nic_get_stats(&before);
    void *p = nic_malloc(size);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(nic_is_dataplane(p)) << size;
    const size_t usable = malloc_usable_size(p);
    nic_get_stats(&during);
    free(p);
    nic_get_stats(&after);
    EXPECT_EQ(during.dataplane_live - before.dataplane_live, usable) << size;
    EXPECT_EQ(after.dataplane_live, before.dataplane_live) << size;
  }
}

TEST(Dataplane, CrossThreadFreesOfDataplaneBlocks) {
  constexpr int kBlocks = 20000;
  std::vector<char *> blocks(kBlocks);
  std::thread producer([&] {
    for (int i = 0; i < kBlocks; i++) {
      blocks[i] = static_cast<char *>(nic_malloc(16 + i % 2000));
      blocks[i][0] = static_cast<char>(i);
    }
  });
  producer.join();
  nic_stats mid = NIC_STATS_INIT;
  nic_get_stats(&mid);
  std::thread consumer([&] {
    for (int i = 0; i < kBlocks; i++) {
      ASSERT_TRUE(nic_is_dataplane(blocks[i]));
      ASSERT_EQ(blocks[i][0], static_cast<char>(i));
      free(blocks[i]);
    }
  });
  consumer.join();
  nic_stats end = NIC_STATS_INIT;
  nic_get_stats(&end);
  EXPECT_LT(end.dataplane_live, mid.dataplane_live);
  // The exited producer's heap pages are reusable by a new thread.
  std::thread([] {
    for (int i = 0; i < 1000; i++)
      free(nic_malloc(100));
  }).join();
}

// What nicmalloc allocates for itself (here the translation-cache model the first statistics
// build) is control memory even inside a dataplane scope: it used to map and pin a chunk.
TEST(DataplaneChunks, StatisticsInsideAScopeMapNoChunk) {
  auto r = run_probe({}, {"stats-in-scope"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("chunks_created"), 0) << r.out;
  EXPECT_EQ(r.num("live"), 0) << r.out;
}

// The same for what the C library allocates for nicmalloc: NICMALLOC_FENCE=detect records the
// sites of dataplane blocks with libunwind, whose thread-local block is allocated on a thread's
// first walk (found by the API fuzz driver under detect: 32 bytes left per run).
TEST(DataplaneChunks, AStackWalkInsideAScopeLeavesNoDataplaneBlock) {
  auto r = run_probe({"NICMALLOC_FENCE=detect", "NICMALLOC_FENCE_DETECT_SAMPLE=0"},
                     {"sampled-in-scope"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("thread_live"), 0) << r.out;
}

TEST(DataplaneChunks, GrowsPastOneChunkAndReportsPageKind) {
  // 64 MiB chunks; 150 MiB in 1 MiB blocks needs three.
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=64M"}, {"dp-alloc", "157286400", "1048576"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("dp"), 150);
  EXPECT_EQ(r.num("nulls"), 0);
  EXPECT_GE(r.num("chunks_live"), 3);
  EXPECT_EQ(r.num("chunk_size"), 64 << 20);
  EXPECT_NE(r.values["page_kind"], "none");
  EXPECT_EQ(r.num("after_free_live"), 0);
  EXPECT_GE(r.num("live"), 150 << 20);
}

// A fallback: said once when verbose, never a warning.
TEST(DataplaneChunks, CapReachedFallsBackToControlAndSaysSoOnce) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_MAX_CHUNKS=1",
                      "NICMALLOC_ON_PIN_FAIL=fallback", "NICMALLOC_VERBOSE=1"},
                     {"dp-alloc", "67108864", "1048576"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("nulls"), 0) << "fallback never fails a request";
  EXPECT_GT(r.num("control_blocks"), 0);
  EXPECT_GT(r.num("dp"), 0);
  EXPECT_EQ(r.num("dp_fallbacks"), r.num("control_blocks"));
  EXPECT_EQ(count_lines(r.err, "cap of 1 chunks is reached"), 1) << r.err;
  // Full may be of threads: each holds a 32 MiB segment of its own at least.
  EXPECT_EQ(count_lines(r.err, "hold at most 1 such threads at once"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "warning"), 0) << r.err;
}

TEST(DataplaneChunks, CapReachedFailsWithEnomemWhenAsked) {
  auto r = run_probe(
      {"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_MAX_CHUNKS=1", "NICMALLOC_ON_PIN_FAIL=fail"},
      {"dp-alloc", "67108864", "1048576"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.num("nulls"), 0);
  EXPECT_EQ(r.num("errno"), ENOMEM);
  EXPECT_EQ(r.num("control_blocks"), 0) << "fail never hands out control memory";
  EXPECT_EQ(r.num("dp_failures"), r.num("nulls"));
  EXPECT_EQ(count_lines(r.err, "cap of 1 chunks is reached"), 1) << r.err;
}

// Once every chunk is full at the cap, a thread stops looking through the chunks for a moment
// (each look makes mimalloc collect every heap it tries), but room made afterwards is used: its
// own free in its current chunk at once, an emptied chunk once the pause is over.
TEST(DataplaneChunks, RoomMadeAtTheCapIsFound) {
  // The emptied chunk must not be released under the probe, however slow the machine.
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_MAX_CHUNKS=2",
                      "NICMALLOC_ON_PIN_FAIL=fail", "NICMALLOC_RELEASE_DELAY_MS=600000"},
                     {"cap-again", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.num("filled"), 10000);
  EXPECT_EQ(r.num("fill_errno"), ENOMEM);
  EXPECT_EQ(r.num("own_free_reused"), 1);
  EXPECT_EQ(r.num("scoped_free_reused"), 1);
  EXPECT_GT(r.num("freed_chunk0"), 1000);
  EXPECT_EQ(r.num("later_dataplane"), 1) << "errno " << r.num("later_errno");
  EXPECT_EQ(r.num("later_in_chunk0"), 1);
  EXPECT_EQ(r.num("live"), 0);
}

TEST(DataplaneChunks, RequestLargerThanAChunkIsNotSilentlyLost) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_VERBOSE=1"},
                     {"dp-alloc", "67108864", "67108864"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("control_blocks"), 1);
  EXPECT_EQ(r.num("chunks_created"), 0) << "no chunk is mapped for a request no chunk can hold";
  EXPECT_EQ(count_lines(r.err, "larger than a chunk can hold"), 1) << r.err;
}

// A request over 32 MiB gets a segment of the request rounded up to 4 MiB plus a header: with
// 64 MiB chunks 60 MiB fits and 61-63 MiB do not. The limit was the chunk less 1 MiB, so those
// passed it, and each mapped chunks that could not hold it before going to the control heap.
TEST(DataplaneChunks, RequestsJustUnderTheChunkSizeThatNoChunkHoldsMapNothing) {
  auto fits = run_probe({"NICMALLOC_CHUNK_SIZE=64M"}, {"dp-alloc", "62914560", "62914560"});
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(fits.num("control_blocks"), 0) << fits.err;
  auto over = run_probe({"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_VERBOSE=1"},
                        {"dp-alloc", "65011712", "65011712"});
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_EQ(over.num("control_blocks"), 1);
  EXPECT_EQ(over.num("chunks_created"), 0) << over.err;
  EXPECT_EQ(count_lines(over.err, "larger than a chunk can hold (62914560"), 1) << over.err;
}

TEST(DataplaneChunks, SizeThresholdRoutesLargeMallocs) {
  auto big = run_probe({"NICMALLOC_DP_MIN_SIZE=4096"}, {"auto", "4096"});
  auto small = run_probe({"NICMALLOC_DP_MIN_SIZE=4096"}, {"auto", "4095"});
  auto off = run_probe({}, {"auto", "1000000"});
  EXPECT_EQ(big.num("is_dp"), 1) << big.err;
  EXPECT_EQ(small.num("is_dp"), 0);
  EXPECT_EQ(off.num("is_dp"), 0);
}

} // namespace
