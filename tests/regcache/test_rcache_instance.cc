// Registration caches made with nic_rcache_create, each over a fake backend of its own that logs
// every registration and deregistration and fails or answers busy on demand: hits, merging,
// eviction by limit, exact invalidation across caches, busy deregistration, remote regions and
// destruction, each read from the fake's log. No sim NIC and not the process-wide cache.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

extern "C" {
#include "rcache.h"
}

namespace {

const size_t kPage = 4096;

struct Call {
  enum Kind { reg, dereg } kind;
  uintptr_t base;
  size_t len;
  unsigned access;
  uint32_t lkey;
  int rc;
};

// The ops table the caches register with. Keys are unique across fakes, so a key names one
// registration of one fake.
struct FakeBackend {
  nic_backend ops{};
  std::mutex mu;
  std::vector<Call> log;
  std::set<uint32_t> live;
  int fail_reg = 0; // reg answers this (a negative errno) while nonzero
  // A table of room registrations at most (none: no limit), past which reg answers
  // full_rc, as a backend out of slots, areas or MRs.
  size_t room = 0;
  int full_rc = -ENOSPC;
  bool busy = false; // dereg answers -EBUSY, as with a post in flight
  // Runs at each deregistration before it is logged, as a backend that frees or unmaps there.
  std::function<void()> on_dereg;
  // Deregistrations that began inside another of this backend's on the same thread: a real
  // backend holding its lock there (DPDK's) would wait on itself for good.
  std::atomic<int> reentered{0};
  static thread_local std::set<const FakeBackend *> inside;
  static uint32_t next_key;

  explicit FakeBackend(const char *name, size_t max_region = 16 << 20) {
    log.reserve(256);
    ops.name = name;
    ops.caps.max_region_bytes = max_region;
    ops.reg = [](nic_backend *b, void *base, size_t len, unsigned access, nic_registration *out) {
      auto *self = static_cast<FakeBackend *>(b->priv);
      std::lock_guard<std::mutex> lock(self->mu);
      const int fail =
          self->room && self->live.size() >= self->room ? self->full_rc : self->fail_reg;
      if (fail) {
        self->log.push_back({Call::reg, reinterpret_cast<uintptr_t>(base), len, access, 0, fail});
        return fail;
      }
      const bool remote = access & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE);
      *out = {base, len, access, next_key++, remote ? next_key : 0, 0};
      self->live.insert(out->lkey);
      self->log.push_back(
          {Call::reg, reinterpret_cast<uintptr_t>(base), len, access, out->lkey, 0});
      return 0;
    };
    ops.dereg = [](nic_backend *b, nic_registration *reg) {
      auto *self = static_cast<FakeBackend *>(b->priv);
      if (!inside.insert(self).second) self->reentered++;
      if (self->on_dereg) self->on_dereg();
      inside.erase(self);
      std::lock_guard<std::mutex> lock(self->mu);
      const int rc = self->busy ? -EBUSY : 0;
      self->log.push_back({Call::dereg, reinterpret_cast<uintptr_t>(reg->base), reg->len,
                           reg->access, reg->lkey, rc});
      if (rc == 0) {
        EXPECT_EQ(self->live.erase(reg->lkey), 1u) << "deregistered twice or never";
      }
      return rc;
    };
    ops.priv = this;
  }
  std::vector<Call> calls(Call::Kind kind) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Call> out;
    for (const Call &c : log)
      if (c.kind == kind) out.push_back(c);
    return out;
  }
  size_t regs() { return calls(Call::reg).size(); }
  bool registered(uint32_t lkey) {
    std::lock_guard<std::mutex> lock(mu);
    return live.count(lkey) != 0;
  }
};
uint32_t FakeBackend::next_key = 1;
thread_local std::set<const FakeBackend *> FakeBackend::inside;

