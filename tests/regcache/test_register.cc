// nic_register on the sim backend: arena memory uses its step's registration, other memory,
// remote access and dataplane ranges across a step end go through the registration cache, and a
// released chunk is deregistered before its memory goes.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nicmalloc.h"
extern "C" {
#include "backend.h"
#include "rcache.h"
#include "sim_dma.h"
#include "sim_nic.h"
}

namespace {

nic_sim_stats sim_stats() {
  nic_sim_stats s;
  nic_sim_get_stats(nic_backend_active(), &s);
  return s;
}

TEST(Register, ArenaMemoryUsesItsChunkRegistrationWithoutRemoteKey) {
  char *a = static_cast<char *>(nic_malloc(1000));
  char *b = static_cast<char *>(nic_malloc(50000));
  nic_region_ref ra, rb, before;
  ASSERT_EQ(nic_translate(a, 1000, &before), 0);
  ASSERT_EQ(nic_register(a, 1000, NIC_REG_LOCAL, &ra), 0);
  ASSERT_EQ(nic_register(b, 50000, NIC_REG_LOCAL, &rb), 0);
  EXPECT_EQ(ra.kind, NIC_REGION_ARENA);
  EXPECT_NE(ra.lkey, 0u);
  EXPECT_EQ(ra.rkey, 0u);
  EXPECT_EQ(ra.lkey, rb.lkey) << "one registration per chunk";
  EXPECT_EQ(static_cast<char *>(ra.region_base) + ra.offset, a);
  nic_region_ref after;
  ASSERT_EQ(nic_translate(a, 1000, &after), 0);
  EXPECT_EQ(after.lkey, ra.lkey) << "translate reports the registration once it exists";
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  EXPECT_STREQ(s.backend, "sim");
  nic_unregister(&ra);
  nic_unregister(&rb);
  free(a);
  free(b);
}

// With no descriptor left, /proc/self/maps cannot be opened, and whether memory is writable is
// unknown: the sim says why (-EMFILE), as a caller can then copy or ask again, rather than -EFAULT,
// which calls good memory bad. Once descriptors are back, the same requests are registered.
TEST(Register, MemoryWhoseMapsCannotBeReadIsNotCalledBad) {
  char *d = static_cast<char *>(nic_malloc(8192)); // a step no backend registered yet
  char *c = static_cast<char *>(
      mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(d, nullptr);
  ASSERT_NE(c, MAP_FAILED);
  memset(d, 'D', 8192);
  memset(c, 'C', 4 * 4096);
  ASSERT_NE(nic_backend_active(), nullptr); // opened before the descriptors run out
  std::vector<int> fds;
  for (int fd; (fd = dup(2)) >= 0;)
    fds.push_back(fd);
  nic_region_ref rc, rd;
  const int ctl = nic_register(c, 4 * 4096, NIC_REG_LOCAL_WRITE, &rc);
  const int dp = nic_register(d, 8192, NIC_REG_LOCAL, &rd);
  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  const int add = nic_sga_add(&sga, d, 8192);
  nic_sga_reset(&sga);
  for (int fd : fds)
    close(fd);
  EXPECT_EQ(ctl, -EMFILE) << "control memory";
  EXPECT_EQ(dp, -EMFILE) << "a dataplane step's first registration";
  EXPECT_EQ(add, 0) << "an entry that cannot be registered now is copied, not refused";
  ASSERT_EQ(nic_register(c, 4 * 4096, NIC_REG_LOCAL_WRITE, &rc), 0);
  nic_unregister(&rc);
  int again = dp; // a step's refusal is given back for a second before the backend is asked
  for (int i = 0; i < 300 && again; i++)
    if ((again = nic_register(d, 8192, NIC_REG_LOCAL, &rd)) != 0) usleep(20 * 1000);
  EXPECT_EQ(again, 0);
  munmap(c, 4 * 4096);
  nic_free(d);
}

TEST(Register, ControlMemoryGoesThroughTheCacheAndIsHeld) {
  char *p = static_cast<char *>(malloc(3000));
  nic_region_ref r;
  ASSERT_EQ(nic_register(p, 3000, NIC_REG_LOCAL, &r), 0);
  EXPECT_EQ(r.kind, NIC_REGION_CACHED);
  EXPECT_NE(r.cache_slot, 0u);
  EXPECT_EQ(r.rkey, 0u);
  EXPECT_LE(static_cast<char *>(r.region_base), p);
  EXPECT_GE(static_cast<char *>(r.region_base) + r.region_len, p + 3000);
  const uint64_t regions = sim_stats().regions;
  free(p); // invalidates the region; the NIC registration stays while we hold it
  EXPECT_EQ(sim_stats().regions, regions);
  nic_unregister(&r);
  EXPECT_EQ(sim_stats().regions, regions - 1);
}

TEST(Register, RemoteAccessOnArenaMemoryExposesOnlyThePagesAskedFor) {
  char *p = static_cast<char *>(nic_malloc(100));
  nic_region_ref r;
  ASSERT_EQ(nic_register(p, 100, NIC_REG_REMOTE_READ, &r), 0);
  EXPECT_EQ(r.kind, NIC_REGION_CACHED);
  EXPECT_NE(r.rkey, 0u);
  EXPECT_EQ(r.region_len, 4096u) << "a remote key for one page, not the whole chunk";
  nic_unregister(&r);
  free(p);
}

// A dataplane range across a step end (here a block larger than a step) has no one step's
// registration to use: it gets one of its own, of exactly its pages and rights, for local access
// as for remote, that no other request shares and its nic_unregister takes off the NIC. A range
// that runs off the mapped chunks stays refused.
TEST(Register, ADataplaneRangeAcrossAStepEndGetsARegistrationOfItsOwn) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  const size_t step = s.pin_step, len = step + step / 2;
  ASSERT_GT(step, 0u);
  char *p = static_cast<char *>(nic_malloc(len));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(nic_is_dataplane(p));
  nic_region_ref t;
  ASSERT_EQ(nic_translate(p, len, &t), -NIC_ECROSS) << "the block should cross a step end";
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + len + 4095) & ~uintptr_t{4095};
  for (unsigned access :
       {NIC_REG_LOCAL, NIC_REG_LOCAL_WRITE, NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE}) {
    SCOPED_TRACE("access " + std::to_string(access));
    nic_region_ref a, b;
    ASSERT_EQ(nic_register(p, len, access, &a), 0);
    EXPECT_EQ(a.kind, NIC_REGION_CACHED);
    EXPECT_NE(a.cache_slot, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.region_base), first);
    EXPECT_EQ(a.region_len, end - first);
    EXPECT_EQ(static_cast<char *>(a.region_base) + a.offset, p);
    EXPECT_EQ(a.rkey != 0, (access & NIC_REG_REMOTE_READ) != 0);
    const sim_reg *reg = sim_lookup(sim, a.lkey);
    ASSERT_NE(reg, nullptr) << "not registered with the NIC";
    EXPECT_EQ(reg->base, first);
    EXPECT_EQ(reg->len, end - first);
    EXPECT_EQ(reg->access, access);
    ASSERT_EQ(nic_register(p + 4096, 4096 + step, access, &b), 0);
    EXPECT_NE(b.cache_slot, a.cache_slot) << "two requests share a registration";
    nic_unregister(&a);
    EXPECT_EQ(sim_lookup(sim, a.lkey), nullptr) << "the registration outlived its nic_unregister";
    EXPECT_NE(sim_lookup(sim, b.lkey), nullptr) << "went with another request's";
    nic_unregister(&b);
  }
  free(p);

  // From the last page of a mapped chunk into one that is not.
  char *q = static_cast<char *>(nic_malloc(64));
  ASSERT_TRUE(nic_is_dataplane(q));
  ASSERT_EQ(nic_translate(q, 64, &t), 0);
  const size_t chunk = s.chunk_size;
  ASSERT_EQ(chunk & (chunk - 1), 0u) << "chunks are a power of two";
  char *next = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(q) | (chunk - 1)) + 1);
  while (nic_translate(next, 64, &t) == 0)
    next += chunk;
  ASSERT_EQ(nic_translate(next - 4096, 64, &t), 0) << "the chunk before is mapped";
  EXPECT_EQ(nic_register(next - 4096, 8192, NIC_REG_LOCAL, &t), -NIC_ECROSS);
  free(q);
}

