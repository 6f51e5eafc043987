// The spans free's fast paths compare with (alloc/base/fast_spans.h) are 0 while a watcher of
// frees holds anything: a watcher that added to the watch word and returned must find every span
// that concerns it at 0, whatever other watchers add and take away at the same moment, and the
// spans come back once every watcher let go. The test's own malloc is nicmalloc (the layers are
// linked in), so the spans read are the ones its frees use.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

extern "C" {
#include "events.h"
#include "fast_spans.h"
#include "nicmalloc.h"
}

namespace {

// Frees that find the spans open: blocks and ranges watchers (each with its own share) come and
// go on every thread, each checking right after its addition that its spans are closed.
TEST(FastSpans, AWatcherFindsFreesFastPathsClosedUntilEveryWatcherLetsGo) {
  void *block = nic_malloc(64); // reserves the dataplane range: its span is set
  ASSERT_NE(block, nullptr);
  free(malloc(64)); // the control arena is in use: the commit map is proven
  const size_t control = nic_fast_span(NIC_FAST_CONTROL);
  const size_t dataplane = nic_fast_span(NIC_FAST_DATAPLANE);
  ASSERT_NE(control, 0u) << "the commit map was not trusted: nothing to close";
  ASSERT_NE(dataplane, 0u);

  constexpr int kThreads = 4;
  constexpr int kRounds = 300000;
  std::atomic<long> open_under_blocks{0}, open_under_ranges{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      const bool blocks = t % 2 == 0;
      for (int i = 0; i < kRounds; i++) {
        if (blocks) {
          nic_watch_blocks(1);
          if (nic_fast_span(NIC_FAST_CONTROL) || nic_fast_span(NIC_FAST_UNCHECKED) ||
              nic_fast_span(NIC_FAST_DATAPLANE))
            open_under_blocks++;
          nic_watch_blocks(-1);
        } else {
          nic_watch_ranges(1);
          if (nic_fast_span(NIC_FAST_CONTROL) || nic_fast_span(NIC_FAST_UNCHECKED))
            open_under_ranges++;
          nic_watch_ranges(-1);
        }
        if (i % 64 == 0) free(malloc(32)); // frees through whatever path is open
      }
    });
  }
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(open_under_blocks.load(), 0);
  EXPECT_EQ(open_under_ranges.load(), 0);
  // Everyone let go: frees have their fast paths again.
  EXPECT_EQ(nic_fast_span(NIC_FAST_CONTROL), control);
  EXPECT_EQ(nic_fast_span(NIC_FAST_DATAPLANE), dataplane);
  free(block);
}

// A ranges watcher leaves dataplane frees on their fast path (a dataplane block is never in a
// registration cache); a blocks watcher closes it.
TEST(FastSpans, OnlyABlocksWatcherClosesTheDataplaneSpan) {
  void *block = nic_malloc(64);
  ASSERT_NE(block, nullptr);
  const size_t dataplane = nic_fast_span(NIC_FAST_DATAPLANE);
  ASSERT_NE(dataplane, 0u);
  nic_watch_ranges(1);
  EXPECT_EQ(nic_fast_span(NIC_FAST_CONTROL), 0u);
  EXPECT_EQ(nic_fast_span(NIC_FAST_DATAPLANE), dataplane);
  nic_watch_blocks(1);
  EXPECT_EQ(nic_fast_span(NIC_FAST_DATAPLANE), 0u);
  nic_watch_ranges(-1);
  EXPECT_EQ(nic_fast_span(NIC_FAST_CONTROL), 0u); // the blocks watcher still holds
  nic_watch_blocks(-1);
  EXPECT_NE(nic_fast_span(NIC_FAST_CONTROL), 0u);
  EXPECT_EQ(nic_fast_span(NIC_FAST_DATAPLANE), dataplane);
  free(block);
}

} // namespace