class RcacheInstance : public ::testing::Test {
protected:
  void SetUp() override {
    mem_ = static_cast<char *>(
        mmap(nullptr, 64 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(mem_, MAP_FAILED);
    memset(mem_, 1, 64 * kPage);
  }
  void TearDown() override {
    for (nic_rcache *c : caches_)
      EXPECT_EQ(nic_rcache_destroy(c), 0) << "a test left a reference held";
    munmap(mem_, 64 * kPage);
  }
  // Never freed: a cache a failed assertion left behind may still call its backend.
  static FakeBackend &Fake(const char *name) { return *new FakeBackend(name); }
  nic_rcache *Make(FakeBackend &b, uint32_t max_regions = 8, size_t max_bytes = 64 << 20) {
    nic_rcache_params params{&b.ops, max_regions, max_bytes, b.ops.name};
    nic_rcache *c = nic_rcache_create(&params);
    EXPECT_NE(c, nullptr) << strerror(errno);
    if (c) caches_.push_back(c);
    return c;
  }
  nic_rcache_stats Stats(nic_rcache *c) {
    nic_rcache_stats s;
    nic_rcache_get_stats(c, &s);
    return s;
  }
  uintptr_t At(size_t page) { return reinterpret_cast<uintptr_t>(mem_ + page * kPage); }
  // A region of one page that only the cache holds: acquired and released again.
  nic_rcache_ref Cached(nic_rcache *c, size_t page) {
    nic_rcache_ref r{};
    EXPECT_EQ(nic_rcache_acquire(c, mem_ + page * kPage, kPage, NIC_ACCESS_LOCAL, &r), 0);
    nic_rcache_release(c, r.slot);
    return r;
  }
  char *mem_ = nullptr;
  std::vector<nic_rcache *> caches_;
};

TEST_F(RcacheInstance, ACoveredRangeIsAHitAndEachCacheRegistersOnItsOwnBackend) {
  FakeBackend &fa = Fake("a"), &fb = Fake("b");
  nic_rcache *a = Make(fa), *b = Make(fb);
  ASSERT_TRUE(a && b);
  const nic_rcache_stats process = Stats(nic_rcache_process());
  nic_rcache_ref r1, r2, r3;
  ASSERT_EQ(nic_rcache_acquire(a, mem_ + 100, 200, NIC_ACCESS_LOCAL, &r1), 0);
  ASSERT_EQ(nic_rcache_acquire(a, mem_ + 150, 50, NIC_ACCESS_LOCAL, &r2), 0);
  ASSERT_EQ(nic_rcache_find(a, mem_ + 8, 8, NIC_ACCESS_LOCAL, &r3), 0);
  ASSERT_EQ(fa.regs(), 1u) << "the second and third lookups were hits";
  EXPECT_EQ(fa.calls(Call::reg)[0].base, At(0)) << "page aligned";
  EXPECT_EQ(fa.calls(Call::reg)[0].len, kPage);
  EXPECT_EQ(r1.slot, r2.slot);
  EXPECT_EQ(r2.reg.lkey, r1.reg.lkey);
  EXPECT_EQ(Stats(a).hits, 2u);
  EXPECT_EQ(Stats(a).misses, 1u);
  EXPECT_EQ(fb.regs(), 0u) << "another cache's miss registered here";
  nic_rcache_ref other;
  ASSERT_EQ(nic_rcache_find(b, mem_ + 100, 200, NIC_ACCESS_LOCAL, &other), -ENOENT);
  ASSERT_EQ(nic_rcache_acquire(b, mem_ + 100, 200, NIC_ACCESS_LOCAL, &other), 0);
  ASSERT_EQ(fb.regs(), 1u);
  EXPECT_NE(other.reg.lkey, r1.reg.lkey);
  for (auto *r : {&r1, &r2, &r3})
    nic_rcache_release(a, r->slot);
  nic_rcache_release(b, other.slot);
  EXPECT_EQ(Stats(nic_rcache_process()).hits, process.hits) << "counted in the process's cache";
  EXPECT_EQ(Stats(nic_rcache_process()).misses, process.misses);
  EXPECT_EQ(Stats(nic_rcache_process()).regions, 0u);
  EXPECT_TRUE(fa.calls(Call::dereg).empty()) << "released regions stay cached";
}

TEST_F(RcacheInstance, NeighboursMergeAndTheMergedAwayRegionGoesWithItsLastUser) {
  FakeBackend &f = Fake("merge");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref first, second, both;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, kPage, NIC_ACCESS_LOCAL, &first), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + kPage, kPage, NIC_ACCESS_LOCAL, &second), 0);
  auto regs = f.calls(Call::reg);
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(regs[1].base, At(0));
  EXPECT_EQ(regs[1].len, 2 * kPage) << "the touching neighbour was not merged";
  EXPECT_TRUE(f.calls(Call::dereg).empty()) << "the first region is still held";
  nic_rcache_release(c, first.slot);
  auto deregs = f.calls(Call::dereg);
  ASSERT_EQ(deregs.size(), 1u);
  EXPECT_EQ(deregs[0].lkey, first.reg.lkey);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 10, 2 * kPage - 20, NIC_ACCESS_LOCAL, &both), 0);
  EXPECT_EQ(both.reg.lkey, second.reg.lkey);
  EXPECT_EQ(f.regs(), 2u);
  nic_rcache_release(c, second.slot);
  nic_rcache_release(c, both.slot);
}

TEST_F(RcacheInstance, RegionsBeyondTheLimitsAreEvictedLeastRecentlyUsedFirst) {
  FakeBackend &f = Fake("limits");
  nic_rcache *c = Make(f, 2, 3 * kPage);
  ASSERT_TRUE(c);
  nic_rcache_ref r[4];
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(nic_rcache_acquire(c, mem_ + 10 * i * kPage, 8, NIC_ACCESS_LOCAL, &r[i]), 0);
    nic_rcache_release(c, r[i].slot);
  }
  auto deregs = f.calls(Call::dereg);
  ASSERT_EQ(deregs.size(), 1u) << "two regions at most";
  EXPECT_EQ(deregs[0].lkey, r[0].reg.lkey) << "the oldest goes first";
  EXPECT_EQ(Stats(c).evictions, 1u);
  EXPECT_EQ(Stats(c).regions, 2u);
  // Bytes: two more pages next to nothing cached would make four; one region must go.
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 40 * kPage, 2 * kPage, NIC_ACCESS_LOCAL, &r[3]), 0);
  deregs = f.calls(Call::dereg);
  ASSERT_EQ(deregs.size(), 2u);
  EXPECT_EQ(deregs[1].lkey, r[1].reg.lkey);
  EXPECT_LE(Stats(c).bytes, 3 * kPage);
  // A region a user holds is never evicted: with both held there is no room.
  nic_rcache_ref held, extra;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 20 * kPage, 8, NIC_ACCESS_LOCAL, &held), 0) << "a hit";
  const size_t regs = f.regs();
  EXPECT_EQ(nic_rcache_acquire(c, mem_ + 50 * kPage, 8, NIC_ACCESS_LOCAL, &extra), -ENOSPC);
  EXPECT_EQ(f.regs(), regs) << "registered although there was no room";
  nic_rcache_release(c, held.slot);
  nic_rcache_release(c, r[3].slot);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 50 * kPage, 8, NIC_ACCESS_LOCAL, &extra), 0);
  nic_rcache_release(c, extra.slot);
}