// Neither a fresh registration (merged with its neighbours) nor a cached one (made for a wider
// request) may give a remote key that reaches pages the caller did not ask for.
TEST(Register, ARemoteKeyNeverReachesANeighboursPages) {
  char *buf = static_cast<char *>(aligned_alloc(4096, 3 * 4096));
  for (unsigned access : {NIC_REG_REMOTE_READ, NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE}) {
    nic_region_ref first, second, both, one;
    ASSERT_EQ(nic_register(buf, 4096, access, &first), 0);
    ASSERT_EQ(nic_register(buf + 4096, 4096, access, &second), 0);
    EXPECT_EQ(static_cast<char *>(second.region_base), buf + 4096);
    EXPECT_EQ(second.region_len, 4096u);
    ASSERT_EQ(nic_register(buf, 2 * 4096, access, &both), 0);
    EXPECT_EQ(both.region_len, 2 * 4096u);
    ASSERT_EQ(nic_register(buf + 4096 + 8, 100, access, &one), 0);
    EXPECT_EQ(static_cast<char *>(one.region_base), buf + 4096);
    EXPECT_EQ(one.region_len, 4096u) << "not the two-page region made for the wider request";
    for (const nic_region_ref *r : {&first, &second, &both, &one})
      nic_unregister(r);
  }
  free(buf);
}

