// Bad input gets one clear line on stderr and loses nothing: invalid frees, double frees, and
// bad settings.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
#include "probe_runner.h"

namespace {

static char static_buffer[64];

uint64_t errors(bool doubles) {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return doubles ? s.double_frees : s.invalid_frees;
}

TEST(BadInput, FreeOfForeignPointersIsReportedAndIgnored) {
  char on_stack[64];
  void *mapped = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  strcpy(static_cast<char *>(mapped), "intact");
  const uint64_t before = errors(false);
  testing::internal::CaptureStderr();
  free(on_stack);
  free(static_buffer);
  free(mapped);
  free(reinterpret_cast<void *>(0x1000));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "was not allocated by nicmalloc"), 4) << err;
  EXPECT_EQ(count_lines(err, "free("), 4);
  EXPECT_EQ(errors(false), before + 4);
  EXPECT_STREQ(static_cast<char *>(mapped), "intact");
  munmap(mapped, 4096);
}

// A pointer into a block that is not 16-byte aligned cannot start one: reported, and the block
// is untouched (its neighbours are not handed out over it). Sizes cover small, medium, large and
// huge blocks, control and dataplane.
TEST(BadInput, FreeOfAMisalignedPointerIntoABlockIsReported) {
  for (bool dataplane : {false, true})
    for (size_t size : {24ul, 200ul, 5000ul, 70000ul, 600000ul, 40ul << 20}) {
      char *p = static_cast<char *>(dataplane ? nic_malloc(size) : malloc(size));
      ASSERT_NE(p, nullptr);
      memset(p, 'k', size);
      const uint64_t before = errors(false), doubles = errors(true);
      testing::internal::CaptureStderr();
      free(p + 8);
      EXPECT_EQ(realloc(p + 4, size * 2), nullptr);
      std::string err = testing::internal::GetCapturedStderr();
      EXPECT_EQ(count_lines(err, "was not allocated by nicmalloc"), 2) << size << err;
      EXPECT_EQ(errors(false), before + 2) << size;
      // Nothing was freed: new blocks of the same size land elsewhere, the data is intact, and
      // the real free is no double free.
      std::vector<char *> others;
      for (int i = 0; i < (size > (1 << 20) ? 4 : 64); i++) {
        char *q = static_cast<char *>(dataplane ? nic_malloc(size) : malloc(size));
        EXPECT_TRUE(q + size <= p || q >= p + size) << size;
        others.push_back(q);
      }
      EXPECT_EQ(p[0], 'k');
      EXPECT_EQ(p[size - 1], 'k');
      free(p);
      EXPECT_EQ(errors(true), doubles) << size;
      for (char *q : others)
        free(q);
    }
}

