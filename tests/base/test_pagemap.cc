// The runtime's one page map (alloc/base/pagemap.h), on instances of its own: entries far apart
// land in their own leaves and read back, absent ranges read as empty without making tables, and
// threads that make the same tables at once all end up with the one that stays.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

extern "C" {
#include "pagemap.h"
}

namespace {

constexpr uintptr_t kGiB = uintptr_t{1} << 30, kTwoMiB = uintptr_t{2} << 20;
constexpr uintptr_t kPage = NIC_PAGE_SIZE;

// Addresses in different GiB, in different 2 MiB of one GiB, and at both ends of user space.
const uintptr_t kSparse[] = {0,
                             kPage,
                             3 * kGiB + 5 * kPage,
                             3 * kGiB + 7 * kTwoMiB + 511 * kPage,
                             (uintptr_t{1} << 40) + kTwoMiB - kPage,
                             NIC_USER_END - kPage};

TEST(PageMap, SparseEntriesReadBackAcrossLevels) {
  static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
  static const struct nic_pagemap map = NIC_PAGEMAP(root, 3, 32);
  uint32_t value = 1;
  for (uintptr_t a : kSparse) {
    ASSERT_NE(nic_pagemap_make(&map, a), nullptr) << std::hex << a;
    *nic_pagemap_u32(&map, a) = value++;
  }
  value = 1;
  for (uintptr_t a : kSparse) {
    EXPECT_EQ(*nic_pagemap_u32(&map, a), value) << std::hex << a;
    EXPECT_EQ(*nic_pagemap_u32(&map, a + kPage - 1), value) << "same page";
    value++;
  }
  // Neighbours are their own entries, zero.
  EXPECT_EQ(*nic_pagemap_u32(&map, 2 * kPage), 0u);
  EXPECT_EQ(*nic_pagemap_u32(&map, 3 * kGiB + 4 * kPage), 0u);
  EXPECT_EQ(*nic_pagemap_u32(&map, 3 * kGiB + 7 * kTwoMiB + 510 * kPage), 0u);
  // A 2 MiB next to a made one has no leaf of its own.
  EXPECT_EQ(nic_pagemap_u32(&map, 3 * kGiB + 8 * kTwoMiB), nullptr);
}

TEST(PageMap, WideEntriesAndBitmap) {
  static void *root64[NIC_PAGEMAP_ROOT_ENTRIES], *rootbits[NIC_PAGEMAP_ROOT_ENTRIES];
  static const struct nic_pagemap counts = NIC_PAGEMAP(root64, 3, 64);
  static const struct nic_pagemap bits = NIC_PAGEMAP(rootbits, 2, 1);
  EXPECT_EQ(nic_pagemap_leaf_bytes(&counts), 4096u);
  EXPECT_EQ(nic_pagemap_leaf_bytes(&bits), size_t{32} << 10);
  for (uintptr_t a : kSparse) {
    ASSERT_NE(nic_pagemap_make(&counts, a), nullptr);
    *nic_pagemap_u64(&counts, a) = (uint64_t{1} << 40) + a;
  }
  for (uintptr_t a : kSparse)
    EXPECT_EQ(*nic_pagemap_u64(&counts, a), (uint64_t{1} << 40) + a);

  // A run across a word, a leaf (GiB) and into the next: every page in it, none beside it.
  const uintptr_t start = 2 * kGiB - 70 * kPage, end = 2 * kGiB + 3 * kPage;
  ASSERT_TRUE(nic_pagemap_reserve(&bits, start, end));
  nic_pagemap_bits(&bits, start, end, true);
  for (uintptr_t a = start - 2 * kPage; a < end + 2 * kPage; a += kPage)
    EXPECT_EQ(nic_pagemap_bit(&bits, a), a >= start && a < end) << std::hex << a;
  nic_pagemap_bits(&bits, start + kPage, end - kPage, false);
  EXPECT_TRUE(nic_pagemap_bit(&bits, start));
  EXPECT_TRUE(nic_pagemap_bit(&bits, end - kPage));
  for (uintptr_t a = start + kPage; a < end - kPage; a += kPage)
    ASSERT_FALSE(nic_pagemap_bit(&bits, a)) << std::hex << a;
}

TEST(PageMap, AbsentRangesReadEmptyAndMakeNothing) {
  static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
  static const struct nic_pagemap map = NIC_PAGEMAP(root, 3, 32);
  uintptr_t next = 0;
  // Nothing made: a whole GiB is skipped at once.
  EXPECT_EQ(nic_pagemap_span(&map, 5 * kGiB + 123, &next), nullptr);
  EXPECT_EQ(next, 6 * kGiB);
  EXPECT_EQ(nic_pagemap_u32(&map, 5 * kGiB), nullptr);
  // Clearing bits or walking there makes no table.
  nic_pagemap_bits(&map, 5 * kGiB, 6 * kGiB, false);
  EXPECT_EQ(__atomic_load_n(&root[5], __ATOMIC_ACQUIRE), nullptr);
  // The GiB's middle table exists, this 2 MiB's leaf does not: skipped to the 2 MiB's end.
  ASSERT_NE(nic_pagemap_make(&map, 5 * kGiB), nullptr);
  EXPECT_EQ(nic_pagemap_span(&map, 5 * kGiB + 3 * kTwoMiB + kPage, &next), nullptr);
  EXPECT_EQ(next, 5 * kGiB + 4 * kTwoMiB);
  EXPECT_NE(nic_pagemap_span(&map, 5 * kGiB + kPage, &next), nullptr);
  EXPECT_EQ(next, 5 * kGiB + kTwoMiB);
  // Past user space: nothing there, nothing can be made, the walk ends.
  EXPECT_EQ(nic_pagemap_span(&map, NIC_USER_END, &next), nullptr);
  EXPECT_EQ(next, UINTPTR_MAX);
  EXPECT_EQ(nic_pagemap_make(&map, NIC_USER_END), nullptr);
  EXPECT_FALSE(nic_pagemap_reserve(&map, NIC_USER_END - kPage, NIC_USER_END + kPage));
  EXPECT_FALSE(nic_pagemap_reserve(&map, 7 * kGiB, 7 * kGiB));
  EXPECT_EQ(nic_pagemap_u32(&map, UINTPTR_MAX - kPage), nullptr);
}

// Threads make the same tables at the same moment and count into them: had any of them kept a
// table of its own, its counts would be lost.
TEST(PageMap, ConcurrentCreatorsShareOneTable) {
  static void *root[NIC_PAGEMAP_ROOT_ENTRIES];
  static const struct nic_pagemap map = NIC_PAGEMAP(root, 3, 64);
  constexpr int kThreads = 8, kRounds = 20;
  for (int round = 0; round < kRounds; round++) {
    // A fresh GiB each round, so that every round races on making both levels.
    const uintptr_t base = (uintptr_t{64} + round) * kGiB;
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) {
        }
        for (uintptr_t a = base; a < base + 4 * kTwoMiB; a += kTwoMiB / 2) {
          if (!nic_pagemap_make(&map, a)) std::abort();
          __atomic_add_fetch(nic_pagemap_u64(&map, a), 1, __ATOMIC_RELAXED);
        }
      });
    for (auto &t : threads)
      t.join();
    for (uintptr_t a = base; a < base + 4 * kTwoMiB; a += kTwoMiB / 2)
      ASSERT_EQ(*nic_pagemap_u64(&map, a), uint64_t{kThreads}) << "round " << round;
  }
}

TEST(PageMap, BitRuns) {
  size_t n;
  EXPECT_EQ(nic_bits_run(0, 64, &n), ~uint64_t{0});
  EXPECT_EQ(n, 64u);
  EXPECT_EQ(nic_bits_run(62, 5, &n), uint64_t{3} << 62);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(nic_bits_run(65, 3, &n), uint64_t{7} << 1);
  EXPECT_EQ(n, 3u);
}

} // namespace