// Cached regions of different access over a shared page (pages 0-1 local, pages 1-3
// local-write): dropping that page must take both off the NIC, and pages 0-1 asked for again
// must get a registration made after the drop.
TEST(Register, DroppingAPageDeregistersEveryCachedRegionThatHadIt) {
  char *buf = static_cast<char *>(mmap(nullptr, 4 * 4096, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
  ASSERT_NE(buf, MAP_FAILED);
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  nic_region_ref send, recv;
  ASSERT_EQ(nic_register(buf, 2 * 4096, NIC_REG_LOCAL, &send), 0);
  ASSERT_EQ(nic_register(buf + 4096, 3 * 4096, NIC_REG_LOCAL_WRITE, &recv), 0);
  nic_unregister(&send);
  nic_unregister(&recv);
  ASSERT_EQ(madvise(buf + 4096, 4096, MADV_DONTNEED), 0);
  EXPECT_EQ(sim_lookup(sim, send.lkey), nullptr) << "pages 0-1 stay registered";
  EXPECT_EQ(sim_lookup(sim, recv.lkey), nullptr) << "pages 1-3 stay registered";
  nic_region_ref again;
  ASSERT_EQ(nic_register(buf, 2 * 4096, NIC_REG_LOCAL, &again), 0);
  EXPECT_NE(again.lkey, send.lkey);
  EXPECT_NE(again.lkey, recv.lkey);
  nic_unregister(&again);
  munmap(buf, 4 * 4096);
}

// A local registration of pages registered for remote access gets a registration of its own:
// it must neither see nor hold the remote one (holding it would keep the peer's key alive).
TEST(Register, ALocalRequestNeverSeesAnotherRequestsRemoteKey) {
  char *p = static_cast<char *>(aligned_alloc(4096, 8192));
  nic_region_ref remote, local;
  ASSERT_EQ(nic_register(p, 4096, NIC_REG_REMOTE_READ, &remote), 0);
  ASSERT_NE(remote.rkey, 0u);
  ASSERT_EQ(nic_register(p + 100, 200, NIC_REG_LOCAL, &local), 0);
  EXPECT_NE(local.cache_slot, remote.cache_slot) << "served by the remote region";
  EXPECT_NE(local.lkey, 0u);
  EXPECT_NE(local.lkey, remote.lkey);
  EXPECT_EQ(local.rkey, 0u);
  nic_unregister(&local);
  nic_unregister(&remote);
  free(p);
}

// A remote key lives exactly as long as the registration it was made for: its nic_unregister
// takes it off the NIC, and neither another remote registration of the same page nor local
// registrations of it, made before or after, share or prolong it.
TEST(Register, TheUnregisterOfRemoteAccessRevokesItsKey) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  char *page = static_cast<char *>(aligned_alloc(4096, 4096));
  for (unsigned access :
       {NIC_REG_REMOTE_READ, NIC_REG_REMOTE_WRITE, NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE}) {
    SCOPED_TRACE("access " + std::to_string(access));
    nic_region_ref before, first, second, after;
    ASSERT_EQ(nic_register(page, 4096, NIC_REG_LOCAL, &before), 0);
    ASSERT_EQ(nic_register(page, 4096, access, &first), 0);
    ASSERT_EQ(nic_register(page + 64, 64, access, &second), 0);
    ASSERT_EQ(nic_register(page + 128, 64, NIC_REG_LOCAL, &after), 0);
    ASSERT_NE(first.rkey, 0u);
    ASSERT_NE(second.rkey, 0u);
    EXPECT_NE(second.rkey, first.rkey) << "two registrations share a remote key";
    EXPECT_NE(after.lkey, first.lkey) << "a local request took a remote registration";
    EXPECT_NE(after.lkey, second.lkey) << "a local request took a remote registration";
    nic_unregister(&first);
    EXPECT_EQ(sim_lookup(sim, first.rkey), nullptr) << "the key outlived its nic_unregister";
    EXPECT_NE(sim_lookup(sim, second.rkey), nullptr) << "revoked while still registered";
    nic_unregister(&second);
    EXPECT_EQ(sim_lookup(sim, second.rkey), nullptr) << "the key outlived its nic_unregister";
    EXPECT_NE(sim_lookup(sim, after.lkey), nullptr) << "a local registration went with it";
    nic_unregister(&after);
    nic_unregister(&before);
  }
  free(page);
}

// An unregister of a registration already unregistered, whose cache slot another caller's
// registration took since, is refused and counted: taken from the slot's new holder, it
// deregistered that caller's registration and revoked its remote key, and the holder's own
// unregister was then the one refused.
TEST(Register, AStaleUnregisterLeavesTheRegistrationNowInItsSlotAlone) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  char *page = static_cast<char *>(aligned_alloc(4096, 4096));
  nic_region_ref first, now;
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_REMOTE_READ, &first), 0);
  nic_unregister(&first);
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_REMOTE_READ, &now), 0);
  const uint32_t slot_bits = (1u << 22) - 1;
  ASSERT_EQ(now.cache_slot & slot_bits, first.cache_slot & slot_bits)
      << "the case under test: the freed slot is the next one taken";
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  nic_unregister(&first);
  nic_get_stats(&after);
  EXPECT_EQ(after.registration_errors, before.registration_errors + 1) << "not refused";
  EXPECT_NE(sim_lookup(sim, now.rkey), nullptr) << "another caller's registration was revoked";
  nic_unregister(&now);
  nic_get_stats(&before);
  EXPECT_EQ(before.registration_errors, after.registration_errors)
      << "the holder's own unregister was refused";
  EXPECT_EQ(sim_lookup(sim, now.rkey), nullptr) << "the key outlived its nic_unregister";
  free(page);
}