// A backend whose table is full (-ENOSPC; -ENOMEM, as a full MR table and a pin limit say) gets
// room from the idle regions, least recently used first, until it takes the registration; regions
// users hold stay, and with nothing idle its refusal is the answer. The cache's own limits (8
// regions) were never reached: the backend's table (3) was, and a miss was refused for good.
TEST_F(RcacheInstance, ABackendOutOfRoomGetsItFromIdleRegions) {
  for (const int full : {-ENOSPC, -ENOMEM}) {
    FakeBackend &f = Fake("room");
    f.room = 3;
    f.full_rc = full;
    nic_rcache *c = Make(f, 8);
    ASSERT_TRUE(c);
    nic_rcache_ref r[3], next;
    for (int i = 0; i < 3; i++)
      r[i] = Cached(c, 2 * i);
    ASSERT_EQ(nic_rcache_acquire(c, mem_ + 10 * kPage, 8, NIC_ACCESS_LOCAL, &next), 0)
        << "refused with " << full << " though three regions were idle";
    auto deregs = f.calls(Call::dereg);
    ASSERT_EQ(deregs.size(), 1u);
    EXPECT_EQ(deregs[0].lkey, r[0].reg.lkey) << "the oldest goes first";
    EXPECT_EQ(Stats(c).evictions, 1u);
    // Every region held now: nothing to evict, the backend's answer stands.
    nic_rcache_ref held[2], extra;
    ASSERT_EQ(nic_rcache_acquire(c, mem_ + 2 * kPage, 8, NIC_ACCESS_LOCAL, &held[0]), 0);
    ASSERT_EQ(nic_rcache_acquire(c, mem_ + 4 * kPage, 8, NIC_ACCESS_LOCAL, &held[1]), 0);
    EXPECT_EQ(nic_rcache_acquire(c, mem_ + 20 * kPage, 8, NIC_ACCESS_LOCAL, &extra), full);
    EXPECT_EQ(f.calls(Call::dereg).size(), 1u) << "a held region was evicted";
    EXPECT_TRUE(f.registered(held[0].reg.lkey) && f.registered(held[1].reg.lkey));
    for (const nic_rcache_ref &h : held)
      nic_rcache_release(c, h.slot);
    nic_rcache_release(c, next.slot);
    // A registration of a request's own (remote access) makes room the same way.
    ASSERT_EQ(nic_rcache_acquire(c, mem_ + 30 * kPage, 8, NIC_ACCESS_REMOTE_READ, &extra), 0);
    nic_rcache_release(c, extra.slot);
  }
}

// A backend that can hold 8 registrations: the cache keeps 6 regions at most, whatever its own
// limit says, so that the backend always has room for what is not cached (steps, registrations
// of a request's own).
TEST_F(RcacheInstance, TheCacheKeepsRoomInTheBackendForWhatItDoesNotCache) {
  FakeBackend &f = Fake("capped");
  f.ops.caps.max_regions = 8;
  nic_rcache *c = Make(f, 100);
  ASSERT_TRUE(c);
  for (int i = 0; i < 12; i++)
    Cached(c, 2 * i);
  EXPECT_EQ(Stats(c).regions, 6u);
  EXPECT_EQ(f.live.size(), 6u);
  EXPECT_EQ(Stats(c).evictions, 6u);
}

// 8 pages at most: a region of 6 unused and a request of 3 touching it. Merged they would not
// fit; the request alone does, once the unused region is evicted.
TEST_F(RcacheInstance, ARequestThatFitsAloneIsNotRefusedForAMergeThatWouldNot) {
  FakeBackend &f = Fake("merge room");
  nic_rcache *c = Make(f, 8, 8 * kPage);
  ASSERT_TRUE(c);
  nic_rcache_ref six, three;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, 6 * kPage, NIC_ACCESS_LOCAL, &six), 0);
  nic_rcache_release(c, six.slot);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 6 * kPage, 3 * kPage, NIC_ACCESS_LOCAL, &three), 0);
  EXPECT_EQ(three.reg.base, mem_ + 6 * kPage);
  EXPECT_EQ(three.reg.len, 3 * kPage);
  EXPECT_FALSE(f.registered(six.reg.lkey));
  EXPECT_EQ(Stats(c).evictions, 1u);
  EXPECT_EQ(Stats(c).regions, 1u);
  nic_rcache_release(c, three.slot);
}

// A merge takes in the pages of a region overlapping the request beyond it: with a held region
// elsewhere the union does not fit, the request alone does. The overlapping region gives way
// all the same.
TEST_F(RcacheInstance, AMergeWithoutRoomFallsBackToTheRequestAlone) {
  FakeBackend &f = Fake("merge fallback");
  nic_rcache *c = Make(f, 8, 8 * kPage);
  ASSERT_TRUE(c);
  nic_rcache_ref six, held, asked;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, 6 * kPage, NIC_ACCESS_LOCAL, &six), 0);
  nic_rcache_release(c, six.slot);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 10 * kPage, 2 * kPage, NIC_ACCESS_LOCAL, &held), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 4 * kPage, 4 * kPage, NIC_ACCESS_LOCAL, &asked), 0);
  EXPECT_EQ(asked.reg.base, mem_ + 4 * kPage);
  EXPECT_EQ(asked.reg.len, 4 * kPage);
  EXPECT_FALSE(f.registered(six.reg.lkey)) << "an overlapping region stayed";
  EXPECT_TRUE(f.registered(held.reg.lkey));
  EXPECT_EQ(Stats(c).regions, 2u);
  EXPECT_LE(Stats(c).bytes, 8 * kPage);
  nic_rcache_release(c, held.slot);
  nic_rcache_release(c, asked.slot);
}