// A pointer into a block at a multiple of 16 bytes is no block's start: mimalloc took it for a
// block, put it on a free list and handed it out again over the live block (or, for a block alone
// on its page, freed the whole block). realloc, malloc_usable_size and the general path of free
// (taken by every free while a hold is outstanding) refuse it; free's fast path does not look
// (README.md, "Frees"). Sizes cover small, medium, large and huge blocks, control and dataplane,
// and a pointer past a huge segment's first 32 MiB, where no segment header lies.
TEST(BadInput, APointerInsideABlockIsRefusedOffFreesFastPath) {
  void *anchor = nic_malloc(4096);
  ASSERT_EQ(nic_hold(anchor), 0); // every free takes the general path while it is held
  for (bool dataplane : {false, true})
    for (size_t size : {48ul, 200ul, 1000ul, 5000ul, 70000ul, 600000ul, 2ul << 20, 40ul << 20}) {
      char *p = static_cast<char *>(dataplane ? nic_malloc(size) : malloc(size));
      ASSERT_NE(p, nullptr);
      memset(p, 'k', size);
      std::vector<char *> inside = {p + (size > (1 << 20) ? 4096 : 32)};
      if (size > (32ul << 20)) inside.push_back(p + (33ul << 20));
      const uint64_t before = errors(false), doubles = errors(true);
      testing::internal::CaptureStderr();
      for (char *q : inside) {
        EXPECT_EQ(malloc_usable_size(q), 0u) << size;
        errno = 0;
        EXPECT_EQ(realloc(q, size * 2), nullptr) << size;
        EXPECT_EQ(errno, EINVAL) << size;
        free(q);
      }
      std::string err = testing::internal::GetCapturedStderr();
      EXPECT_EQ(count_lines(err, "was not allocated by nicmalloc"), 3 * (int)inside.size())
          << dataplane << " " << size << err;
      EXPECT_EQ(count_lines(err, "bytes inside the block at"), 3) << dataplane << " " << size;
      EXPECT_EQ(errors(false), before + 3 * inside.size()) << size;
      // Nothing was freed: new blocks of the same size land elsewhere, the data is intact, and
      // the real free is no double free.
      std::vector<char *> others;
      for (int i = 0; i < (size > (1 << 20) ? 4 : 64); i++) {
        char *q = static_cast<char *>(dataplane ? nic_malloc(size) : malloc(size));
        EXPECT_TRUE(q + size <= p || q >= p + size) << dataplane << " " << size;
        others.push_back(q);
      }
      EXPECT_EQ(p[0], 'k');
      EXPECT_EQ(p[size - 1], 'k');
      EXPECT_EQ(malloc_usable_size(p) >= size, true) << size;
      free(p);
      EXPECT_EQ(errors(true), doubles) << size;
      for (char *q : others)
        free(q);
    }
  EXPECT_EQ(nic_release(anchor), 0);
  free(anchor);
}

// What an aligned allocation hands out may lie inside mimalloc's block (it over-allocates and
// aligns within): no report for those, on any path, and they free for real.
TEST(BadInput, AlignedBlocksStartingInsideTheirMimallocBlockAreNoBadPointers) {
  void *anchor = nic_malloc(4096);
  ASSERT_EQ(nic_hold(anchor), 0);
  const uint64_t before = errors(false) + errors(true);
  testing::internal::CaptureStderr();
  for (size_t alignment = 32; alignment <= (8ul << 20); alignment *= 2)
    for (size_t size : {alignment / 2 + 100, alignment * 3}) {
      void *control = nullptr;
      ASSERT_EQ(posix_memalign(&control, alignment, size), 0);
      void *dataplane = nic_aligned_alloc(alignment, size);
      ASSERT_NE(dataplane, nullptr);
      for (void *q : {control, dataplane}) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % alignment, 0u);
        EXPECT_GE(malloc_usable_size(q), size) << alignment;
      }
      void *moved = realloc(control, size + 16);
      ASSERT_NE(moved, nullptr) << alignment;
      free(moved);
      free(dataplane);
    }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  EXPECT_EQ(errors(false) + errors(true), before);
  EXPECT_EQ(nic_release(anchor), 0);
  free(anchor);
}

TEST(BadInput, ReallocAndUsableSizeOfForeignPointers) {
  char on_stack[64] = "keep";
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(realloc(on_stack, 128), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(malloc_usable_size(on_stack), 0u);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "realloc("), 1) << err;
  EXPECT_EQ(count_lines(err, "malloc_usable_size("), 1) << err;
  EXPECT_STREQ(on_stack, "keep");
}

// Using a freed block is no double free: the report names the use.
TEST(BadInput, ReallocAndUsableSizeOfAFreedBlockSayWhatTheyAre) {
  for (bool dataplane : {false, true}) {
    void *p = dataplane ? nic_malloc(64) : malloc(64);
    free(p);
    testing::internal::CaptureStderr();
    EXPECT_EQ(malloc_usable_size(p), 0u);
    errno = 0;
    EXPECT_EQ(realloc(p, 128), nullptr);
    EXPECT_EQ(errno, EINVAL);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_lines(err, "malloc_usable_size of a freed block"), 1) << err;
    EXPECT_EQ(count_lines(err, "realloc of a freed block"), 1) << err;
    EXPECT_EQ(count_lines(err, "double free"), 0) << err;
  }
}