// The same after 1024 registrations in the slot, where the generation bits the slot's token has
// room for come round again (the slot freed is the next one taken, so one caller registering and
// unregistering in a loop gets there in a moment): the token repeats, and the reference's whole
// generation tells the registration now in the slot from the one unregistered. Both for a
// remote registration (its key revoked) and a cached local one (its holder's reference taken:
// its own unregister was refused, and the region then went with its holder still using it).
TEST(Register, AStaleUnregisterLeavesTheSlotAloneAfterItsGenerationBitsWrap) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  const long page = sysconf(_SC_PAGESIZE);
  for (unsigned access : {NIC_REG_REMOTE_READ, NIC_REG_LOCAL}) {
    SCOPED_TRACE("access " + std::to_string(access));
    // Mapped, so that an unmap takes a cached region out and frees its slot.
    char *a = static_cast<char *>(
        mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    char *b = static_cast<char *>(
        mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    char *cycled = static_cast<char *>(aligned_alloc(page, page));
    ASSERT_NE(a, MAP_FAILED);
    ASSERT_NE(b, MAP_FAILED);
    nic_region_ref first, t, now;
    ASSERT_EQ(nic_register(a, page, access, &first), 0);
    nic_unregister(&first);
    ASSERT_EQ(munmap(a, page), 0); // a cached region goes: its slot is free
    for (int i = 0; i < 1023; i++) {
      ASSERT_EQ(nic_register(cycled, page, NIC_REG_REMOTE_READ, &t), 0);
      nic_unregister(&t);
    }
    ASSERT_EQ(nic_register(b, page, access, &now), 0);
    ASSERT_EQ(now.cache_slot, first.cache_slot)
        << "the case under test: the slot's token came round again";
    const uint64_t key = access == NIC_REG_LOCAL ? now.lkey : now.rkey;
    nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
    nic_get_stats(&before);
    testing::internal::CaptureStderr();
    nic_unregister(&first);
    testing::internal::GetCapturedStderr();
    nic_get_stats(&after);
    EXPECT_EQ(after.registration_errors, before.registration_errors + 1) << "not refused";
    EXPECT_NE(sim_lookup(sim, key), nullptr) << "another caller's registration was dropped";
    nic_unregister(&now);
    nic_get_stats(&before);
    EXPECT_EQ(before.registration_errors, after.registration_errors)
        << "the holder's own unregister was refused";
    if (access != NIC_REG_LOCAL) {
      EXPECT_EQ(sim_lookup(sim, key), nullptr) << "the key outlived its nic_unregister";
    }
    munmap(b, page);
    free(cycled);
  }
}

// A program built against a header without cache_gen that copies a reference member by member
// hands nic_unregister a cache_gen of 0: it is checked by its slot's token, as before that member
// existed, not refused (a refused remote key would hold the frees of its pages for good).
TEST(Register, AReferenceCopiedWithoutItsGenerationIsStillLetGo) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  const long page = sysconf(_SC_PAGESIZE);
  char *p = static_cast<char *>(aligned_alloc(page, page));
  ASSERT_NE(p, nullptr);
  nic_region_ref r;
  ASSERT_EQ(nic_register(p, page, NIC_REG_REMOTE_READ, &r), 0);
  ASSERT_NE(r.cache_gen, 0u) << "no registration has generation 0";
  nic_region_ref old_copy;
  memset(&old_copy, 0, sizeof old_copy);
  old_copy.kind = r.kind;
  old_copy.chunk_index = r.chunk_index;
  old_copy.region_base = r.region_base;
  old_copy.region_len = r.region_len;
  old_copy.offset = r.offset;
  old_copy.lkey = r.lkey;
  old_copy.rkey = r.rkey;
  old_copy.backend_handle = r.backend_handle;
  old_copy.cache_slot = r.cache_slot;
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  nic_unregister(&old_copy);
  nic_get_stats(&after);
  EXPECT_EQ(after.registration_errors, before.registration_errors) << "refused";
  EXPECT_EQ(sim_lookup(sim, r.rkey), nullptr) << "the remote key outlived its nic_unregister";
  free(p);
}