// A request larger than the whole cache can never fit: refused as too large, before anything is
// evicted or merged for it.
TEST_F(RcacheInstance, ARequestLargerThanTheCacheIsRefusedAndEvictsNothing) {
  FakeBackend &f = Fake("too large");
  nic_rcache *c = Make(f, 8, 8 * kPage);
  ASSERT_TRUE(c);
  Cached(c, 0);
  Cached(c, 2);
  nic_rcache_ref r;
  EXPECT_EQ(nic_rcache_acquire(c, mem_, 10 * kPage, NIC_ACCESS_LOCAL, &r), -ERANGE);
  EXPECT_EQ(Stats(c).regions, 2u) << "regions were taken out for a request refused";
  EXPECT_EQ(Stats(c).evictions, 0u);
  EXPECT_TRUE(f.calls(Call::dereg).empty());
  EXPECT_EQ(f.regs(), 2u);
  // A registration of the request's own is not held against the cache's bytes.
  ASSERT_EQ(nic_rcache_acquire(c, mem_, 10 * kPage, NIC_ACCESS_REMOTE_READ, &r), 0);
  nic_rcache_release(c, r.slot);
}

// 4 regions at most: 8 + 64 slots, 71 usable. Two cached regions nobody uses and 69
// registrations of a request's own fill them; one more request of either kind evicts a cached
// region for its slot.
TEST_F(RcacheInstance, ARequestFindsASlotByEvictionWhenTheSlotsAreAllTaken) {
  FakeBackend &f = Fake("slots");
  nic_rcache *c = Make(f, 4);
  ASSERT_TRUE(c);
  Cached(c, 0);
  Cached(c, 2);
  std::vector<nic_rcache_ref> remote(70);
  for (size_t i = 0; i < 69; i++)
    ASSERT_EQ(nic_rcache_acquire(c, mem_ + 10 * kPage, 8, NIC_ACCESS_REMOTE_READ, &remote[i]), 0)
        << i;
  EXPECT_EQ(Stats(c).evictions, 0u);
  EXPECT_EQ(nic_rcache_acquire(c, mem_ + 10 * kPage, 8, NIC_ACCESS_REMOTE_READ, &remote[69]), 0)
      << "a request's own registration found no slot while an unused region held one";
  EXPECT_EQ(Stats(c).evictions, 1u);
  nic_rcache_ref local{};
  EXPECT_EQ(nic_rcache_acquire(c, mem_ + 20 * kPage, 8, NIC_ACCESS_LOCAL, &local), 0)
      << "a cached request found no slot while an unused region held one";
  EXPECT_EQ(Stats(c).evictions, 2u);
  EXPECT_EQ(Stats(c).regions, 1u);
  for (const nic_rcache_ref &r : remote)
    if (r.slot) nic_rcache_release(c, r.slot);
  if (local.slot) nic_rcache_release(c, local.slot);
}

// An unmap, a page drop or an explicit invalidation reaches every cache, and takes exactly the
// regions with a page in the range.
TEST_F(RcacheInstance, InvalidationReachesEveryCacheAndOnlyTheRegionsInTheRange) {
  FakeBackend &fa = Fake("a"), &fb = Fake("b");
  nic_rcache *a = Make(fa), *b = Make(fb);
  ASSERT_TRUE(a && b);
  nic_rcache_ref ra, rb0, rb2, rb8;
  ASSERT_EQ(nic_rcache_acquire(a, mem_, kPage, NIC_ACCESS_LOCAL, &ra), 0);
  ASSERT_EQ(nic_rcache_acquire(b, mem_, kPage, NIC_ACCESS_LOCAL, &rb0), 0);
  ASSERT_EQ(nic_rcache_acquire(b, mem_ + 2 * kPage, kPage, NIC_ACCESS_LOCAL, &rb2), 0);
  ASSERT_EQ(nic_rcache_acquire(b, mem_ + 8 * kPage, kPage, NIC_ACCESS_LOCAL, &rb8), 0);
  for (auto *r : {&rb0, &rb2, &rb8})
    nic_rcache_release(b, r->slot);
  nic_rcache_release(a, ra.slot);

  nic_rcache_invalidate(At(1), kPage); // the page between two regions
  EXPECT_TRUE(fa.calls(Call::dereg).empty());
  EXPECT_TRUE(fb.calls(Call::dereg).empty());

  ASSERT_EQ(madvise(mem_, kPage, MADV_DONTNEED), 0);
  ASSERT_EQ(fa.calls(Call::dereg).size(), 1u) << "cache a kept a region whose page was dropped";
  EXPECT_EQ(fa.calls(Call::dereg)[0].lkey, ra.reg.lkey);
  ASSERT_EQ(fb.calls(Call::dereg).size(), 1u) << "cache b kept a region whose page was dropped";
  EXPECT_EQ(fb.calls(Call::dereg)[0].lkey, rb0.reg.lkey);

  ASSERT_EQ(munmap(mem_ + 2 * kPage, kPage), 0);
  ASSERT_EQ(fb.calls(Call::dereg).size(), 2u);
  EXPECT_EQ(fb.calls(Call::dereg)[1].lkey, rb2.reg.lkey);
  EXPECT_TRUE(fb.registered(rb8.reg.lkey)) << "a region outside every range was dropped";
  EXPECT_EQ(Stats(a).invalidations, 1u);
  EXPECT_EQ(Stats(b).invalidations, 2u);
  EXPECT_EQ(Stats(b).regions, 1u);
  // A fresh registration there, never the stale one.
  nic_rcache_ref again;
  ASSERT_EQ(nic_rcache_acquire(a, mem_, kPage, NIC_ACCESS_LOCAL, &again), 0);
  EXPECT_NE(again.reg.lkey, ra.reg.lkey);
  EXPECT_EQ(fa.regs(), 2u);
  nic_rcache_release(a, again.slot);
}

