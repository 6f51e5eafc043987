// The control arena's commit map (alloc/os/commit_map.h): it must see mimalloc's commits and
// decommits through the interposed mprotect and madvise, or the free check would read
// unmapped memory (a map that says "committed" too often) or reject live blocks (too rarely).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

extern "C" {
#include "commit_map.h"
}

namespace {

constexpr size_t kPage = 4096;

bool Committed(const void *p) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - nic_commit_map.base;
  return offset < nic_commit_map.checked && nic_commit_map_has(offset);
}

bool Readable(const void *p) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - nic_commit_map.base;
  return offset < nic_commit_map.checked && nic_commit_map_readable(offset);
}

bool Held(const void *p) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - nic_commit_map.base;
  return offset < nic_commit_map.checked && nic_commit_map_held(reinterpret_cast<uintptr_t>(p));
}

char *PageIn(char *block, size_t offset) {
  return reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(block) + offset) & ~(kPage - 1));
}

TEST(CommitMap, IsProvenAtStartUpAndCoversControlBlocks) {
  char *block = static_cast<char *>(malloc(2 << 20));
  ASSERT_NE(block, nullptr);
  block[0] = block[(2 << 20) - 1] = 1;
  // Zero here means mimalloc's mprotect did not reach nicmalloc: every free would then pay for
  // mimalloc's own lookup.
  ASSERT_GT(nic_commit_map.checked, 0u);
  EXPECT_TRUE(Committed(block));
  EXPECT_TRUE(Committed(block + (2 << 20) - 1));
  EXPECT_TRUE(Readable(block));
  // Far beyond anything this process has allocated, still inside the arena.
  char *far = PageIn(block, nic_commit_map.checked / 2);
  ASSERT_LT(reinterpret_cast<uintptr_t>(far) - nic_commit_map.base, nic_commit_map.checked);
  EXPECT_FALSE(Committed(far));
  EXPECT_FALSE(Readable(far));
  free(block);
}

TEST(CommitMap, FollowsDecommitCommitAndProtectionButNotReset) {
  char *block = static_cast<char *>(malloc(2 << 20));
  ASSERT_NE(block, nullptr);
  char *mid = PageIn(block, 1 << 20);
  const size_t len = 16 * kPage;
  // MADV_FREE is mimalloc's reset: the memory stays in use.
  ASSERT_EQ(madvise(mid, len, MADV_FREE), 0);
  EXPECT_TRUE(Committed(mid));
  ASSERT_EQ(madvise(mid, len, MADV_DONTNEED), 0);
  for (size_t off = 0; off < len; off += kPage) {
    EXPECT_FALSE(Committed(mid + off)) << off;
    EXPECT_TRUE(Readable(mid + off)) << off; // dropped pages read as zeros
  }
  EXPECT_TRUE(Committed(mid - 1));
  EXPECT_TRUE(Committed(mid + len));
  ASSERT_EQ(mprotect(mid, len, PROT_READ | PROT_WRITE), 0);
  for (size_t off = 0; off < len; off += kPage)
    EXPECT_TRUE(Committed(mid + off)) << off;
  ASSERT_EQ(mprotect(mid, len, PROT_NONE), 0);
  EXPECT_FALSE(Committed(mid));
  EXPECT_FALSE(Readable(mid));
  ASSERT_EQ(mprotect(mid, len, PROT_READ | PROT_WRITE), 0);
  EXPECT_TRUE(Committed(mid));
  EXPECT_TRUE(Readable(mid));
  // A failed call changes nothing.
  EXPECT_NE(madvise(mid + 1, len, MADV_DONTNEED), 0);
  EXPECT_TRUE(Committed(mid));
  free(block);
}

