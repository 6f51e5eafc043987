// Dataplane blocks over 16 MiB (alloc/heap/dp_huge.h): mimalloc 2.0.9 claims whole 32 MiB arena
// blocks for each and committed the whole claim, so a 17 MiB block pinned 32 MiB. The claim's
// commit now backs the steps its segment covers: every byte of the block is backed, and no step
// past the segment. Internal headers, so the layers' objects are linked directly; the reaper's
// release delay is long enough to leave the steps alone, and each test first gives back the
// steps mimalloc holds nothing committed in, so what it counts is its own block's.
#include <gtest/gtest.h>

#include <malloc.h>
#include <mimalloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "chunks.h"
#include "dp_huge.h"
#include "mi_decommit.h"
#include "nicmalloc.h"
#include "steps.h"
}

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr uintptr_t kArenaBlock = 32 * kMiB;

size_t StepSize() {
  return size_t{1} << nic_dp.step_shift;
}

nic_stats Stats() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

// What the reaper does after the release delay, now: every backed step of a live chunk that
// mimalloc holds no slice of goes back.
void ReleaseIdleSteps() {
  nic_chunks_lock();
  for (unsigned i = 0; i < nic_chunk_slots_used(); i++) {
    if (nic_chunk_at(i)->state != NIC_CHUNK_LIVE) continue;
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
      if (nic_step_backed(i, s) && !nic_step_committed(i, s)) nic_step_release_locked(i, s);
  }
  nic_chunks_unlock();
}

// Bytes of the backed steps in [from, from + len).
size_t BackedIn(uintptr_t from, size_t len) {
  size_t backed = 0;
  for (uintptr_t a = from; a < from + len; a += StepSize())
    if (nic_step_backed(nic_chunk_index((void *)a), nic_step_index((void *)a)))
      backed += StepSize();
  return backed;
}

// Whether every step under [p, p + len) is backed.
bool AllBacked(const void *p, size_t len) {
  const uintptr_t first = (uintptr_t)p & ~(uintptr_t)(StepSize() - 1);
  return BackedIn(first, (uintptr_t)p + len - first) ==
         (((uintptr_t)p + len - first + StepSize() - 1) & ~(uintptr_t)(StepSize() - 1));
}

size_t StepUp(size_t n) {
  return (n + StepSize() - 1) & ~(StepSize() - 1);
}

// The arena claim of the huge block at p: whole 32 MiB arena blocks from its segment's start.
struct Claim {
  uintptr_t start;
  size_t len;
};
Claim ClaimOf(const void *p) {
  const uintptr_t start = (uintptr_t)p & ~(kArenaBlock - 1);
  const size_t segment = (uintptr_t)p + malloc_usable_size(const_cast<void *>(p)) - start;
  return {start, (segment + kArenaBlock - 1) & ~(kArenaBlock - 1)};
}

TEST(DpHuge, A17MiBBlockPinsAtMost17MiBAndOneStep) {
  ReleaseIdleSteps();
  const size_t before = Stats().dataplane_pinned;
  char *p = static_cast<char *>(nic_malloc(17 * kMiB));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(nic_is_dataplane(p));
  const Claim claim = ClaimOf(p);
  ASSERT_EQ(claim.len, kArenaBlock);
  EXPECT_LE(BackedIn(claim.start, claim.len), 17 * kMiB + StepSize())
      << "the block's 32 MiB arena claim was backed past its segment";
  EXPECT_LE(Stats().dataplane_pinned - before, 17 * kMiB + StepSize());
  EXPECT_TRUE(AllBacked(p, malloc_usable_size(p)));
  memset(p, 0x6b, malloc_usable_size(p));
  free(p);
}