// A backend's deregistration may unmap memory another cache holds a region of: that region goes
// at once, from inside the first cache's call, without waiting on a lock the thread holds.
TEST_F(RcacheInstance, ADeregistrationThatUnmapsReachesTheOtherCache) {
  FakeBackend &fa = Fake("a"), &fb = Fake("b");
  nic_rcache *a = Make(fa), *b = Make(fb);
  ASSERT_TRUE(a && b);
  Cached(a, 0);
  const nic_rcache_ref rb = Cached(b, 20);
  char *page = mem_ + 20 * kPage;
  fa.on_dereg = [&fb, &rb, page] {
    EXPECT_TRUE(fb.registered(rb.reg.lkey));
    EXPECT_EQ(munmap(page, kPage), 0);
    EXPECT_FALSE(fb.registered(rb.reg.lkey)) << "cache b kept a region whose page was unmapped";
  };
  nic_rcache_invalidate(At(0), kPage);
  fa.on_dereg = nullptr;
  ASSERT_EQ(fa.calls(Call::dereg).size(), 1u);
  ASSERT_EQ(fb.calls(Call::dereg).size(), 1u);
  EXPECT_EQ(fb.calls(Call::dereg)[0].lkey, rb.reg.lkey);
  EXPECT_EQ(Stats(b).regions, 0u);
}

// The same when the unmapped page is the same backend's: its deregistration would enter the
// backend again from inside its own call (DPDK's rte_extmem_unregister frees memory under the
// backend's lock and DPDK's). The region leaves the table at once and is deregistered as the
// first call returns.
TEST_F(RcacheInstance, ADeregistrationThatUnmapsItsOwnBackendsRegionDefersItsDeregistration) {
  FakeBackend &fa = Fake("a");
  nic_rcache *a = Make(fa);
  ASSERT_TRUE(a);
  const nic_rcache_ref r0 = Cached(a, 0), r20 = Cached(a, 20);
  char *page = mem_ + 20 * kPage;
  bool unmapped = false;
  fa.on_dereg = [&fa, a, &r20, page, &unmapped] {
    if (unmapped) return; // the deferred one
    unmapped = true;
    EXPECT_EQ(munmap(page, kPage), 0);
    nic_rcache_ref found;
    EXPECT_EQ(nic_rcache_find(a, page, kPage, NIC_ACCESS_LOCAL, &found), -ENOENT)
        << "the region of an unmapped page stayed in the table";
    EXPECT_TRUE(fa.registered(r20.reg.lkey)) << "deregistered from inside the backend's call";
  };
  nic_rcache_invalidate(At(0), kPage);
  fa.on_dereg = nullptr;
  EXPECT_EQ(fa.reentered.load(), 0) << "a deregistration entered the backend from inside it";
  const std::vector<Call> deregs = fa.calls(Call::dereg);
  ASSERT_EQ(deregs.size(), 2u);
  EXPECT_EQ(deregs[0].lkey, r0.reg.lkey);
  EXPECT_EQ(deregs[1].lkey, r20.reg.lkey) << "the deferred deregistration never came";
  EXPECT_EQ(Stats(a).regions, 0u);
  EXPECT_EQ(Stats(a).busy_deregs, 0u) << "a deferred deregistration is not a busy one";
}

// The same when the first deregistration is a busy one retried later: the region it drops is
// deferred onto the busy list the retry is walking, and is deregistered by that retry.
TEST_F(RcacheInstance, ARetriedBusyDeregistrationThatUnmapsLosesNoRegion) {
  FakeBackend &f = Fake("busy unmaps");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref s;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, kPage, NIC_ACCESS_LOCAL, &s), 0);
  const nic_rcache_ref r = Cached(c, 20);
  f.busy = true;
  nic_rcache_invalidate(At(0), kPage);
  nic_rcache_release(c, s.slot);
  ASSERT_EQ(Stats(c).busy, 1u);
  f.busy = false;
  char *page = mem_ + 20 * kPage;
  bool unmapped = false;
  f.on_dereg = [page, &unmapped] {
    if (unmapped) return;
    unmapped = true;
    EXPECT_EQ(munmap(page, kPage), 0);
  };
  nic_rcache_retry_busy(c);
  f.on_dereg = nullptr;
  EXPECT_TRUE(unmapped);
  EXPECT_FALSE(f.registered(s.reg.lkey));
  EXPECT_FALSE(f.registered(r.reg.lkey)) << "the region the retry unmapped was never deregistered";
  EXPECT_EQ(Stats(c).busy, 0u);
  EXPECT_EQ(Stats(c).regions, 0u);
  EXPECT_TRUE(f.live.empty()) << f.live.size() << " left registered";
}

// A chain: S's deregistration unmaps R's page, R's (deferred) unmaps T's. Each deferred one is
// made once the call before it returns, the last one too.
TEST_F(RcacheInstance, AChainOfDeregistrationsThatUnmapDeregistersEveryLink) {
  FakeBackend &f = Fake("chain");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  const nic_rcache_ref s = Cached(c, 0), r = Cached(c, 2), t = Cached(c, 4);
  int deregs = 0;
  char *mem = mem_;
  f.on_dereg = [mem, &deregs] {
    if (deregs < 2) {
      EXPECT_EQ(munmap(mem + 2 * (deregs + 1) * kPage, kPage), 0);
    }
    deregs++;
  };
  ASSERT_EQ(munmap(mem_, kPage), 0);
  f.on_dereg = nullptr;
  EXPECT_EQ(f.reentered.load(), 0) << "a deregistration entered the backend from inside it";
  const std::vector<Call> gone = f.calls(Call::dereg);
  ASSERT_EQ(gone.size(), 3u) << "a link of the chain was never deregistered";
  EXPECT_EQ(gone[0].lkey, s.reg.lkey);
  EXPECT_EQ(gone[1].lkey, r.reg.lkey);
  EXPECT_EQ(gone[2].lkey, t.reg.lkey);
  EXPECT_EQ(Stats(c).busy, 0u);
  EXPECT_EQ(Stats(c).regions, 0u);
  EXPECT_TRUE(f.live.empty()) << f.live.size() << " left registered";
}