TEST(BadInput, DoubleFreeIsReportedAndTheHeapStaysConsistent) {
  for (bool dataplane : {false, true}) {
    void *p = dataplane ? nic_malloc(48) : malloc(48);
    free(p);
    const uint64_t before = errors(true);
    testing::internal::CaptureStderr();
    free(p);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_lines(err, "double free"), 1) << err;
    EXPECT_EQ(errors(true), before + 1);
    // Had the second free reached mimalloc, the block would be handed out twice.
    void *a = dataplane ? nic_malloc(48) : malloc(48);
    void *b = dataplane ? nic_malloc(48) : malloc(48);
    EXPECT_NE(a, b);
    free(a);
    free(b);
  }
}

// The free key, learnt as a peer could learn it: from a freed block's second word.
uintptr_t learned_free_key() {
  auto *volatile block = static_cast<uintptr_t *>(malloc(48));
  free(block);
  return block[1];
}

void *alloc48(bool dataplane) {
  return dataplane ? nic_malloc(48) : malloc(48);
}

size_t dataplane_live() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s.dataplane_live;
}

// A live block whose second word holds the free key (a peer can arrange that in a received
// buffer) is freed for real: no report, its bytes leave the live count, mimalloc hands it out
// again (and not twice in a row); and a second free of it is a real double free, still caught.
TEST(BadInput, ALiveBlockHoldingTheFreeKeyIsFreedForReal) {
  const uintptr_t key = learned_free_key();
  for (bool dataplane : {false, true}) {
    auto *block = static_cast<uintptr_t *>(alloc48(dataplane));
    ASSERT_NE(block, nullptr);
    block[1] = key;
    const uint64_t before = errors(false) + errors(true), doubles = errors(true);
    const size_t live = dataplane_live();
    testing::internal::CaptureStderr();
    free(block);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err, "") << dataplane;
    EXPECT_EQ(errors(false) + errors(true), before) << dataplane;
    if (dataplane) {
      EXPECT_EQ(dataplane_live(), live - 48);
    }
    testing::internal::CaptureStderr();
    free(block);
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_lines(err, "double free"), 1) << dataplane << err;
    EXPECT_EQ(errors(true), doubles + 1) << dataplane;
    // Freed once: handed out again, and not at once a second time (as a block freed twice can).
    std::vector<void *> taken;
    size_t found = 0;
    for (int i = 0; i < 100000 && found == 0; i++) {
      taken.push_back(alloc48(dataplane));
      found += taken.back() == block;
    }
    EXPECT_EQ(found, 1u) << dataplane;
    void *next = alloc48(dataplane);
    EXPECT_NE(next, block) << dataplane;
    free(next);
    for (void *p : taken)
      free(p);
  }
}

// Every kind of page: small, medium, large and huge blocks, control and dataplane, and blocks
// whose pointer an alignment moved inside them. The second free is reported, as a double free
// or, where the memory went back with the free, as a pointer nicmalloc does not know.
TEST(BadInput, ALiveBlockOfAnySizeHoldingTheFreeKeyIsFreed) {
  const uintptr_t key = learned_free_key();
  for (bool dataplane : {false, true})
    for (size_t size : {16ul, 1000ul, 5000ul, 70000ul, 600000ul, 40ul << 20})
      for (size_t alignment : {0ul, 256ul}) {
        void *p = nullptr;
        if (alignment == 0)
          p = dataplane ? nic_malloc(size) : malloc(size);
        else if (dataplane)
          p = nic_aligned_alloc(alignment, size);
        else
          ASSERT_EQ(posix_memalign(&p, alignment, size), 0);
        ASSERT_NE(p, nullptr) << size;
        static_cast<uintptr_t *>(p)[1] = key;
        const uint64_t before = errors(false) + errors(true);
        testing::internal::CaptureStderr();
        free(p);
        std::string err = testing::internal::GetCapturedStderr();
        EXPECT_EQ(err, "") << dataplane << " " << size << " " << alignment;
        EXPECT_EQ(errors(false) + errors(true), before) << size;
        testing::internal::CaptureStderr();
        free(p);
        err = testing::internal::GetCapturedStderr();
        EXPECT_EQ(count_lines(err, "free("), 1) << dataplane << " " << size << err;
        EXPECT_EQ(errors(false) + errors(true), before + 1) << size;
      }
}

