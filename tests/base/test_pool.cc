// The runtime's one node pool (alloc/base/pool.h): distinct aligned nodes, recycled, blocks
// unmapped only by release, growth without the owner's lock, and its own lock when asked for.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

extern "C" {
#include "pool.h"
}

namespace {

// NIC_POOL_INIT and NIC_POOL_LOCKED are C initialisers; C++ spells them out.
struct nic_pool Pool(size_t node_size, bool locked = false) {
  struct nic_pool p = {};
  p.node_size = node_size;
  p.locked = locked;
  pthread_mutex_init(&p.lock, nullptr);
  return p;
}

bool Mapped(const void *p) {
  unsigned char in_core;
  return mincore(reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095}), 1,
                 &in_core) == 0;
}

TEST(Pool, DistinctAlignedNodesRecycledAndReleased) {
  struct nic_pool pool = Pool(40);
  std::set<char *> seen;
  std::vector<char *> nodes;
  for (int i = 0; i < 5000; i++) { // several 64 KiB blocks
    char *n = static_cast<char *>(nic_pool_get(&pool));
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(n) % 16, 0u);
    ASSERT_TRUE(seen.insert(n).second) << "node handed out twice";
    memset(n, 0xab, 40); // the whole node is the caller's
    nodes.push_back(n);
  }
  for (char *n : nodes) // no node overlaps the next: their bytes are intact
    for (int b = 0; b < 40; b++)
      ASSERT_EQ(static_cast<unsigned char>(n[b]), 0xab);
  nic_pool_put(&pool, nodes.back());
  EXPECT_EQ(nic_pool_get(&pool), nodes.back()) << "a returned node is used again";
  for (char *n : nodes)
    nic_pool_put(&pool, n);
  EXPECT_TRUE(Mapped(nodes.front()));
  nic_pool_release(&pool);
  for (char *n : nodes)
    ASSERT_FALSE(Mapped(n)) << "release leaves no block mapped";
  EXPECT_EQ(nic_pool_try_get(&pool), nullptr);
  void *again = nic_pool_get(&pool); // usable after release
  EXPECT_NE(again, nullptr);
  nic_pool_release(&pool);
}

TEST(Pool, TinyAndHugeNodes) {
  struct nic_pool tiny = Pool(1);
  void *a = nic_pool_get(&tiny), *b = nic_pool_get(&tiny);
  ASSERT_NE(a, nullptr);
  EXPECT_GE(static_cast<char *>(b) - static_cast<char *>(a), 16);
  nic_pool_release(&tiny);

  struct nic_pool huge = Pool(size_t{200} << 10); // bigger than a default block
  char *x = static_cast<char *>(nic_pool_get(&huge)), *y = static_cast<char *>(nic_pool_get(&huge));
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  memset(x, 1, size_t{200} << 10);
  memset(y, 2, size_t{200} << 10);
  EXPECT_EQ(x[(size_t{200} << 10) - 1], 1);
  nic_pool_release(&huge);
}

TEST(Pool, GrowsWithoutTheOwnersLock) {
  struct nic_pool pool = Pool(100);
  EXPECT_EQ(nic_pool_try_get(&pool), nullptr) << "an empty pool maps nothing on try_get";
  void *block = nic_pool_map_block(&pool);
  ASSERT_NE(block, nullptr);
  nic_pool_add_block(&pool, block);
  char *n = static_cast<char *>(nic_pool_try_get(&pool));
  ASSERT_NE(n, nullptr);
  EXPECT_GT(n, static_cast<char *>(block)); // after the block's header
  EXPECT_LT(n, static_cast<char *>(block) + (64 << 10));
  nic_pool_release(&pool);
  EXPECT_FALSE(Mapped(block));
}

// Its own lock: threads take and return nodes at once. A node handed to two threads at a time
// would have its owner's mark overwritten, and afterwards the free list would hold it twice.
TEST(Pool, LockedPoolServesThreads) {
  static struct nic_pool pool = Pool(64, true);
  constexpr int kThreads = 4, kRounds = 100000, kBatch = 8;
  std::atomic<bool> bad{false};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) {
      }
      volatile uint64_t *held[kBatch];
      for (int i = 0; i < kRounds; i++) {
        for (int k = 0; k < kBatch; k++) {
          held[k] = static_cast<volatile uint64_t *>(nic_pool_get(&pool));
          if (!held[k]) {
            bad = true;
            return;
          }
          held[k][1] = uint64_t(t) << 32 | unsigned(k);
        }
        for (int k = 0; k < kBatch; k++) {
          if (held[k][1] != (uint64_t(t) << 32 | unsigned(k))) bad = true;
          nic_pool_put(&pool, const_cast<uint64_t *>(held[k]));
        }
      }
    });
  for (auto &t : threads)
    t.join();
  EXPECT_FALSE(bad.load()) << "a node was handed to two threads at once";
  std::set<void *> free_nodes;
  for (void *n; (n = nic_pool_try_get(&pool));)
    ASSERT_TRUE(free_nodes.insert(n).second) << "a node is on the free list twice";
  nic_pool_release(&pool);
}

// The same, deterministically: while the lock is held, a get waits for it (the thread is seen
// asleep and has not returned), and returns once it is let go.
TEST(Pool, LockedPoolGetWaitsForTheLock) {
  static struct nic_pool pool = Pool(64, true);
  std::atomic<pid_t> tid{0};
  std::atomic<bool> returned{false};
  pthread_mutex_lock(&pool.lock);
  std::thread taker([&] {
    tid = static_cast<pid_t>(syscall(SYS_gettid));
    void *n = nic_pool_get(&pool);
    returned = true;
    nic_pool_put(&pool, n);
  });
  bool asleep = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!asleep && !returned && std::chrono::steady_clock::now() < deadline) {
    const pid_t t = tid.load();
    if (!t) continue;
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", int(t));
    if (FILE *f = fopen(path, "r")) {
      if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = 0;
      fclose(f);
    }
    asleep = state == 'S';
    if (!asleep) std::this_thread::yield();
  }
  EXPECT_FALSE(returned.load()) << "nic_pool_get did not wait for the pool's lock";
  EXPECT_TRUE(asleep);
  pthread_mutex_unlock(&pool.lock);
  taker.join();
  EXPECT_TRUE(returned.load());
  nic_pool_release(&pool);
}

} // namespace