// Two caches used on two threads while a third drops their pages: every handed-out registration
// covers what was asked and is live in its own backend, and once the caches are destroyed each
// backend has had every registration deregistered exactly once (the fake checks).
TEST_F(RcacheInstance, TwoCachesUsedWhileTheirPagesAreDroppedStayBalanced) {
  FakeBackend &fa = Fake("a"), &fb = Fake("b");
  const nic_rcache_params pa{&fa.ops, 4, 0, "a"}, pb{&fb.ops, 4, 0, "b"};
  nic_rcache *a = nic_rcache_create(&pa), *b = nic_rcache_create(&pb);
  ASSERT_TRUE(a && b);
  const int kRounds = 3000;
  // The users go on until every drop is made, and the drops begin once both users have a region
  // cached: on a loaded machine either side could otherwise be done before the other starts, and
  // nothing would be invalidated (one run in 20 here, alone or under the whole suite; and once
  // in a suite run with the users counted before their first region, when a user preempted
  // there left its cache empty through every drop).
  // The users are bounded all the same, and let the dropper in: each drop waits for the cache
  // lock the users take in a tight loop, and every registration is recorded by the fake, so an
  // unbounded user outran a starved dropper once until the machine's memory ran out (24 GB,
  // killed by the kernel).
  const int kMaxRounds = 200 * kRounds;
  std::atomic<bool> drops_done{false};
  std::atomic<int> users_started{0};
  auto user = [this, &drops_done, &users_started](nic_rcache *c, FakeBackend *f, unsigned seed) {
    for (int i = 0; i < kRounds || (!drops_done.load() && i < kMaxRounds); i++) {
      if (i % 64 == 63) std::this_thread::yield();
      const size_t page = rand_r(&seed) % 8, off = rand_r(&seed) % kPage;
      const size_t len = 1 + rand_r(&seed) % (2 * kPage);
      const uintptr_t p = At(page) + off;
      nic_rcache_ref r;
      if (nic_rcache_acquire(c, reinterpret_cast<void *>(p), len, NIC_ACCESS_LOCAL, &r) != 0) {
        ADD_FAILURE() << "acquire failed at round " << i;
        if (i == 0) users_started++; /* the drops must not wait for it */
        return;
      }
      const uintptr_t base = reinterpret_cast<uintptr_t>(r.reg.base);
      EXPECT_TRUE(base <= p && p + len <= base + r.reg.len) << "round " << i;
      EXPECT_TRUE(f->registered(r.reg.lkey)) << "handed out a deregistered key, round " << i;
      nic_rcache_release(c, r.slot);
      if (i == 0) users_started++;
    }
  };
  std::thread ta(user, a, &fa, 1u), tb(user, b, &fb, 2u);
  while (users_started.load() < 2)
    std::this_thread::yield();
  unsigned seed = 3;
  for (int i = 0; i < kRounds; i++)
    EXPECT_EQ(madvise(mem_ + (rand_r(&seed) % 9) * kPage, kPage, MADV_DONTNEED), 0);
  drops_done = true;
  ta.join();
  tb.join();
  EXPECT_GT(Stats(a).invalidations + Stats(b).invalidations, 0u);
  ASSERT_EQ(nic_rcache_destroy(a), 0);
  ASSERT_EQ(nic_rcache_destroy(b), 0);
  for (FakeBackend *f : {&fa, &fb}) {
    EXPECT_TRUE(f->live.empty()) << f->ops.name << ": " << f->live.size() << " left registered";
    EXPECT_EQ(f->calls(Call::reg).size(), f->calls(Call::dereg).size()) << f->ops.name;
  }
}

TEST_F(RcacheInstance, AUserInFlightKeepsAnInvalidatedRegistration) {
  FakeBackend &f = Fake("inflight");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref r;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 4 * kPage, 64, NIC_ACCESS_LOCAL, &r), 0);
  nic_rcache_invalidate(At(4), kPage);
  EXPECT_TRUE(f.calls(Call::dereg).empty()) << "deregistered under its user";
  nic_rcache_ref fresh;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 4 * kPage, 64, NIC_ACCESS_LOCAL, &fresh), 0);
  EXPECT_NE(fresh.reg.lkey, r.reg.lkey) << "an invalidated region was handed out again";
  nic_rcache_release(c, r.slot);
  ASSERT_EQ(f.calls(Call::dereg).size(), 1u);
  EXPECT_EQ(f.calls(Call::dereg)[0].lkey, r.reg.lkey);
  nic_rcache_release(c, fresh.slot);
}

TEST_F(RcacheInstance, BusyDeregistrationIsRetriedUntilTheBackendLetsGo) {
  FakeBackend &f = Fake("busy");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref r;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 6 * kPage, 64, NIC_ACCESS_LOCAL, &r), 0);
  nic_rcache_release(c, r.slot);
  f.busy = true;
  nic_rcache_invalidate(At(6), kPage);
  auto deregs = f.calls(Call::dereg);
  ASSERT_EQ(deregs.size(), 1u);
  EXPECT_EQ(deregs[0].rc, -EBUSY);
  EXPECT_TRUE(f.registered(r.reg.lkey));
  EXPECT_EQ(Stats(c).busy, 1u);
  EXPECT_EQ(Stats(c).busy_deregs, 1u);
  nic_rcache_ref other; // the cache goes on meanwhile, without the busy region's slot
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 12 * kPage, 64, NIC_ACCESS_LOCAL, &other), 0);
  EXPECT_NE(other.slot, r.slot) << "a slot whose registration is not gone was reused";
  nic_rcache_release(c, other.slot);
  nic_rcache_retry_busy(c);
  EXPECT_TRUE(f.registered(r.reg.lkey)) << "still busy: kept for the next retry";
  EXPECT_EQ(nic_rcache_destroy(c), -EBUSY) << "destroyed with a registration the backend holds";
  f.busy = false; // the post completed
  nic_rcache_retry_busy(c);
  EXPECT_FALSE(f.registered(r.reg.lkey));
  deregs = f.calls(Call::dereg);
  EXPECT_EQ(deregs.back().lkey, r.reg.lkey);
  EXPECT_EQ(deregs.back().rc, 0);
  EXPECT_EQ(Stats(c).busy, 0u);
}