// A peer with a remote key reaches the key's pages whenever it likes: a block freed under a
// live key is not handed out again (where the peer would read and write the next owner's
// bytes) until the key's nic_unregister; the free waits, as that of a held block does. Control
// and dataplane blocks alike, and a neighbour sharing a page with the key's range too.
TEST(Register, AFreeUnderALiveRemoteKeyWaitsForItsUnregister) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  const size_t len = 65536;
  for (bool dataplane : {false, true}) {
    SCOPED_TRACE(dataplane ? "dataplane" : "control");
    char *p = static_cast<char *>(dataplane ? nic_malloc(len) : malloc(len));
    char *neighbour = static_cast<char *>(dataplane ? nic_malloc(64) : malloc(64));
    ASSERT_NE(p, nullptr);
    memset(p, 'S', len);
    nic_region_ref r;
    ASSERT_EQ(nic_register(p, len, NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE, &r), 0);
    nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
    nic_get_stats(&before);
    free(p);
    nic_get_stats(&after);
    EXPECT_EQ(after.deferred_pending, before.deferred_pending + 1) << "freed under a live key";
    std::vector<void *> next;
    for (int i = 0; i < 64; i++)
      next.push_back(dataplane ? nic_malloc(len) : malloc(len));
    EXPECT_EQ(std::find(next.begin(), next.end(), p), next.end())
        << "handed out again while a peer's key reaches it";
    EXPECT_EQ(p[0], 'S');
    EXPECT_EQ(p[len - 1], 'S');
    EXPECT_NE(sim_lookup(sim, r.rkey), nullptr);
    nic_unregister(&r);
    EXPECT_EQ(sim_lookup(sim, r.rkey), nullptr);
    nic_get_stats(&after);
    EXPECT_EQ(after.deferred_pending, before.deferred_pending) << "the free still waits";
    EXPECT_EQ(after.registration_errors, before.registration_errors);
    for (void *q : next)
      free(q);
    free(neighbour);
  }
}

