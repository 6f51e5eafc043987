// Free protection on the sim backend with slow, randomized DMA: a block freed right after post
// reaches the receiver intact and is reused only after its completion, from any thread; holds
// keep received buffers alive. Correctness is judged from the bytes the receiver gets.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <mimalloc.h> // before chunks.h: its C++ parts cannot sit in extern "C"

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "block.h"
#include "chunks.h"
#include "safety.h"
#include "sim_nic.h"
#include "thread.h"
}

#include "sim_endpoint_fixture.h"

namespace {

struct Done {
  std::atomic<int> n{0}, failed{0};
};
void OnDone(void *arg, int status) {
  auto *d = static_cast<Done *>(arg);
  if (status) d->failed++;
  d->n++;
}
void WaitFor(const Done &d, int n) {
  while (d.n.load() < n) {
    nic_poll(0);
    std::this_thread::yield();
  }
}

void PostOne(nic_endpoint *ep, const void *p, size_t len, Done *done) {
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  ASSERT_EQ(nic_sga_add(&sga, p, len), 0);
  ASSERT_EQ(nic_sga_post(&sga, ep, OnDone, done), 0);
}

class FreeProtection : public SimEndpointTest {
protected:
  void TearDown() override {
    SimEndpointTest::TearDown();
    EXPECT_EQ(Stats().inflight_entries, 0u);
  }
  // A block freed right after post is neither written nor reused until the DMA is done.
  void FreeAfterPost(char *p, size_t size) {
    memset(p, 'A', size);
    Done done;
    nic_sim_pause(nic_backend_active(), true);
    PostOne(ep, p, size, &done);
    const uint64_t deferred = Stats().deferred_frees;
    free(p);
    EXPECT_EQ(Stats().deferred_frees, deferred + 1);
    EXPECT_FALSE(nic_block_is_free(p)) << "not even the free key is written while in flight";
    std::vector<char *> others;
    for (int i = 0; i < 64; i++) {
      char *q = static_cast<char *>(nic_is_dataplane(p) ? nic_malloc(size) : malloc(size));
      EXPECT_NE(q, p) << "an in-flight block was handed out again";
      memset(q, 'B', size);
      others.push_back(q);
    }
    nic_sim_pause(nic_backend_active(), false);
    WaitFor(done, 1);
    EXPECT_TRUE(nic_block_is_free(p)) << "freed for real by the completion"; // before any malloc
    ASSERT_EQ(inbox.msgs.size(), 1u);
    EXPECT_EQ(inbox.msgs[0], std::string(size, 'A'));
    EXPECT_EQ(Stats().deferred_pending, 0u);
    for (char *q : others)
      free(q);
  }
};

TEST_F(FreeProtection, DataplaneBlockFreedAfterPost) {
  FreeAfterPost(static_cast<char *>(nic_malloc(8192)), 8192);
}

TEST_F(FreeProtection, ControlBlockFreedAfterPost) {
  FreeAfterPost(static_cast<char *>(malloc(8192)), 8192);
}

TEST_F(FreeProtection, DeleteOfAnInFlightObjectIsDeferredToo) {
  auto *v = new std::vector<char>(); // the vector's storage is what gets posted
  v->assign(5000, 'V');
  Done done;
  nic_sim_pause(nic_backend_active(), true);
  PostOne(ep, v->data(), v->size(), &done);
  const uint64_t deferred = Stats().deferred_frees;
  delete v;
  EXPECT_EQ(Stats().deferred_frees, deferred + 1);
  nic_sim_pause(nic_backend_active(), false);
  WaitFor(done, 1);
  EXPECT_EQ(inbox.msgs.at(0), std::string(5000, 'V'));
}

TEST_F(FreeProtection, DoubleFreeOfADeferredBlockIsReportedOnce) {
  char *p = static_cast<char *>(nic_malloc(4096));
  memset(p, 'D', 4096);
  Done done;
  nic_sim_pause(nic_backend_active(), true);
  PostOne(ep, p, 4096, &done);
  free(p);
  const uint64_t doubles = Stats().double_frees;
  testing::internal::CaptureStderr();
  free(p);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(Stats().double_frees, doubles + 1);
  EXPECT_NE(err.find("double free"), std::string::npos) << err;
  nic_sim_pause(nic_backend_active(), false);
  WaitFor(done, 1);
  EXPECT_EQ(inbox.msgs.at(0), std::string(4096, 'D'));
  EXPECT_EQ(Stats().double_frees, doubles + 1) << "and freed once";
}

// A second free of a deferred block at each step of the retry that makes the real free: it must
// be reported and refused, and mimalloc must get the block once. A block mimalloc got twice is on
// its free list twice (linked to itself): malloc then hands it out twice in a row.
class DeferredRetry : public FreeProtection {
protected:
  static inline std::atomic<void *> block{nullptr};
  static inline std::atomic<int> phase{-1};
  static inline std::atomic<int> ran{0};
  static inline std::function<void(void *)> action;
  // The action plays the program's next call on this thread: in the program's own scope, not in
  // the one nic_poll's work runs in (where malloc takes nicmalloc's heap, not the program's).
  static void Hook(nic_retry_phase at, void *const *blocks, unsigned n) {
    for (unsigned i = 0; i < n; i++)
      if (blocks[i] == block.load() && (int)at == phase.load() && !ran.exchange(1)) {
        const int internal = nic_internal_suspend();
        action(blocks[i]);
        nic_internal_resume(internal);
      }
  }
  // Posts a control block of `size`, frees it while in flight, and runs `act` on it at `at`.
  void FreeTwiceAt(nic_retry_phase at, size_t size, std::function<void(void *)> act,
                   uint64_t want_doubles) {
    char *p = static_cast<char *>(malloc(size));
    ASSERT_NE(p, nullptr);
    memset(p, 'R', size);
    Done done;
    nic_sim_pause(nic_backend_active(), true);
    PostOne(ep, p, size, &done);
    free(p);
    ASSERT_TRUE(nic_safety_is_deferred(p));
    const nic_stats before = Stats();
    block = p;
    phase = at;
    ran = 0;
    action = std::move(act);
    nic_safety_retry_hook = Hook;
    testing::internal::CaptureStderr();
    nic_sim_pause(nic_backend_active(), false);
    WaitFor(done, 1);
    while (Stats().deferred_pending != before.deferred_pending - 1)
      nic_poll(0);
    nic_safety_retry_hook = nullptr;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(ran.load(), 1) << "the retry never reached the step";
    EXPECT_EQ(Stats().double_frees - before.double_frees, want_doubles) << err;
    EXPECT_EQ(err.find("double free") != std::string::npos, want_doubles != 0) << err;
    EXPECT_EQ(inbox.msgs.at(0), std::string(size, 'R'));
    // mimalloc's view: no block of this size is handed out twice.
    std::vector<void *> got;
    for (int i = 0; i < 256; i++)
      got.push_back(malloc(size));
    std::vector<void *> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
        << "mimalloc handed a block out twice: it was freed twice";
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end()); // each freed once
    for (void *q : sorted)
      free(q);
  }
};