TEST_F(RcacheInstance, RemoteRegionsAreNeverCachedNorMerged) {
  FakeBackend &f = Fake("remote");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref local, remote1, remote2, found;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, kPage, NIC_ACCESS_LOCAL, &local), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + kPage + 8, 16, NIC_ACCESS_REMOTE_READ, &remote1), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + kPage + 8, 16, NIC_ACCESS_REMOTE_READ, &remote2), 0);
  auto regs = f.calls(Call::reg);
  ASSERT_EQ(regs.size(), 3u) << "each remote request gets a registration of its own";
  for (int i : {1, 2}) {
    EXPECT_EQ(regs[i].base, At(1)) << "exactly its pages";
    EXPECT_EQ(regs[i].len, kPage);
    EXPECT_EQ(regs[i].access, NIC_ACCESS_REMOTE_READ) << "exactly its rights";
  }
  EXPECT_NE(remote1.reg.lkey, remote2.reg.lkey);
  EXPECT_EQ(nic_rcache_find(c, mem_ + kPage, 16, NIC_ACCESS_REMOTE_READ, &found), -ENOENT);
  EXPECT_EQ(Stats(c).regions, 1u) << "only the local region is cached";
  nic_rcache_release(c, remote1.slot);
  ASSERT_EQ(f.calls(Call::dereg).size(), 1u) << "a remote registration outlived its user";
  EXPECT_EQ(f.calls(Call::dereg)[0].lkey, remote1.reg.lkey);
  nic_rcache_release(c, remote2.slot);
  ASSERT_EQ(f.calls(Call::dereg).size(), 2u);
  EXPECT_EQ(f.calls(Call::dereg)[1].lkey, remote2.reg.lkey);
  EXPECT_TRUE(f.registered(local.reg.lkey));
  EXPECT_EQ(nic_rcache_release_checked(c, remote2.slot, remote2.gen), -EINVAL) << "released twice";
  // The slot, taken again, refuses a release of the reference it handed out before.
  nic_rcache_ref remote3;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + kPage, 16, NIC_ACCESS_REMOTE_READ, &remote3), 0);
  EXPECT_NE(remote3.slot, remote2.slot);
  EXPECT_EQ(nic_rcache_release_checked(c, remote2.slot, remote2.gen), -EINVAL)
      << "a stale reference";
  EXPECT_EQ(nic_rcache_release_checked(c, remote1.slot, remote1.gen), -EINVAL)
      << "a stale reference";
  EXPECT_TRUE(f.registered(remote3.reg.lkey)) << "a stale release took the new holder's";
  // A token whose generation bits came round again: the whole generation tells.
  EXPECT_EQ(nic_rcache_release_checked(c, remote3.slot, remote3.gen - 1024), -EINVAL);
  EXPECT_TRUE(f.registered(remote3.reg.lkey)) << "a stale release took the new holder's";
  EXPECT_EQ(nic_rcache_release_checked(c, remote3.slot, remote3.gen), 0);
  EXPECT_FALSE(f.registered(remote3.reg.lkey));
  nic_rcache_release(c, local.slot);
}

// Pages under a remote registration that leave revoke it though its user still holds it; a
// backend that will not drop it yet is asked again on the next retry, the registration counted
// busy meanwhile. The user's release then lets go of the slot alone, answering -ESTALE.
TEST_F(RcacheInstance, PagesLeavingRevokeTheRemoteRegistrationsOverThem) {
  FakeBackend &f = Fake("revoke");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref now, busy, beside;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 30 * kPage, kPage, NIC_ACCESS_REMOTE_READ, &now), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 31 * kPage, kPage, NIC_ACCESS_REMOTE_WRITE, &busy), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 33 * kPage, kPage, NIC_ACCESS_REMOTE_READ, &beside), 0);
  nic_rcache_invalidate(At(30), kPage);
  EXPECT_FALSE(f.registered(now.reg.lkey)) << "the key outlived its pages";
  EXPECT_TRUE(f.registered(busy.reg.lkey));
  f.busy = true;
  nic_rcache_invalidate(At(31), 2 * kPage);
  EXPECT_TRUE(f.registered(busy.reg.lkey));
  EXPECT_EQ(Stats(c).busy, 1u);
  f.busy = false;
  nic_rcache_retry_busy(c);
  EXPECT_FALSE(f.registered(busy.reg.lkey)) << "a revocation the backend refused was forgotten";
  EXPECT_EQ(Stats(c).busy, 0u);
  EXPECT_EQ(Stats(c).own_regions, 1u);
  EXPECT_TRUE(f.registered(beside.reg.lkey)) << "revoked with no page leaving";
  const size_t deregs = f.calls(Call::dereg).size();
  EXPECT_EQ(nic_rcache_release_checked(c, now.slot, now.gen), -ESTALE);
  EXPECT_EQ(nic_rcache_release_checked(c, busy.slot, busy.gen), -ESTALE);
  EXPECT_EQ(f.calls(Call::dereg).size(), deregs) << "deregistered twice";
  EXPECT_EQ(nic_rcache_release_checked(c, now.slot, now.gen), -EINVAL) << "not let go";
  EXPECT_EQ(nic_rcache_release_checked(c, beside.slot, beside.gen), 0);
  EXPECT_FALSE(f.registered(beside.reg.lkey));
}