// mimalloc's own blocks against the bound dp_huge.c computes: for sizes on and off its rounding
// units, aligned and zeroed, every byte it hands out is backed, and the claim's steps past the
// bound are not.
TEST(DpHuge, EveryByteIsBackedAndNothingPastTheSegmentBound) {
  const size_t sizes[] = {16 * kMiB + 1, 17 * kMiB, 19 * kMiB - 1,    19 * kMiB, 23 * kMiB + 7,
                          31 * kMiB + 1, 32 * kMiB, 33 * kMiB + 4096, 63 * kMiB, 100 * kMiB + 3};
  const size_t alignments[] = {0, 64 << 10, 1 * kMiB, 16 * kMiB};
  for (size_t size : sizes)
    for (size_t alignment : alignments)
      for (bool zero : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "size " << size << " alignment " << alignment << (zero ? " zeroed" : ""));
        ReleaseIdleSteps();
        char *p = static_cast<char *>(alignment ? nic_aligned_alloc(alignment, size)
                                      : zero    ? nic_calloc(1, size)
                                                : nic_malloc(size));
        ASSERT_NE(p, nullptr);
        ASSERT_TRUE(nic_is_dataplane(p));
        if (alignment) {
          EXPECT_EQ((uintptr_t)p % alignment, 0u);
        }
        const size_t usable = malloc_usable_size(p);
        ASSERT_GE(usable, size);
        EXPECT_TRUE(AllBacked(p, usable));
        const Claim claim = ClaimOf(p);
        const size_t bound = StepUp(nic_dp_huge_segment_bound(size, alignment));
        EXPECT_LE((uintptr_t)p + usable - claim.start, nic_dp_huge_segment_bound(size, alignment))
            << "mimalloc's segment is larger than the bound";
        EXPECT_EQ(BackedIn(claim.start + bound, claim.len > bound ? claim.len - bound : 0), 0u);
        if (zero) {
          size_t nonzero = 0;
          for (size_t i = 0; i < size; i += 4096)
            nonzero += p[i] != 0;
          EXPECT_EQ(nonzero, 0u);
        }
        p[usable - 1] = 1;
        free(p);
      }
}

// Alignments mimalloc refuses (over 16 MiB) are cut from a larger dataplane block (mapped.h),
// itself over 16 MiB: every byte handed out is backed.
TEST(DpHuge, BlocksAlignedPast16MiBAreBackedWhole) {
  for (size_t alignment : {32 * kMiB, 64 * kMiB})
    for (size_t size : {4096 * size_t{1}, 17 * kMiB}) {
      SCOPED_TRACE(testing::Message() << "size " << size << " alignment " << alignment);
      ReleaseIdleSteps();
      char *p = static_cast<char *>(nic_aligned_alloc(alignment, size));
      ASSERT_NE(p, nullptr);
      ASSERT_TRUE(nic_is_dataplane(p));
      EXPECT_EQ((uintptr_t)p % alignment, 0u);
      const size_t usable = malloc_usable_size(p);
      ASSERT_GE(usable, size);
      EXPECT_TRUE(AllBacked(p, usable));
      memset(p, 0x3c, usable);
      free(p);
    }
}

// Under NICMALLOC_DP_MIN_SIZE malloc's inline dataplane path serves what it can; blocks over
// 16 MiB leave it for the path that cuts their commit.
TEST(DpHuge, MallocRoutedByTheSizeRulePinsNoMoreThanNicMalloc) {
  free(malloc(2 * kMiB)); // a heap in the cursor chunk: the inline path is open
  ReleaseIdleSteps();
  char *p = static_cast<char *>(malloc(17 * kMiB));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(nic_is_dataplane(p)) << "run under NICMALLOC_DP_MIN_SIZE";
  const Claim claim = ClaimOf(p);
  EXPECT_LE(BackedIn(claim.start, claim.len), 17 * kMiB + StepSize());
  EXPECT_TRUE(AllBacked(p, malloc_usable_size(p)));
  free(p);
}

// The claim's tail was never committed: once the block is gone, other segments take those arena
// blocks and commit (so back) what they use there.
TEST(DpHuge, TheClaimsTailServesLaterBlocks) {
  ReleaseIdleSteps();
  std::vector<char *> blocks;
  for (int i = 0; i < 6; i++) {
    char *p = static_cast<char *>(nic_malloc(17 * kMiB));
    ASSERT_NE(p, nullptr);
    blocks.push_back(p);
  }
  for (char *p : blocks)
    free(p);
  blocks.clear();
  for (int i = 0; i < 24; i++) {
    char *p = static_cast<char *>(nic_malloc(5 * kMiB + 4096 * i));
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(AllBacked(p, malloc_usable_size(p)));
    memset(p, i, malloc_usable_size(p));
    blocks.push_back(p);
  }
  for (int i = 0; i < 24; i++) {
    const size_t usable = malloc_usable_size(blocks[i]);
    EXPECT_EQ(blocks[i][0], (char)i);
    EXPECT_EQ(blocks[i][usable - 1], (char)i);
    free(blocks[i]);
  }
}

