// What keeps a dataplane chunk from being given back under an allocation, now that the inline
// path marks nothing (alloc/heap/reaper.c): a chunk is released only when mimalloc holds no slice
// of it committed, and a commit into a released chunk is refused, so that an allocation that was
// under way when its chunk went back fails instead of writing there. And what brings a thread
// that is behind on the chunk states back to its slow path: the reaper closes its inline path.
// Internal headers, so the layers' objects are linked directly; the chunk states are changed
// here under the chunk lock, with the reaper's release delay long enough to leave them alone.
#include <gtest/gtest.h>

#include <mimalloc.h>

#include <cstdlib>

extern "C" {
#include "chunks.h"
#include "dp_heap.h"
#include "nicmalloc.h"
#include "steps.h"
#include "thread.h"
}

namespace {

unsigned chunk_of(const void *p) {
  return nic_chunk_index(p);
}

bool any_step_committed(unsigned index) {
  for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
    if (nic_step_committed(index, s)) return true;
  return false;
}

// A freed block's page stays in its thread's heap: mimalloc holds its slices committed, and the
// chunk must stay, whatever the live bytes say.
TEST(ChunkCommits, AChunkMimallocHoldsCommittedSlicesInIsNotReleased) {
  void *p = nic_malloc(64);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(nic_is_dataplane(p));
  const unsigned index = chunk_of(p);
  free(p);
  ASSERT_TRUE(any_step_committed(index));
  nic_chunks_lock();
  nic_chunk_set_state(index, NIC_CHUNK_DRAINING);
  const bool released = nic_chunk_release_locked(index);
  const int state = nic_chunk_at(index)->state;
  const bool first_step_backed = nic_step_backed(index, 0);
  nic_chunk_set_state(index, NIC_CHUNK_LIVE);
  nic_chunks_unlock();
  EXPECT_FALSE(released);
  EXPECT_EQ(state, NIC_CHUNK_DRAINING);
  EXPECT_TRUE(first_step_backed); // the steps it marked unbacked while it looked are back
  void *q = nic_malloc(64);       // and the chunk still serves
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(nic_is_dataplane(q));
  free(q);
}

// A thread read its heap in a chunk, the chunk went back, and only then did its allocation reach
// mimalloc (the inline path's window, stretched here). mimalloc commits before it touches the
// memory, and that commit maps the chunk again: the allocation lands in a live, backed chunk,
// where its free finds it, instead of in memory given back.
TEST(ChunkCommits, AnAllocationUnderWayWhenItsChunkIsReleasedMapsItAgain) {
  void *p = nic_malloc(64);
  ASSERT_NE(p, nullptr);
  const unsigned index = chunk_of(p);
  mi_heap_t *heap = nic_self.heaps[index];
  ASSERT_NE(heap, nullptr);
  free(p);
  // Everything mimalloc holds there goes: the heap's segments, then the segment cache.
  mi_heap_collect(heap, true);
  nic_collect_abandoned();
  ASSERT_FALSE(any_step_committed(index));
  nic_chunks_lock();
  nic_chunk_set_state(index, NIC_CHUNK_DRAINING);
  const bool released = nic_chunk_release_locked(index);
  nic_chunks_unlock();
  ASSERT_TRUE(released);
  ASSERT_EQ(nic_chunk_at(index)->state, NIC_CHUNK_RELEASED);

  void *late = mi_heap_malloc(heap, 64); // the allocation that was under way
  ASSERT_NE(late, nullptr);
  ASSERT_EQ(chunk_of(late), index);
  EXPECT_EQ(nic_chunk_at(index)->state, NIC_CHUNK_LIVE);
  EXPECT_TRUE(nic_step_backed(index, nic_step_index(late)));
  EXPECT_TRUE(nic_chunk_readable(index));
  struct nic_stats before = {}, after = {};
  before.size = after.size = sizeof before;
  ASSERT_EQ(nic_get_stats(&before), 0);
  ((uintptr_t *)late)[1] = 0; // live, as nic_malloc hands blocks out
  free(late);
  ASSERT_EQ(nic_get_stats(&after), 0);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees);

  void *next = nic_malloc(64);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(nic_is_dataplane(next));
  EXPECT_EQ(nic_chunk_at(chunk_of(next))->state, NIC_CHUNK_LIVE);
  free(next);
}

// The reaper closes the inline path of a thread that has not seen the latest chunk epoch; its
// next dataplane allocation takes the slow path, catches up and opens it again.
TEST(ChunkCommits, AThreadBehindOnTheChunkStatesCatchesUpOnItsNextAllocation) {
  free(nic_malloc(64));
  struct nic_thread *t = &nic_self;
  ASSERT_NE(t->dp_small_span, 0u);
  const unsigned index = t->cursor;
  ASSERT_LT(index, (unsigned)NIC_CURSOR_PARKED);
  nic_chunks_lock();
  nic_chunk_set_state(index, NIC_CHUNK_LIVE); // a state change: the epoch moves
  nic_chunks_unlock();
  const unsigned epoch = __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
  ASSERT_NE(t->seen_epoch, epoch);
  nic_threads_nudge(epoch);
  EXPECT_EQ(t->dp_small_span, 0u);
  EXPECT_EQ(t->dp_fast_below, 0u);
  void *p = nic_malloc(64);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(nic_is_dataplane(p));
  EXPECT_EQ(t->seen_epoch, epoch);
  EXPECT_NE(t->dp_small_span, 0u);
  free(p);
}

// No block starts at a 32 MiB boundary (a mimalloc segment's header is there): free's fast path
// sends such a pointer to the general path, which reports it, instead of handing mi_free a
// pointer whose segment it would look for below the boundary.
TEST(ChunkCommits, AFreeAtASegmentBoundaryInsideAChunkIsReported) {
  void *p = nic_malloc(64);
  ASSERT_NE(p, nullptr);
  const unsigned index = chunk_of(p);
  char *boundary = (char *)nic_chunk_base(index) + ((size_t)32 << 20);
  ASSERT_TRUE(nic_is_dataplane(boundary));
  struct nic_stats before = {}, after = {};
  before.size = after.size = sizeof before;
  ASSERT_EQ(nic_get_stats(&before), 0);
  free(boundary);
  ASSERT_EQ(nic_get_stats(&after), 0);
  EXPECT_EQ(after.invalid_frees, before.invalid_frees + 1);
  free(p);
}

} // namespace
