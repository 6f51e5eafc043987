// Requests below the minimum block (block.h: 16 bytes, room for the free key in word 1) take
// their own branch of malloc's fast path (alloc_inline.h nic_alloc_auto): they must still get a
// whole 16-byte, 16-byte aligned block with word 1 cleared, and their frees must take the fast
// path again, not look like double frees of the block's previous life.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "nicmalloc.h"

namespace {

constexpr size_t kMinBlock = 16;
constexpr int kRounds = 64;

uint64_t bad_frees() {
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s.double_frees + s.invalid_frees;
}

void expect_whole_block(void *p, size_t size, const char *via) {
  ASSERT_NE(p, nullptr) << via << "(" << size << ")";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kMinBlock, 0u) << via << "(" << size << ")";
  EXPECT_GE(malloc_usable_size(p), kMinBlock) << via << "(" << size << ")";
  uint64_t word1;
  std::memcpy(&word1, static_cast<char *>(p) + 8, sizeof word1);
  EXPECT_EQ(word1, 0u) << via << "(" << size << "): word 1 not cleared";
}

// Blocks freed with the key in word 1 come back from mimalloc's free list to the next request of
// their size: each round frees them and asks again.
TEST(SmallRequests, MallocGivesWholeClearedBlocks) {
  const uint64_t before = bad_frees();
  for (size_t size = 0; size <= kMinBlock + 1; size++) {
    for (int round = 0; round < kRounds; round++) {
      std::vector<void *> blocks;
      for (int i = 0; i < 8; i++) {
        void *p = malloc(size);
        expect_whole_block(p, size, "malloc");
        if (p) std::memset(p, 0xa5, size);
        blocks.push_back(p);
      }
      for (void *p : blocks)
        free(p);
    }
  }
  EXPECT_EQ(bad_frees(), before) << "a live small block was taken for a freed one";
}

TEST(SmallRequests, CallocAndNewGiveWholeBlocks) {
  const uint64_t before = bad_frees();
  for (size_t size = 0; size < kMinBlock; size++) {
    for (int round = 0; round < kRounds; round++) {
      void *c = calloc(1, size);
      expect_whole_block(c, size, "calloc");
      void *n = ::operator new(size);
      expect_whole_block(n, size, "operator new");
      free(c);
      ::operator delete(n);
    }
  }
  EXPECT_EQ(bad_frees(), before);
}

// A small block freed twice is still refused on the second free.
TEST(SmallRequests, DoubleFreeOfSmallBlockIsRefused) {
  for (size_t size : {size_t(0), size_t(1), size_t(8), size_t(15)}) {
    void *p = malloc(size);
    ASSERT_NE(p, nullptr);
    void *keep = malloc(size); // keeps p's page in use after the first free
    const uint64_t before = bad_frees();
    free(p);
    testing::internal::CaptureStderr(); // the report of the second free
    free(p);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(bad_frees(), before + 1) << "size " << size;
    EXPECT_NE(err.find("double free"), std::string::npos) << err;
    free(keep);
  }
}

} // namespace