// Without the record counting as an interest in frees, this free took the fast path straight to
// mimalloc: the completion had cleared the block's pages and nothing else was posted.
TEST_F(DeferredRetry, ASecondFreeAfterThePagesClearedIsReported) {
  FreeTwiceAt(
      NIC_RETRY_TAKEN, 20000, [](void *p) { free(p); }, 1);
}

// The key is written and the record used to be gone: the key's confirmation asked mimalloc, which
// still held the block live, and the free went through.
TEST_F(DeferredRetry, ASecondFreeBeforeTheRealFreeIsReported) {
  FreeTwiceAt(
      NIC_RETRY_KEYED, 20000, [](void *p) { free(p); }, 1);
}

TEST_F(DeferredRetry, ASecondFreeAfterTheRealFreeIsReported) {
  FreeTwiceAt(
      NIC_RETRY_RELEASED, 20000, [](void *p) { free(p); }, 1);
}

// The address handed out again while the record is still in the table: a new block, freed (and
// posted) as any other, never taken for the one before it.
TEST_F(DeferredRetry, TheAddressHandedOutAgainIsANewBlock) {
  bool reused = false;
  int add = 1;
  FreeTwiceAt(
      NIC_RETRY_RELEASED, 20000,
      [&](void *p) {
        std::vector<void *> others;
        for (int i = 0; i < 4096 && !reused; i++) {
          void *q = malloc(20000);
          if (q == p)
            reused = true;
          else
            others.push_back(q);
        }
        for (void *q : others)
          free(q);
        if (!reused) return;
        nic_sga sga;
        nic_sga_init(&sga, 0);
        add = nic_sga_add(&sga, p, 20000);
        nic_sga_reset(&sga);
        free(p);
      },
      0);
  EXPECT_TRUE(reused) << "malloc never handed the address out again";
  EXPECT_EQ(add, 0) << "the new block was taken for the freed one";
}