// The same across threads: the freeing thread walks lists of a page another thread owns.
TEST(BadInput, ABlockHoldingTheFreeKeyIsFreedForRealFromAnotherThread) {
  const uintptr_t key = learned_free_key();
  for (bool dataplane : {false, true}) {
    auto *block = static_cast<uintptr_t *>(alloc48(dataplane));
    ASSERT_NE(block, nullptr);
    block[1] = key;
    const uint64_t before = errors(false) + errors(true);
    const size_t live = dataplane_live();
    testing::internal::CaptureStderr();
    std::thread([block] { free(block); }).join();
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err, "") << dataplane;
    EXPECT_EQ(errors(false) + errors(true), before) << dataplane;
    if (dataplane) {
      EXPECT_EQ(dataplane_live(), live - 48);
    }
    testing::internal::CaptureStderr();
    std::thread([block] { free(block); }).join();
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_lines(err, "double free"), 1) << dataplane << err;
  }
}

// Each process draws its own key: two started alike, even with address space layout
// randomisation off, hold different keys, with getrandom or without it, and none holds ours.
TEST(BadInput, EachProcessDrawsItsOwnFreeKey) {
  std::set<std::string> keys;
  char ours[32];
  snprintf(ours, sizeof ours, "%llx", static_cast<unsigned long long>(learned_free_key()));
  keys.insert(ours);
  const std::vector<std::vector<std::string>> runs = {
      {"fixed-layout", "free-key"},
      {"fixed-layout", "free-key"},
      {"fixed-layout", "no-getrandom", "free-key"},
      {"fixed-layout", "no-getrandom", "free-key"},
  };
  for (const auto &args : runs) {
    auto r = run_probe({}, args);
    if (r.exit_code == 77) GTEST_SKIP() << "the kernel refuses to turn randomisation off";
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(r.values.count("free_key"), 1u) << r.out;
    EXPECT_NE(r.values.at("free_key"), "0");
    keys.insert(r.values.at("free_key"));
  }
  EXPECT_EQ(keys.size(), runs.size() + 1);
}

// Inside the control arena but where mimalloc never committed memory: the check must not read
// the word after the pointer (that would be a segfault, not a report).
TEST(BadInput, FreeIntoUncommittedHeapMemoryIsReported) {
  char *block = static_cast<char *>(malloc(64));
  char *far = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(block) + (size_t{32} << 30)) &
                                       ~uintptr_t{4095});
  const uint64_t before = errors(false);
  testing::internal::CaptureStderr();
  free(far);
  free(far + 4096 + 16);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "was not allocated by nicmalloc"), 2) << err;
  EXPECT_EQ(errors(false), before + 2);
  free(block);
}

// Programs may drop the contents of memory they own with MADV_DONTNEED; the block stays theirs
// and its free must go through, not be reported.
TEST(BadInput, FreeOfABlockWhosePagesTheProgramDroppedGoesThrough) {
  const size_t size = size_t{1} << 20;
  char *block = static_cast<char *>(malloc(size));
  ASSERT_NE(block, nullptr);
  memset(block, 1, size);
  // Every page that starts in the block, its first page included when the block starts one.
  uintptr_t first = (reinterpret_cast<uintptr_t>(block) + 4095) & ~uintptr_t{4095};
  if (reinterpret_cast<uintptr_t>(block) % 4096 == 0) first = reinterpret_cast<uintptr_t>(block);
  ASSERT_EQ(madvise(reinterpret_cast<void *>(first), size / 2, MADV_DONTNEED), 0);
  const uint64_t before = errors(false) + errors(true);
  testing::internal::CaptureStderr();
  free(block);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  EXPECT_EQ(errors(false) + errors(true), before);
}