// dataplane_live walks a chunk's segments, each at the start of an arena block. A huge segment
// ends inside its claim's last 32 MiB (40 MiB of block: 64 MiB claimed), and the walk went on
// from its end, reading the next segments' headers at the wrong offsets: with a 200 MiB block
// after a 40 MiB one it read their bytes as page headers and counted 2^48 bytes live.
TEST(DpHuge, LiveBytesCountEveryBlockAfterAHugeSegmentThatEndsInsideItsClaim) {
  ReleaseIdleSteps();
  const size_t before = Stats().dataplane_live;
  std::vector<std::pair<char *, size_t>> blocks;
  size_t usable_sum = 0;
  for (size_t size : {40 * kMiB, 200 * kMiB, 17 * kMiB + 4096, 3 * kMiB}) {
    char *p = static_cast<char *>(nic_malloc(size));
    ASSERT_NE(p, nullptr) << size;
    const size_t usable = malloc_usable_size(p);
    memset(p, 0x5a, usable); // bytes that read as anything but a header
    blocks.emplace_back(p, usable);
    usable_sum += usable;
  }
  const size_t live = Stats().dataplane_live - before;
  EXPECT_GE(live, usable_sum);
  EXPECT_LE(live, usable_sum + 4 * kMiB) << "blocks counted that are not there";
  for (auto &b : blocks)
    free(b.first);
  EXPECT_LE(Stats().dataplane_live, before + 4 * kMiB);
}

size_t RecordSegment(uintptr_t segment, void *arg) {
  static_cast<std::vector<uintptr_t> *>(arg)->push_back(segment);
  return 1;
}

// The decommit's walk of a thread's segments (mi_decommit.h, the nudge's) stepped over a huge
// segment by its length as well, and then probed every later arena block off its boundary:
// segments after a huge one that ends inside its claim were never decommitted.
TEST(DpHuge, TheSegmentWalkFindsSegmentsAfterAHugeSegmentThatEndsInsideItsClaim) {
  char *huge = static_cast<char *>(nic_malloc(40 * kMiB));
  ASSERT_NE(huge, nullptr);
  const Claim claim = ClaimOf(huge);
  ASSERT_EQ(claim.len, 2 * kArenaBlock);
  std::vector<char *> blocks; // large pages of normal segments, until one lies past the claim
  uintptr_t after = 0;
  for (int i = 0; i < 64 && !after; i++) {
    char *p = static_cast<char *>(nic_malloc(5 * kMiB));
    ASSERT_NE(p, nullptr);
    blocks.push_back(p);
    if ((uintptr_t)p > claim.start + claim.len && nic_chunk_index(p) == nic_chunk_index(huge))
      after = (uintptr_t)p & ~(kArenaBlock - 1);
  }
  ASSERT_NE(after, 0u) << "no segment of this thread's past the huge block's claim";
  std::vector<uintptr_t> seen;
  nic_mi_each_owned_segment(nic_chunk_index(huge), RecordSegment, &seen);
  EXPECT_NE(std::find(seen.begin(), seen.end(), after), seen.end())
      << "the segment at " << std::hex << after << " after the claim at " << claim.start
      << " was not walked";
  for (char *p : blocks)
    free(p);
  free(huge);
}

TEST(DpHuge, DoubleFreeIsReportedAndTheBlockIsHandedOutOnce) {
  const uint64_t doubles = Stats().double_frees;
  char *p = static_cast<char *>(nic_malloc(17 * kMiB));
  ASSERT_NE(p, nullptr);
  free(p);
  free(p); // reported on stderr, ignored
  EXPECT_EQ(Stats().double_frees, doubles + 1);
  char *a = static_cast<char *>(nic_malloc(17 * kMiB));
  char *b = static_cast<char *>(nic_malloc(17 * kMiB));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  free(a);
  free(b);
}

TEST(DpHuge, ReallocGrowsAndShrinksKeepingTheBytes) {
  char *p = static_cast<char *>(nic_malloc(17 * kMiB));
  ASSERT_NE(p, nullptr);
  for (size_t i = 0; i < 17 * kMiB; i += 4096)
    p[i] = (char)(i >> 12);
  char *q = static_cast<char *>(realloc(p, 40 * kMiB));
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(nic_is_dataplane(q));
  EXPECT_GE(malloc_usable_size(q), 40 * kMiB);
  EXPECT_TRUE(AllBacked(q, malloc_usable_size(q)));
  size_t wrong = 0;
  for (size_t i = 0; i < 17 * kMiB; i += 4096)
    wrong += q[i] != (char)(i >> 12);
  EXPECT_EQ(wrong, 0u);
  q[40 * kMiB - 1] = 1;
  char *r = static_cast<char *>(realloc(q, 18 * kMiB));
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(AllBacked(r, malloc_usable_size(r)));
  for (size_t i = 0; i < 17 * kMiB; i += 4096)
    wrong += r[i] != (char)(i >> 12);
  EXPECT_EQ(wrong, 0u);
  free(r);
}

} // namespace