// A remote key never outlives the pages it was made for: once they leave (munmap), or another
// mapping replaces them, the key is revoked at once (with on-demand paging it would reach
// whatever is mapped there next; without, pin pages the process no longer has for the peer).
// Its nic_unregister then lets go of the reference and says why, once, counted. Memory beside
// the pages keeps its keys.
TEST(Register, AnUnmapRevokesTheRemoteKeysOnItsPages) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  const long page = sysconf(_SC_PAGESIZE);
  char *m = static_cast<char *>(
      mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  nic_region_ref gone, replaced, beside;
  ASSERT_EQ(nic_register(m, 2 * page, NIC_REG_REMOTE_WRITE, &gone), 0);
  ASSERT_EQ(nic_register(m + 2 * page, 100, NIC_REG_REMOTE_READ, &replaced), 0);
  ASSERT_EQ(nic_register(m + 3 * page, 100, NIC_REG_REMOTE_READ, &beside), 0);
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  ASSERT_EQ(munmap(m + page, page), 0);
  EXPECT_EQ(sim_lookup(sim, gone.rkey), nullptr) << "the key outlived its pages";
  EXPECT_NE(sim_lookup(sim, replaced.rkey), nullptr) << "revoked with pages of its own left";
  ASSERT_EQ(mmap(m + 2 * page, page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            m + 2 * page);
  EXPECT_EQ(sim_lookup(sim, replaced.rkey), nullptr) << "the key reaches the new mapping";
  EXPECT_NE(sim_lookup(sim, beside.rkey), nullptr) << "a key beside them was revoked";
  nic_get_stats(&after);
  EXPECT_EQ(after.nic_regions + 2, before.nic_regions) << "revoked registrations counted";
  testing::internal::CaptureStderr();
  nic_unregister(&gone);
  nic_unregister(&replaced);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "said once: " << err;
  EXPECT_NE(err.find("revoked"), std::string::npos) << err;
  nic_get_stats(&after);
  EXPECT_EQ(after.registration_errors, before.registration_errors + 2);
  EXPECT_EQ(nic_rcache_release_checked(nic_rcache_process(), gone.cache_slot, gone.cache_gen),
            -EINVAL)
      << "the revoked reference was not let go";
  nic_unregister(&beside);
  EXPECT_EQ(sim_lookup(sim, beside.rkey), nullptr);
  munmap(m, 4 * page);
}

// A child of fork has its own copy of the pages, which the parent's key never reaches: its frees
// there are not held, and the parent's stay held.
TEST(Register, AForkChildFreesWhatItsParentsRemoteKeyCovers) {
  char *p = static_cast<char *>(malloc(8192));
  nic_region_ref r;
  ASSERT_EQ(nic_register(p, 8192, NIC_REG_REMOTE_READ, &r), 0);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(5);
    nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
    nic_get_stats(&before);
    free(p);
    nic_get_stats(&after);
    _exit(after.deferred_pending == before.deferred_pending ? 0 : 1);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's free waited";
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  free(p);
  nic_get_stats(&after);
  EXPECT_EQ(after.deferred_pending, before.deferred_pending + 1) << "the parent's did not";
  nic_unregister(&r);
  nic_get_stats(&after);
  EXPECT_EQ(after.deferred_pending, before.deferred_pending);
}

// Write access to memory the process may not write is refused, as a device refuses to pin it
// for writing (ibv_reg_mr, io_uring's buffer registration: EFAULT); read access is granted.
TEST(Register, WriteAccessToReadOnlyMemoryIsRefused) {
  const long page = sysconf(_SC_PAGESIZE);
  char *m = static_cast<char *>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  memset(m, 1, 3 * page);
  ASSERT_EQ(mprotect(m + page, page, PROT_READ), 0);
  nic_region_ref r;
  for (unsigned access : {NIC_REG_LOCAL_WRITE, NIC_REG_REMOTE_WRITE}) {
    SCOPED_TRACE("access " + std::to_string(access));
    EXPECT_EQ(nic_register(m + page, 100, access, &r), -EFAULT);
    EXPECT_EQ(nic_register(m, 2 * page, access, &r), -EFAULT) << "partly read-only";
    ASSERT_EQ(nic_register(m + 2 * page, 100, access, &r), 0) << "writable";
    nic_unregister(&r);
  }
  ASSERT_EQ(nic_register(m + page, 100, NIC_REG_LOCAL, &r), 0) << "read access";
  nic_unregister(&r);
  ASSERT_EQ(nic_register(m + page, 100, NIC_REG_REMOTE_READ, &r), 0) << "read access";
  nic_unregister(&r);
  munmap(m, 3 * page);
}

// Registrations of a request's own (remote access here) take NIC translation entries like any:
// counted in nic_regions and nic_entries_needed while held, and no longer once unregistered.
TEST(Register, RegistrationsOfARequestsOwnAreCountedWhileHeld) {
  const size_t len = 1 << 20;
  char *p = static_cast<char *>(aligned_alloc(4096, 4 * len));
  memset(p, 1, 4 * len);
  nic_stats before = NIC_STATS_INIT, held = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  std::vector<nic_region_ref> refs(4);
  for (size_t i = 0; i < refs.size(); i++)
    ASSERT_EQ(nic_register(p + i * len, len, NIC_REG_REMOTE_READ, &refs[i]), 0);
  nic_get_stats(&held);
  EXPECT_EQ(held.nic_regions, before.nic_regions + 4);
  EXPECT_GE(held.nic_entries_needed, before.nic_entries_needed + 4 * (len / 4096));
  EXPECT_EQ(held.rcache_regions, before.rcache_regions) << "not cached";
  for (auto &r : refs)
    nic_unregister(&r);
  nic_get_stats(&after);
  EXPECT_EQ(after.nic_regions, before.nic_regions);
  EXPECT_EQ(after.nic_entries_needed, before.nic_entries_needed);
  free(p);
}

// A remote key carries exactly the remote rights asked for: a read-only request is never given
// the key of a cached read-write registration of the same pages.
TEST(Register, ARemoteKeyCarriesOnlyTheRightsAskedFor) {
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  char *page = static_cast<char *>(aligned_alloc(4096, 4096));
  nic_region_ref rw, ro;
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE, &rw), 0);
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_REMOTE_READ, &ro), 0);
  EXPECT_NE(ro.rkey, rw.rkey);
  const sim_reg *reg = sim_lookup(sim, ro.rkey);
  ASSERT_NE(reg, nullptr);
  EXPECT_EQ(reg->access & NIC_ACCESS_REMOTE_WRITE, 0u) << "a read-only request can write";
  nic_unregister(&ro);
  nic_unregister(&rw);
  free(page);
}