// A huge block's memory goes back to the kernel when it is freed for good (nic_collect empties
// the huge cache), so its double free finds neither a key nor a segment.
TEST(BadInput, DoubleFreeAfterTheMemoryWentBackIsReported) {
  char *huge = static_cast<char *>(malloc(size_t{20} << 20));
  ASSERT_NE(huge, nullptr);
  huge[0] = 1;
  free(huge);
  nic_collect();
  const uint64_t before = errors(false) + errors(true);
  testing::internal::CaptureStderr();
  free(huge);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "free("), 1) << err;
  EXPECT_EQ(errors(false) + errors(true), before + 1);
  void *again = malloc(size_t{20} << 20);
  EXPECT_NE(again, nullptr);
  free(again);
}

// A big block's memory goes back when it is freed: a mapping of nicmalloc's own is unmapped (from
// 1 GiB), a huge block's segment is given back to mimalloc (512 MiB, more than the huge cache
// keeps) or purged from the huge cache (40 MiB, by nic_collect). A second free or a use then
// finds neither a block nor a key, and was called a pointer nicmalloc never handed out.
TEST(BadInput, AFreedBigBlockIsReportedAsFreed) {
  for (size_t size : {size_t{40} << 20, size_t{512} << 20, size_t{3} << 30}) {
    char *p = static_cast<char *>(malloc(size));
    if (!p) {
      ADD_FAILURE() << "no block of " << size << " bytes";
      continue;
    }
    p[0] = 1;
    free(p);
    nic_collect();
    const uint64_t doubles = errors(true), invalid = errors(false);
    testing::internal::CaptureStderr();
    EXPECT_EQ(malloc_usable_size(p), 0u) << size;
    errno = 0;
    EXPECT_EQ(realloc(p, 64), nullptr) << size;
    EXPECT_EQ(errno, EINVAL) << size;
    free(p);
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(count_lines(err, "malloc_usable_size of a freed block"), 1) << size << err;
    EXPECT_EQ(count_lines(err, "realloc of a freed block"), 1) << size << err;
    EXPECT_EQ(count_lines(err, "double free"), 1) << size << err;
    EXPECT_EQ(errors(true), doubles + 3) << size;
    EXPECT_EQ(errors(false), invalid) << size;
  }
}

// mimalloc decommits a freed span at once (MADV_DONTNEED) when its segment's purge deadline has
// passed, which wipes the free key of the large block that lay there; the segment lives on for
// its other blocks. The madvise here does what mimalloc does then. The double free used to pass
// every check and reach mimalloc, which put a page it no longer had on a free list: blocks
// handed out twice, or a thread spinning in a cycle of that list at exit. With the block before
// it freed first, the two spans merge and the block's own slice entry keeps stale values: only
// a walk of the segment's spans finds it free.
void DoubleFreeOnADecommittedSpan(bool neighbour_freed_first) {
  std::thread([neighbour_freed_first] {
    const size_t size = 500000;
    void *keep_small = malloc(100);
    char *before = static_cast<char *>(malloc(size));
    char *block = static_cast<char *>(malloc(size));
    void *keep_large = malloc(size);
    ASSERT_NE(block, nullptr);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(block) % 4096, 0u) << "a large block starts a page";
    const uint64_t doubles = errors(true);
    testing::internal::CaptureStderr(); // before the frees: nothing may allocate in between
    if (neighbour_freed_first) free(before);
    free(block);
    const int dropped = madvise(block, size & ~size_t{4095}, MADV_DONTNEED);
    free(block);
    std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(dropped, 0);
    EXPECT_EQ(count_lines(err, "double free"), 1) << err;
    EXPECT_EQ(errors(true), doubles + 1) << err;
    void *a = malloc(size), *b = malloc(size), *c = malloc(size);
    EXPECT_TRUE(a != b && b != c && a != c) << "a block was handed out twice";
    for (void *q : {a, b, c, keep_small, keep_large})
      free(q);
    if (!neighbour_freed_first) free(before);
  }).join();
}