TEST_F(FreeProtection, BlockSharingAPageWithAnInFlightEntryIsDeferred) {
  char *a = static_cast<char *>(nic_malloc(1024));
  char *b = static_cast<char *>(nic_malloc(1024));
  if ((reinterpret_cast<uintptr_t>(a) >> 12) != (reinterpret_cast<uintptr_t>(b) >> 12))
    GTEST_SKIP() << "the two blocks landed on different pages";
  memset(a, 'a', 1024);
  Done done;
  nic_sim_pause(nic_backend_active(), true);
  PostOne(ep, a, 1024, &done);
  const uint64_t deferred = Stats().deferred_frees;
  free(b); // conservative: page granularity
  EXPECT_EQ(Stats().deferred_frees, deferred + 1);
  EXPECT_FALSE(nic_block_is_free(b));
  nic_sim_pause(nic_backend_active(), false);
  WaitFor(done, 1);
  EXPECT_TRUE(nic_block_is_free(b));
  free(a);
}

// What a free being deferred runs between finding its block's pages referenced and putting its
// record in the table, for defer_block: it waits there until defer_go (or 20 s pass, a deadline
// for a broken build).
std::atomic<const void *> defer_block{nullptr};
std::atomic<bool> defer_parked{false}, defer_go{false};
void DeferHook(const void *p) {
  if (p != defer_block.load()) return;
  defer_parked = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!defer_go.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A free of a block beside an entry in flight found the page referenced; before its record was
// in the table, the completion dropped the reference and looked for deferred frees, read their
// count (unlocked) before the free counted its record, and left. Nothing came back for the
// block until some later completion or release: with none, it stayed deferred, its page clear.
// The free looks at its pages again once its record is counted.
TEST_F(FreeProtection, AFreeRecordedAsTheCompletionLooksIsMadeAllTheSame) {
  ASSERT_EQ(Stats().deferred_pending, 0u) << "a free deferred earlier would be retried here";
  std::vector<char *> spare; // two blocks on one 4 KiB page: a, b
  char *a = nullptr, *b = nullptr;
  for (int i = 0; i < 64 && !b; i++) {
    char *p = static_cast<char *>(nic_malloc(1024));
    ASSERT_NE(p, nullptr);
    if (a && reinterpret_cast<uintptr_t>(p) >> 12 == reinterpret_cast<uintptr_t>(a) >> 12) {
      b = p;
    } else {
      if (a) spare.push_back(a);
      a = p;
    }
  }
  for (char *p : spare)
    free(p);
  ASSERT_NE(b, nullptr) << "no two blocks on one page";
  memset(a, 'a', 1024);
  Done done;
  nic_sim_pause(nic_backend_active(), true);
  PostOne(ep, a, 1024, &done);
  defer_block = b;
  defer_parked = false;
  defer_go = false;
  nic_safety_defer_hook = DeferHook;
  std::thread freer([b] { free(b); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!defer_parked.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(defer_parked.load()) << "the free of b was not deferred";
  nic_sim_pause(nic_backend_active(), false);
  WaitFor(done, 1); // the completion, its look for deferred frees included, is over
  defer_go = true;
  freer.join();
  nic_safety_defer_hook = nullptr;
  // Nothing is in flight or held any more, and no completion or release comes.
  EXPECT_FALSE(nic_safety_is_deferred(b)) << "b stayed deferred with its page clear";
  EXPECT_TRUE(nic_block_is_free(b));
  EXPECT_EQ(Stats().deferred_pending, 0u);
  free(a);
}

TEST_F(FreeProtection, ReallocOfAnInFlightBlockMovesByDefault) {
  char *p = static_cast<char *>(malloc(6000));
  memset(p, 'R', 6000);
  Done done;
  nic_sim_pause(nic_backend_active(), true);
  PostOne(ep, p, 6000, &done);
  char *q = static_cast<char *>(realloc(p, 6000));
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q, p) << "a block the NIC reads is not kept for the caller to write";
  memset(q, 'S', 6000);
  nic_sim_pause(nic_backend_active(), false);
  WaitFor(done, 1);
  EXPECT_EQ(inbox.msgs.at(0), std::string(6000, 'R'));
  free(q);
}

// Many posts with random delays; each buffer is freed right after its post and its memory
// reallocated and scribbled on at once. Every message must still arrive as it was posted.
TEST_F(FreeProtection, RandomDelaysFreeAfterEveryPost) {
  std::mt19937 rng(3);
  std::vector<std::string> sent;
  std::vector<char *> scribbled;
  Done done;
  for (int i = 0; i < 300; i++) {
    size_t size = 512 + rng() % 20000;
    char *p = static_cast<char *>(i % 2 ? nic_malloc(size) : malloc(size));
    for (size_t k = 0; k < size; k++)
      p[k] = static_cast<char>('a' + (i + k) % 26);
    sent.emplace_back(p, size);
    PostOne(ep, p, size, &done);
    free(p);
    char *q = static_cast<char *>(i % 2 ? nic_malloc(size) : malloc(size));
    memset(q, '#', size);
    scribbled.push_back(q);
    if (i % 16 == 0) nic_poll(0);
  }
  WaitFor(done, 300);
  EXPECT_EQ(done.failed.load(), 0);
  ASSERT_EQ(inbox.msgs.size(), sent.size());
  for (size_t i = 0; i < sent.size(); i++)
    EXPECT_EQ(inbox.msgs[i], sent[i]) << "message " << i;
  EXPECT_EQ(Stats().deferred_pending, 0u);
  for (char *q : scribbled)
    free(q);
}

// Posting threads hand each buffer to a freeing thread right after post, completions run on a
// polling thread or on the NIC's own, and other threads allocate and scribble meanwhile.
void ManyThreads(unsigned ep_flags) {
  std::atomic<long> bad{0}, received{0};
  auto check = [](void *arg, void *data, size_t len) {
    auto *b = static_cast<std::atomic<long> *>(arg);
    const unsigned char *d = static_cast<const unsigned char *>(data);
    for (size_t k = 1; k < len; k++)
      if (d[k] != static_cast<unsigned char>(d[0] + k)) {
        (*b)++;
        break;
      }
  };
  struct Ctx {
    std::atomic<long> *bad, *received;
    void (*check)(void *, void *, size_t);
  } ctx{&bad, &received, check};
  nic_endpoint *ep = nic_sim_endpoint_create(
      [](void *arg, void *data, size_t len) {
        auto *c = static_cast<Ctx *>(arg);
        c->check(c->bad, data, len);
        (*c->received)++;
      },
      &ctx, ep_flags);
  ASSERT_NE(ep, nullptr);
  constexpr int kPosters = 3, kPerPoster = 200;
  std::mutex mu;
  std::deque<char *> to_free;
  std::atomic<bool> posting{true};
  Done done;
  std::vector<std::thread> threads;
  for (int t = 0; t < kPosters; t++)
    threads.emplace_back([&, t] {
      std::mt19937 rng(t + 1);
      for (int i = 0; i < kPerPoster; i++) {
        size_t size = 600 + rng() % 9000;
        auto *p = static_cast<unsigned char *>(rng() % 2 ? nic_malloc(size) : malloc(size));
        for (size_t k = 0; k < size; k++)
          p[k] = static_cast<unsigned char>(t * 31 + i + k);
        PostOne(ep, p, size, &done);
        std::lock_guard<std::mutex> g(mu);
        to_free.push_back(reinterpret_cast<char *>(p));
      }
    });
  std::thread freer([&] {
    for (;;) {
      char *p = nullptr;
      {
        std::lock_guard<std::mutex> g(mu);
        if (!to_free.empty()) p = to_free.front(), to_free.pop_front();
      }
      if (p) {
        free(p);
        char *q = static_cast<char *>(malloc(4096)); // reuse pressure
        memset(q, 0x5a, 4096);
        free(q);
      } else if (!posting.load()) {
        return;
      } else {
        std::this_thread::yield(); // two cores: leave room for the NIC's thread
      }
    }
  });
  std::thread poller([&] {
    while (done.n.load() < kPosters * kPerPoster) {
      nic_poll(0);
      std::this_thread::yield();
    }
  });
  for (auto &t : threads)
    t.join();
  posting = false;
  freer.join();
  poller.join();
  EXPECT_EQ(done.failed.load(), 0);
  EXPECT_EQ(received.load(), kPosters * kPerPoster);
  EXPECT_EQ(bad.load(), 0) << "a buffer was reused or written while in flight";
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  EXPECT_EQ(Stats().deferred_pending, 0u);
  EXPECT_EQ(Stats().inflight_entries, 0u);
}

TEST(FreeProtectionThreads, CompletionsFromAPollingThread) {
  ManyThreads(0);
}
TEST(FreeProtectionThreads, CompletionsOnTheNicThread) {
  ManyThreads(NIC_EP_ENGINE_COMPLETIONS);
}

// Threads post fresh blocks, free them at once (deferred) and poll, so the deferred frees are
// done while the other threads allocate: an address handed out again must never meet its old
// record (a false -NIC_EFREED at add, a false double free and a leak at free). Timing-dependent:
// before the fix, about 8 false answers per 40k posts, and this failed 2 runs of 3.
TEST(FreeProtectionThreads, AReusedAddressIsNeverTakenForItsDeferredPredecessor) {
  nic_endpoint *ep = nic_sim_endpoint_create(nullptr, nullptr, 0);
  ASSERT_NE(ep, nullptr);
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  std::atomic<int> efreed{0};
  auto poster = [&] {
    for (int i = 0; i < 15000; i++) {
      nic_sga sga;
      ASSERT_EQ(nic_sga_init(&sga, 0), 0);
      char *a = static_cast<char *>(nic_malloc(20000)), *b = static_cast<char *>(malloc(9000));
      memset(a, 1, 20000);
      memset(b, 2, 9000);
      if (nic_sga_add(&sga, a, 20000) == -NIC_EFREED) efreed++;
      if (nic_sga_add(&sga, b, 9000) == -NIC_EFREED) efreed++;
      if (sga.count) {
        EXPECT_EQ(nic_sga_post(&sga, ep, nullptr, nullptr), 0);
      }
      free(a);
      free(b);
      nic_poll(0);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; i++)
    threads.emplace_back(poster);
  for (auto &t : threads)
    t.join();
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(efreed.load(), 0);
  EXPECT_EQ(after.double_frees, before.double_frees);
  EXPECT_EQ(after.deferred_pending, 0u);
  EXPECT_EQ(after.dataplane_live, before.dataplane_live);
}

// ---- holds on received buffers ----
TEST_F(FreeProtection, HoldKeepsAReceivedBufferPastTheReceiveCall) {
  inbox.hold = true;
  std::string payload(3000, 'H');
  Done done;
  PostOne(ep, payload.data(), payload.size(), &done);
  WaitFor(done, 1);
  ASSERT_EQ(inbox.held.size(), 1u);
  char *rx = inbox.held[0];
  EXPECT_TRUE(nic_is_dataplane(rx)) << "received into dataplane memory";
  EXPECT_EQ(Stats().holds, 1u);
  EXPECT_EQ(Stats().recv_held_buffers, 1u) << "the endpoint keeps the buffer until the release";
  std::vector<char *> others;
  for (int i = 0; i < 32; i++) {
    others.push_back(static_cast<char *>(nic_malloc(3000)));
    EXPECT_NE(others.back(), rx);
    memset(others.back(), 'x', 3000);
  }
  EXPECT_EQ(std::string(rx, 3000), payload) << "held data intact";
  EXPECT_EQ(nic_release(rx), 0);
  EXPECT_EQ(Stats().holds, 0u);
  EXPECT_TRUE(nic_block_is_free(rx)) << "released: the buffer was freed";
  for (char *q : others)
    free(q);
}

TEST_F(FreeProtection, HoldsNestAndAnInteriorPointerHoldsTheBuffer) {
  inbox.hold = true;
  std::string payload(2000, 'N');
  Done done;
  PostOne(ep, payload.data(), payload.size(), &done);
  WaitFor(done, 1);
  ASSERT_EQ(inbox.held.size(), 1u);
  char *rx = inbox.held[0];
  ASSERT_EQ(nic_hold(rx + 100), 0);
  ASSERT_EQ(nic_release(rx), 0);
  EXPECT_FALSE(nic_block_is_free(rx)) << "still held through rx + 100";
  EXPECT_EQ(std::string(rx, 2000), payload);
  EXPECT_EQ(nic_release(rx + 100), 0);
  EXPECT_TRUE(nic_block_is_free(rx));
}

TEST(Holds, BadInput) {
  char *p = static_cast<char *>(nic_malloc(100));
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_release(p), -NIC_ENOHOLD);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no nic_hold"), std::string::npos) << err;
  ASSERT_EQ(nic_hold(p), 0);
  ASSERT_EQ(nic_hold(p), 0);
  EXPECT_EQ(nic_release(p), 0);
  EXPECT_EQ(nic_release(p), 0);
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_release(p), -NIC_ENOHOLD) << "one release per hold";
  int on_stack = 0;
  EXPECT_EQ(nic_hold(&on_stack), -EINVAL);
  EXPECT_EQ(nic_hold(nullptr), -EINVAL);
  const unsigned unmapped = nic_chunk_slots_used(); // reserved dataplane range, no chunk there
  ASSERT_FALSE(nic_chunk_readable(unmapped));
  EXPECT_EQ(nic_hold(static_cast<char *>(nic_chunk_base(unmapped)) + 4096), -EINVAL);
  err = testing::internal::GetCapturedStderr();
  // Each kind is said once: "no nic_hold" was said above, "not nicmalloc memory" now.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("not nicmalloc memory"), std::string::npos) << err;
  free(p);
  for (bool dataplane : {true, false}) { // a hold on a freed block would protect nothing
    char *gone = static_cast<char *>(dataplane ? nic_malloc(256) : malloc(256));
    free(gone);
    testing::internal::CaptureStderr();
    EXPECT_EQ(nic_hold(gone), -NIC_EFREED);
    err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err.find("no live block starts here") != std::string::npos, dataplane) << err;
  }
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.hold_errors - before.hold_errors, 6u) << "every call counted";
}

// Blocks nicmalloc maps itself (alloc/heap/mapped.h: alignments over 16 MiB, 1 GiB and more) take
// holds like any other, through any pointer into them, and their free waits for the release.
TEST(Holds, BlocksNicmallocMapsItselfCanBeHeld) {
  char *aligned = static_cast<char *>(aligned_alloc(size_t(64) << 20, 4096));
  char *big = static_cast<char *>(malloc(size_t(1) << 30));
  ASSERT_NE(aligned, nullptr);
  ASSERT_NE(big, nullptr);
  const uint64_t pending = Stats().deferred_pending;
  for (char *p : {aligned, big}) {
    p[0] = 'h';
    ASSERT_EQ(nic_hold(p + 100), 0);
    free(p);
    EXPECT_EQ(Stats().deferred_pending, pending + 1) << "the free waits for the release";
    EXPECT_EQ(p[0], 'h') << "still mapped while held";
    EXPECT_EQ(nic_release(p + 100), 0);
    EXPECT_EQ(Stats().deferred_pending, pending) << "released: the deferred free ran";
  }
}

} // namespace