// A fork while another thread works in the registration cache: the child must still free
// memory the cache may cover and read statistics (both take the cache's lock), not wait forever
// on a lock held by a thread it does not have. Registering in the child is not supported.
TEST(Register, AForkChildFreesAndReadsStatsWhileTheParentRegisters) {
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    while (!stop.load()) {
      char *p = static_cast<char *>(malloc(8192));
      nic_region_ref r;
      if (nic_register(p, 8192, NIC_REG_LOCAL, &r) == 0) nic_unregister(&r);
      free(p);
    }
  });
  int hung = 0, failed = 0;
  for (int round = 0; round < 20; round++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(2); // a healthy child takes milliseconds
      nic_stats s = NIC_STATS_INIT;
      nic_get_stats(&s);
      free(malloc(8192));
      _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    hung += WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
    failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  stop = true;
  worker.join();
  EXPECT_EQ(hung, 0);
  EXPECT_EQ(failed, 0);
}

TEST(Register, BadInput) {
  nic_region_ref r;
  char *p = static_cast<char *>(nic_malloc(64));
  EXPECT_EQ(nic_register(p, 0, NIC_REG_LOCAL, &r), -NIC_ERANGE);
  EXPECT_EQ(nic_register(p, 64, 0x80, &r), -EINVAL);
  EXPECT_EQ(nic_register(reinterpret_cast<void *>(0x1000), 8, NIC_REG_LOCAL, &r), -EFAULT);
  free(p);
}

TEST(Register, TheChunkRegistrationLetsTheNicWriteForReceiveBuffers) {
  char *rx = static_cast<char *>(nic_malloc(9000));
  nic_region_ref ref;
  ASSERT_EQ(nic_register(rx, 9000, NIC_REG_LOCAL_WRITE, &ref), 0);
  ASSERT_EQ(ref.kind, NIC_REGION_ARENA);
  auto *sim = static_cast<sim_nic *>(nic_backend_active()->priv);
  const sim_reg *reg = sim_lookup(sim, ref.lkey);
  ASSERT_NE(reg, nullptr);
  EXPECT_EQ(reg->access & NIC_ACCESS_LOCAL_WRITE, static_cast<unsigned>(NIC_ACCESS_LOCAL_WRITE));
  nic_unregister(&ref);
  free(rx);
}

TEST(Register, NullResultPointersAreReportedNotWrittenThrough) {
  char *dp = static_cast<char *>(nic_malloc(4096)), *control = static_cast<char *>(malloc(4096));
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_translate(dp, 64, nullptr), -EINVAL);
  EXPECT_EQ(nic_translate(control, 64, nullptr), -EINVAL);
  EXPECT_EQ(nic_register(dp, 64, NIC_REG_LOCAL, nullptr), -EINVAL);
  EXPECT_EQ(nic_register(control, 64, NIC_REG_REMOTE_READ, nullptr), -EINVAL);
  nic_get_stats(nullptr);
  EXPECT_EQ(nic_posix_memalign_site(nullptr, 64, 100, 1), EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  // One line per kind (the caller has the return value); every call counted.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 4) << err;
  size_t named = 0;
  for (size_t at = err.find("NULL"); at != std::string::npos; at = err.find("NULL", at + 1))
    named++;
  EXPECT_EQ(named, 4u) << err;
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.registration_errors - before.registration_errors, 4u);
  EXPECT_EQ(after.other_api_errors - before.other_api_errors, 2u);
  free(dp);
  free(control);
}