TEST(BadInput, DoubleFreeOfALargeBlockOnADecommittedSpanIsReported) {
  DoubleFreeOnADecommittedSpan(false);
}

TEST(BadInput, DoubleFreeOfALargeBlockOnAMergedDecommittedSpanIsReported) {
  DoubleFreeOnADecommittedSpan(true);
}

TEST(BadInput, DoubleDeleteIsReported) {
  int *p = new int(5);
  delete p;
  testing::internal::CaptureStderr();
  ::operator delete(p);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_lines(err, "operator delete"), 1) << err;
}

// NICMALLOC_FREE_CHECK=0 sends every free past the checked fast path: dataplane blocks still
// leave the live count, and a huge block still goes to the cache and comes back.
TEST(BadInput, WithTheFreeCheckOffFreesStillRelease) {
  auto dp = run_probe({"NICMALLOC_FREE_CHECK=0", "NICMALLOC_CHUNK_SIZE=64M"},
                      {"dp-alloc", "16777216", "4096"});
  ASSERT_EQ(dp.exit_code, 0) << dp.err;
  EXPECT_EQ(dp.num("dp"), 4096);
  EXPECT_GE(dp.num("live"), 16ll << 20);
  EXPECT_EQ(dp.num("after_free_live"), 0);
  auto huge = run_probe({"NICMALLOC_FREE_CHECK=0"}, {"huge", "20971520", "0"});
  ASSERT_EQ(huge.exit_code, 0) << huge.err;
  EXPECT_EQ(huge.num("huge_hits"), 1);
  EXPECT_EQ(huge.num("kept_bytes"), 1);
  EXPECT_EQ(huge.err, "");
}

// With the free check off, free's fast path releases a control block after the range test alone
// (no key, no commit map); what watches frees still sees them.
TEST(BadInput, WithTheFreeCheckOffControlFreesReleaseAndInvalidate) {
  for (const char *check : {"NICMALLOC_FREE_CHECK=0", "NICMALLOC_FREE_CHECK=1"}) {
    auto r = run_probe({check}, {"control-frees"});
    ASSERT_EQ(r.exit_code, 0) << check << "\n" << r.err;
    EXPECT_LT(r.num("span"), 1 << 20) << check << ": freed blocks did not come back";
    ASSERT_EQ(r.num("register_rc"), 0) << check << "\n" << r.err;
    EXPECT_EQ(r.num("invalidations"), 1) << check;
    EXPECT_EQ(r.err, "") << check;
  }
}

TEST(BadInput, BadSettingsWarnOnceAndUseDefaults) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=lots", "NICMALLOC_MAX_CHUNKS=0",
                      "NICMALLOC_PAGE_KIND=huge", "NICMALLOC_ON_PIN_FAIL=maybe",
                      "NICMALLOC_STATS=sometimes", "NICMALLOC_DP_MIN_SIZE=-3"},
                     {"stats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char *name :
       {"NICMALLOC_CHUNK_SIZE=lots", "NICMALLOC_MAX_CHUNKS=0", "NICMALLOC_PAGE_KIND=huge",
        "NICMALLOC_ON_PIN_FAIL=maybe", "NICMALLOC_STATS=sometimes", "NICMALLOC_DP_MIN_SIZE=-3"})
    EXPECT_EQ(count_lines(r.err, name), 1) << name << "\n" << r.err;
  EXPECT_EQ(r.num("chunk_size"), 1 << 30);
  EXPECT_EQ(r.num("chunks_max"), 48);
}

TEST(BadInput, ChunkSizeMustBeAPowerOfTwoInRange) {
  for (const char *bad :
       {"NICMALLOC_CHUNK_SIZE=48M", "NICMALLOC_CHUNK_SIZE=16M", "NICMALLOC_CHUNK_SIZE=2G"}) {
    auto r = run_probe({bad}, {"stats"});
    EXPECT_EQ(count_lines(r.err, ": expected a power of two from 32M to 1G (K, M, G); using 1G"), 1)
        << bad << r.err;
    EXPECT_EQ(r.num("chunk_size"), 1 << 30);
  }
}

