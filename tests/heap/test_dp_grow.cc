// DpGrow: a thread that maps a chunk for its request and finds the chunk's segments already
// taken by other threads (they scan without the growth lock) still gets dataplane memory. A
// 64 MiB chunk holds two mimalloc segments, so two racing threads can take all of it; the
// growth hook lets a thread of the test take them at that moment, every run.
#include <gtest/gtest.h>

#include <mimalloc.h>

#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "chunks.h"
#include "dp_heap.h"
#include "nicmalloc.h"

namespace {

// Another thread, alive until the test lets it go: mimalloc's segments belong to a thread, and
// an exited thread's segments would be reclaimed by the next one that needs a segment.
class Taker {
public:
  // Takes every segment chunk index has room for, as other threads' heaps would.
  void take(unsigned index) {
    thread_ = std::thread([this, index] {
      mi_heap_t *heap = mi_heap_new_in_arena(nic_chunk_at(index)->arena);
      std::vector<void *> blocks;
      while (heap) {
        void *b = mi_heap_malloc(heap, 1u << 20);
        if (!b) break;
        blocks.push_back(b);
      }
      std::unique_lock<std::mutex> lock(mu_);
      taken_ = blocks.size();
      done_taking_ = true;
      cv_.notify_all();
      cv_.wait(lock, [this] { return let_go_; });
      for (void *b : blocks)
        mi_free(b);
      if (heap) mi_heap_delete(heap);
    });
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_taking_; });
  }
  size_t let_go() {
    if (!thread_.joinable()) return 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      let_go_ = true;
    }
    cv_.notify_all();
    thread_.join();
    return taken_;
  }

private:
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_taking_ = false, let_go_ = false;
  size_t taken_ = 0;
};

Taker taker;
unsigned hooked_chunk = ~0u, hook_calls;

void take_first_fresh_chunk(unsigned index) {
  if (hook_calls++ == 0) {
    hooked_chunk = index;
    taker.take(index);
  }
}

TEST(DpGrow, AThreadThatLosesItsFreshChunkToOthersMapsAnother) {
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  if (before.chunks_created != 0) GTEST_SKIP() << "needs a process that mapped no chunk yet";

  nic_dp_grow_hook = take_first_fresh_chunk;
  void *p = nic_malloc(4096);
  nic_dp_grow_hook = nullptr;
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  const size_t taken = taker.let_go();

  ASSERT_NE(p, nullptr);
  ASSERT_GT(taken, 0u) << "the other thread took the fresh chunk's room";
  EXPECT_EQ(hooked_chunk, 0u);
  EXPECT_TRUE(nic_is_dataplane(p)) << "the request lost its dataplane placement";
  EXPECT_EQ(after.dataplane_fallbacks, before.dataplane_fallbacks);
  EXPECT_EQ(after.chunks_created, before.chunks_created + 2) << "one chunk taken, one more";
  EXPECT_EQ(hook_calls, 2u);
  free(p);
}

std::vector<std::unique_ptr<Taker>> takers;

void take_every_fresh_chunk(unsigned index) {
  takers.push_back(std::make_unique<Taker>());
  takers.back()->take(index);
}

// Growth gives up after a few chunks lost this way (as when the arena refuses for another
// reason), with the request served by the control heap, rather than mapping the whole range.
TEST(DpGrow, LosingEveryFreshChunkEndsInTheFallbackNotTheWholeRange) {
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  if (before.chunks_created != 0) GTEST_SKIP() << "needs a process that mapped no chunk yet";
  ASSERT_GT(before.chunks_max, 8u);

  nic_dp_grow_hook = take_every_fresh_chunk;
  void *p = nic_malloc(4096);
  nic_dp_grow_hook = nullptr;
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  for (auto &t : takers)
    EXPECT_GT(t->let_go(), 0u);

  ASSERT_NE(p, nullptr) << "served by the control heap";
  EXPECT_FALSE(nic_is_dataplane(p));
  EXPECT_EQ(after.dataplane_fallbacks, before.dataplane_fallbacks + 1);
  EXPECT_GT(after.chunks_created, 1u) << "a lost chunk is followed by another";
  EXPECT_LT(after.chunks_created, 8u) << "bounded";
  EXPECT_EQ(after.chunks_created, takers.size());
  free(p);
}

} // namespace
