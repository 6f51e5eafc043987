// The busy count the reaper waits on before it releases a chunk (alloc/heap/dp_heap.h): the
// inline dataplane path marks it with two stores, which only an outermost call may do. A call
// nested in another dataplane call (a signal handler's malloc while the thread is inside
// mimalloc on dataplane memory) must leave the outer call's mark in place, or the reaper could
// release a chunk the outer call is still allocating from.
#include <gtest/gtest.h>

#include <mimalloc.h>

#include <cstdlib>

extern "C" {
#include "dp_heap.h"
#include "nicmalloc.h"
#include "thread.h"
}

namespace {

TEST(DpBusy, ANestedDataplaneMallocKeepsTheOuterCallsMark) {
  free(nic_malloc(64)); // the thread set up, its cursor on a chunk: the inline path is open
  struct nic_thread *t = &nic_self;
  ASSERT_NE(t->dp_fast_below, 0u);
  ASSERT_EQ(t->dp_busy, 0u);
  nic_dp_enter(t); // as an outer dataplane call does
  void *p = nic_malloc(64);
  EXPECT_EQ(t->dp_busy, 1u);
  nic_dp_leave(t);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(nic_is_dataplane(p));
  EXPECT_EQ(t->dp_busy, 0u);
  free(p);
  // And an outermost call leaves it at zero.
  free(nic_malloc(64));
  EXPECT_EQ(t->dp_busy, 0u);
}

} // namespace