TEST(CommitMap, PagesRemappedAwayAreGone) {
  char *block = static_cast<char *>(malloc(2 << 20));
  ASSERT_NE(block, nullptr);
  char *mid = PageIn(block, 1 << 20);
  // Shrinking in place unmaps the tail page; mapping it again makes it readable, not ours.
  ASSERT_EQ(mremap(mid, 2 * kPage, kPage, 0), mid);
  EXPECT_TRUE(Readable(mid));
  EXPECT_FALSE(Readable(mid + kPage));
  EXPECT_FALSE(Committed(mid + kPage));
  ASSERT_EQ(mmap(mid + kPage, kPage, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            mid + kPage);
  EXPECT_FALSE(Readable(mid + kPage));
  ASSERT_EQ(mprotect(mid + kPage, kPage, PROT_READ | PROT_WRITE), 0); // as mimalloc commits
  EXPECT_TRUE(Committed(mid + kPage));
  free(block);
}

// One page of the committed table (a byte per arena page) covers 16 MiB of the arena: a change
// across the border of two such pages reaches both, and no page beyond it.
TEST(CommitMap, ChangesAcrossTablePagesReachEveryPage) {
  constexpr size_t kTableSpan = kPage * kPage;
  constexpr size_t kSize = 40 << 20;
  char *block = static_cast<char *>(malloc(kSize));
  ASSERT_NE(block, nullptr);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(block) - nic_commit_map.base;
  const uintptr_t border = (offset + (1 << 20) + kTableSpan - 1) / kTableSpan * kTableSpan;
  char *mid = reinterpret_cast<char *>(nic_commit_map.base + border);
  const size_t half = 8 * kPage;
  ASSERT_LE(mid + half, block + kSize);
  ASSERT_GE(mid - half, block);
  ASSERT_EQ(mprotect(mid - 2 * half, 4 * half, PROT_READ | PROT_WRITE), 0);
  ASSERT_EQ(madvise(mid - half, 2 * half, MADV_DONTNEED), 0);
  for (size_t off = 0; off < 2 * half; off += kPage)
    EXPECT_FALSE(Committed(mid - half + off)) << off;
  EXPECT_TRUE(Committed(mid - half - 1));
  EXPECT_TRUE(Committed(mid + half));
  ASSERT_EQ(mprotect(mid - half, 2 * half, PROT_READ | PROT_WRITE), 0);
  for (size_t off = 0; off < 2 * half; off += kPage)
    EXPECT_TRUE(Committed(mid - half + off)) << off;
  free(block);
}

TEST(CommitMap, RangesOutsideTheArenaAreIgnored) {
  uint8_t committed[64];
  for (size_t i = 0; i < 64; i++)
    committed[i] = __atomic_load_n(&nic_commit_map.committed[i], __ATOMIC_RELAXED);
  const uint64_t readable = __atomic_load_n(&nic_commit_map.readable[0], __ATOMIC_RELAXED);
  void *mapped =
      mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  nic_commit_map_note(mapped, 4 * kPage, NIC_PAGES_GONE);
  nic_commit_map_note(reinterpret_cast<char *>(nic_commit_map.base) - kPage, kPage, NIC_PAGES_GONE);
  for (size_t i = 0; i < 64; i++)
    EXPECT_EQ(__atomic_load_n(&nic_commit_map.committed[i], __ATOMIC_RELAXED), committed[i]) << i;
  EXPECT_EQ(__atomic_load_n(&nic_commit_map.readable[0], __ATOMIC_RELAXED), readable);
  munmap(mapped, 4 * kPage);
}

// malloc_trim walks the control arena's segments only as far as mimalloc ever committed: a walk
// of the whole arena (4 TiB) read the map every 32 MiB, and faulted in each page of the map on
// the way (32768 minor faults, about 25 ms, in a program that had hardly allocated).
TEST(CommitMap, MallocTrimWalksOnlyTheArenaMimallocCommittedIn) {
  char *block = static_cast<char *>(malloc(100));
  ASSERT_NE(block, nullptr);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(block) - nic_commit_map.base;
  EXPECT_GT(nic_commit_map.high, offset);
  EXPECT_LE(nic_commit_map.high, nic_commit_map.size);
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  malloc_trim(0);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_minflt - before.ru_minflt, 1024) << "arena of " << nic_commit_map.size;
  free(block);
}

// malloc_trim gives back the 4 KiB pages only free blocks cover inside mimalloc pages in use
// (alloc/heap/control_sub_pages.h): the map holds them and counts them committed no longer, so
// a free there asks whether its block was held back. Once every block of such a page was freed
// and mimalloc built the page anew, the first free there, on any thread, counts the pages
// committed again: without that, every free on them stayed off the fast path (about 30 times a
// fast free's time, measured) until the owner's next malloc_trim.
TEST(CommitMap, PagesMallocTrimGaveBackCountAsCommittedOnceTheirPageIsBuiltAnew) {
  constexpr int kBlocks = 32768, kKeepEvery = 64;
  std::vector<char *> blocks(kBlocks);
  for (auto &b : blocks) {
    b = static_cast<char *>(malloc(256));
    ASSERT_NE(b, nullptr);
    b[0] = 1;
  }
  for (int i = 0; i < kBlocks; i++)
    if (i % kKeepEvery) free(blocks[i]);
  malloc_trim(0);
  int held = 0;
  for (int i = 0; i < kBlocks; i++) {
    if (i % kKeepEvery == 0) {
      EXPECT_TRUE(Committed(blocks[i])) << i; // a live block's page stays
      EXPECT_FALSE(Held(blocks[i])) << i;
    } else if (Held(blocks[i])) {
      EXPECT_FALSE(Committed(blocks[i])) << i;
      held++;
    }
  }
  ASSERT_GT(held, kBlocks / 2) << "malloc_trim gave back no page inside pages in use";
  for (int i = 0; i < kBlocks; i += kKeepEvery)
    free(blocks[i]);
  // The pages empty and mimalloc builds them anew for blocks of the same size.
  std::vector<char *> again(kBlocks);
  int on_held = 0;
  for (auto &b : again) {
    b = static_cast<char *>(malloc(256));
    ASSERT_NE(b, nullptr);
    b[0] = 2;
    on_held += Held(b);
  }
  ASSERT_GT(on_held, kBlocks / 2) << "the blocks went elsewhere, not to the pages given back";
  // The first half freed by another thread (a producer's blocks freed by its consumer), the
  // rest by the owner.
  auto free_and_check = [](char **from, char **to) {
    for (char **b = from; b != to; b++) {
      const bool was_held = Held(*b);
      free(*b);
      if (was_held) {
        EXPECT_FALSE(Held(*b));
        EXPECT_TRUE(Committed(*b));
      }
    }
  };
  std::thread consumer(free_and_check, again.data(), again.data() + kBlocks / 2);
  consumer.join();
  free_and_check(again.data() + kBlocks / 2, again.data() + kBlocks);
}

} // namespace