// Every error nic_register returns is counted, and each kind said once; nicmalloc's own calls
// of it (a scatter-gather entry's) are counted and said by their caller alone.
TEST(Register, ItsErrorsAreCountedAndEachKindSaidOnce) {
  const long page = sysconf(_SC_PAGESIZE);
  char *gone = static_cast<char *>( // never readable: unmapped, its address could be reused
      mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(gone, MAP_FAILED);
  char *block = static_cast<char *>(malloc(page));
  nic_region_ref r;
  nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(nic_register(block, 0, NIC_REG_LOCAL, &r), -NIC_ERANGE);
    EXPECT_EQ(nic_register(block, 64, 0x80, &r), -EINVAL);
    EXPECT_EQ(nic_register(gone, 100, NIC_REG_LOCAL, &r), -EFAULT);
  }
  std::string err = testing::internal::GetCapturedStderr();
  nic_get_stats(&after);
  EXPECT_EQ(after.registration_errors - before.registration_errors, 6u);
  EXPECT_EQ(after.rcache_misses, before.rcache_misses) << "refusals counted as misses";
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 3) << err;
  EXPECT_NE(err.find("length is 0"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown access bits"), std::string::npos) << err;
  EXPECT_NE(err.find("not (entirely) mapped"), std::string::npos) << err;

  nic_sga sga;
  ASSERT_EQ(nic_sga_init(&sga, 0), 0);
  nic_get_stats(&before);
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_sga_add(&sga, gone, 100000), -EFAULT);
  err = testing::internal::GetCapturedStderr();
  nic_get_stats(&after);
  EXPECT_EQ(after.registration_errors, before.registration_errors) << "counted twice";
  EXPECT_EQ(after.sga_errors, before.sga_errors + 1);
  EXPECT_EQ(err.find("nic_register("), std::string::npos) << err;
  munmap(gone, page);
  free(block);
}

TEST(Register, AReferenceUnregisteredTwiceIsReportedAndReleasesNothing) {
  char *page = static_cast<char *>(aligned_alloc(4096, 4096));
  nic_region_ref first, second;
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_LOCAL, &first), 0);
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_LOCAL, &second), 0);
  ASSERT_EQ(first.cache_slot, second.cache_slot);
  const uint64_t registered = sim_stats().regions;
  testing::internal::CaptureStderr();
  nic_unregister(&first);
  nic_unregister(&second);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "two references, two unregisters";
  nic_stats errors_before = NIC_STATS_INIT;
  nic_get_stats(&errors_before);
  testing::internal::CaptureStderr();
  nic_unregister(&second);
  nic_unregister(&second);
  nic_region_ref unknown = second;
  unknown.cache_slot = 0x7fffffff;
  nic_unregister(&unknown);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "said once: " << err;
  nic_stats errors_after = NIC_STATS_INIT;
  nic_get_stats(&errors_after);
  EXPECT_EQ(errors_after.registration_errors - errors_before.registration_errors, 3u);
  EXPECT_NE(err.find("nic_unregister("), std::string::npos) << err;
  // The cache still holds the region and its registration, and hands it out again.
  EXPECT_EQ(sim_stats().regions, registered);
  nic_region_ref again;
  ASSERT_EQ(nic_register(page, 4096, NIC_REG_LOCAL, &again), 0);
  EXPECT_EQ(again.cache_slot, first.cache_slot);
  EXPECT_EQ(again.lkey, first.lkey);
  nic_unregister(&again);
  nic_stats before = NIC_STATS_INIT;
  nic_get_stats(&before);
  free(page); // invalidation drops the cache's reference: the registration goes
  nic_stats after = NIC_STATS_INIT;
  nic_get_stats(&after);
  EXPECT_EQ(after.rcache_regions + 1, before.rcache_regions);
  EXPECT_EQ(sim_stats().regions, registered - 1);
}

TEST(Register, ReleasedChunkIsDeregisteredFirst) {
  // Fill two chunks, register both, free everything: the empty chunk above the one kept is
  // released, and its registration leaves the NIC with it.
  nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  std::vector<void *> blocks;
  for (size_t used = 0; used < 2 * s.chunk_size; used += 1 << 20)
    blocks.push_back(nic_malloc(1 << 20));
  for (void *b : blocks) {
    nic_region_ref r;
    ASSERT_EQ(nic_register(b, 64, NIC_REG_LOCAL, &r), 0);
  }
  const uint64_t regions = sim_stats().regions;
  for (void *b : blocks)
    free(b);
  nic_stats after = NIC_STATS_INIT;
  for (int i = 0; i < 200; i++) {
    nic_collect();
    nic_get_stats(&after);
    if (after.chunks_released > s.chunks_released) break;
    usleep(20000);
  }
  ASSERT_GT(after.chunks_released, s.chunks_released);
  EXPECT_LT(sim_stats().regions, regions);
}

} // namespace