// A step past the chunk was cut to the chunk's size without a word; it is a bad value like
// one outside the range: said once, and the default used (under 1g, the chunk: its page's step).
TEST(BadInput, APinStepPastTheChunkWarnsOnceAndTakesTheDefault) {
  auto r = run_probe({"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_PIN_STEP=64M"}, {"stats"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_lines(r.err, "NICMALLOC_PIN_STEP=64M: expected at most NICMALLOC_CHUNK_SIZE "
                               "(32M); using 4M"),
            1)
      << r.err;
  EXPECT_EQ(r.num("pin_step"), 4 << 20);
  auto gig = run_probe(
      {"NICMALLOC_CHUNK_SIZE=64M", "NICMALLOC_PIN_STEP=128M", "NICMALLOC_PAGE_KIND=1g"}, {"stats"});
  ASSERT_EQ(gig.exit_code, 0) << gig.err;
  EXPECT_EQ(count_lines(gig.err, "NICMALLOC_PIN_STEP=128M: expected at most NICMALLOC_CHUNK_SIZE "
                                 "(64M); using 64M"),
            1)
      << gig.err;
  EXPECT_EQ(gig.num("pin_step"), 64 << 20);
  auto fits = run_probe({"NICMALLOC_CHUNK_SIZE=32M", "NICMALLOC_PIN_STEP=32M"}, {"stats"});
  EXPECT_EQ(count_lines(fits.err, "NICMALLOC_PIN_STEP"), 0) << fits.err;
  EXPECT_EQ(fits.num("pin_step"), 32 << 20);
}

TEST(BadInput, StatsReportIsPrintedAtExit) {
  auto r = run_probe({"NICMALLOC_STATS=1"}, {"dp-alloc", "1048576", "4096"});
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(count_lines(r.err, "nicmalloc report"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "  dataplane         live 0.0 MiB"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "  chunks            1 live, "), 1);
}

// A program that closes stderr and opens a file, which gets fd 2, keeps that file to itself:
// nicmalloc's lines and the exit report go to the stderr the process started with.
TEST(BadInput, LinesNeverLandInAFileThatTookOverFdTwo) {
  char path[] = "/tmp/nicmalloc-fd2-XXXXXX";
  const int made = mkstemp(path);
  ASSERT_GE(made, 0);
  close(made);
  auto r = run_probe({"NICMALLOC_STATS=1"}, {"stderr-reused", path});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_EQ(r.num("file_fd"), 2) << r.out;
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  EXPECT_EQ(content, "data\n");
  EXPECT_EQ(count_lines(r.err, "was not allocated by nicmalloc"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "nicmalloc report"), 1) << r.err;
}

// A block freed with its first page still PROT_NONE (a stack's guard page left in place) cannot
// be checked or freed: the report says that, not "not allocated by nicmalloc", which it was.
TEST(BadInput, AFreedBlockWhoseFirstPageWasLeftProtectedIsReportedAsSuch) {
  auto r = run_probe({}, {"guarded-free"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("survived"), 1);
  EXPECT_EQ(count_lines(r.err, "the page holding the block's start is not readable"), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, "pointer was not allocated by nicmalloc"), 1)
      << "the static array's pointer still is\n"
      << r.err;
}

// A program that frees or reallocs bad pointers in a loop does not fill stderr: the first 256
// are said, then one line says the rest are only counted, and every one is counted.
TEST(BadInput, BadPointersInALoopAreSaidUpToALimitAndAllCounted) {
  auto r = run_probe({}, {"bad-frees", "1000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.num("invalid_frees"), 1000);
  EXPECT_EQ(r.num("double_frees"), 1) << "counted past the limit too";
  EXPECT_EQ(count_lines(r.err, "was not allocated by nicmalloc"), 256);
  EXPECT_EQ(count_lines(r.err, "256 bad pointers reported; later ones are only counted"), 1)
      << r.err.substr(r.err.size() > 2000 ? r.err.size() - 2000 : 0);
  EXPECT_EQ(count_lines(r.err, "double free"), 0);
}

} // namespace