TEST_F(RcacheInstance, AFailedRegistrationCachesNothing) {
  FakeBackend &f = Fake("failing");
  nic_rcache *c = Make(f);
  ASSERT_TRUE(c);
  nic_rcache_ref r;
  f.fail_reg = -ENOMEM;
  EXPECT_EQ(nic_rcache_acquire(c, mem_ + 3 * kPage, 8, NIC_ACCESS_LOCAL, &r), -ENOMEM);
  EXPECT_EQ(nic_rcache_find(c, mem_ + 3 * kPage, 8, NIC_ACCESS_LOCAL, &r), -ENOENT);
  EXPECT_EQ(Stats(c).failures, 1u);
  EXPECT_EQ(Stats(c).regions, 0u);
  EXPECT_EQ(Stats(c).misses, 0u) << "a refused registration counted as a lookup that registered";
  f.fail_reg = 0;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 3 * kPage, 8, NIC_ACCESS_LOCAL, &r), 0);
  EXPECT_EQ(f.regs(), 2u) << "asked the backend again";
  EXPECT_EQ(Stats(c).misses, 1u);
  nic_rcache_release(c, r.slot);
  EXPECT_EQ(nic_rcache_acquire(c, reinterpret_cast<void *>(0x1000), 8, NIC_ACCESS_LOCAL, &r),
            -EFAULT);
  EXPECT_EQ(nic_rcache_acquire(c, mem_, 32 << 20, NIC_ACCESS_LOCAL, &r), -ERANGE);
  EXPECT_EQ(f.regs(), 2u) << "the backend saw a range it cannot take";
  EXPECT_EQ(Stats(c).misses, 1u);
  EXPECT_EQ(Stats(c).failures, 3u);
}

TEST_F(RcacheInstance, DestroyWaitsForUsersThenDeregistersEverything) {
  FakeBackend &f = Fake("destroy");
  nic_rcache_params params{&f.ops, 8, 1 << 20, "destroy"};
  nic_rcache *c = nic_rcache_create(&params);
  ASSERT_NE(c, nullptr);
  nic_rcache_ref a, b;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, kPage, NIC_ACCESS_LOCAL, &a), 0);
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 5 * kPage, kPage, NIC_ACCESS_LOCAL, &b), 0);
  nic_rcache_release(c, a.slot);
  EXPECT_EQ(nic_rcache_destroy(c), -EBUSY) << "destroyed under a user";
  EXPECT_TRUE(f.calls(Call::dereg).empty()) << "a refused destroy deregistered";
  nic_rcache_release(c, b.slot);
  ASSERT_EQ(nic_rcache_destroy(c), 0);
  std::set<uint32_t> gone;
  for (const Call &d : f.calls(Call::dereg))
    gone.insert(d.lkey);
  EXPECT_EQ(gone, (std::set<uint32_t>{a.reg.lkey, b.reg.lkey}));
  // The destroyed cache is out of the invalidation list: an unmap now must not reach it.
  nic_rcache_invalidate(At(0), 8 * kPage);
  EXPECT_EQ(f.calls(Call::dereg).size(), 2u);
}

// In a child of fork the cache of another backend (nic_rcache_of) is the parent's: it leaves the
// list invalidation walks, so that frees and unmaps there take the lock-free first look again and
// the list does not grow with each generation; a reference the program kept to one of its regions
// is still released there.
TEST_F(RcacheInstance, AForkChildTakesTheParentsCacheOfAnotherBackendOffTheList) {
  FakeBackend &f = Fake("process");
  nic_rcache_use_backend(&f.ops); // the process-wide cache's backend: the sim's is another's
  struct Restore {
    ~Restore() { nic_rcache_use_backend(nullptr); }
  } restore;
  nic_backend *sim = nic_backend_start(NIC_BACKEND_SIM);
  ASSERT_NE(sim, nullptr) << strerror(errno);
  nic_rcache *c = nic_rcache_of(sim);
  ASSERT_TRUE(c && c != nic_rcache_process());
  nic_rcache_ref r;
  ASSERT_EQ(nic_rcache_acquire(c, mem_, kPage, NIC_ACCESS_LOCAL, &r), 0);
  nic_rcache_release(c, r.slot); // cached, held by nobody
  const unsigned made = nic_rcache_made_count();
  ASSERT_GE(made, 1u);
  // The child's exit status: 0, or 1 when the cache is still on the list; a signal when the
  // release of the kept reference faulted.
  const auto child = [c, made](uint32_t kept) {
    const pid_t pid = fork();
    if (pid == 0) {
      alarm(10);
      const int bad = nic_rcache_made_count() != made - 1;
      if (kept) nic_rcache_release(c, kept);
      _exit(bad);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  };
  EXPECT_EQ(child(0), 0) << "1: the parent's cache stayed on the child's list";
  nic_rcache_ref kept;
  ASSERT_EQ(nic_rcache_acquire(c, mem_ + 2 * kPage, kPage, NIC_ACCESS_LOCAL, &kept), 0);
  EXPECT_EQ(child(kept.slot), 0) << "1: on the list; over 128: the kept reference's release";
  nic_rcache_release(c, kept.slot);
  EXPECT_EQ(nic_rcache_made_count(), made) << "the parent's list changed";
}

TEST_F(RcacheInstance, BadParametersAreRefused) {
  errno = 0;
  EXPECT_EQ(nic_rcache_create(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  nic_rcache_params none{nullptr, 8, 1 << 20, "none"};
  EXPECT_EQ(nic_rcache_create(&none), nullptr);
  FakeBackend &f = Fake("big");
  nic_rcache_params big{&f.ops, UINT32_MAX, 1 << 20, "big"};
  EXPECT_EQ(nic_rcache_create(&big), nullptr);
  EXPECT_EQ(nic_rcache_destroy(nullptr), -EINVAL);
  EXPECT_EQ(nic_rcache_destroy(nic_rcache_process()), -EINVAL);
}

} // namespace
