// The registration cache against a recording backend: hits and misses, merging, eviction, exact
// invalidation from free, munmap, mremap, madvise, brk, dlclose and a thread's exit, and what is
// never kept (shared or file-backed memory, another thread's stack). Limits come from the
// environment ctest gives this suite (8 regions, 64 MiB).
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "nicmalloc.h"
#include "rcache.h"
}

namespace {

const size_t kPage = 4096;

// Records every registration; an entry stays until deregistered.
struct RecordingBackend {
  nic_backend ops{};
  std::mutex mu;
  std::map<uint32_t, std::pair<uintptr_t, size_t>> live; // lkey -> range
  std::map<uint32_t, unsigned> access;                   // lkey -> access of the live ones
  uint32_t next_key = 1;
  int regs = 0, deregs = 0;
  std::atomic<bool> busy{false}; // dereg answers -EBUSY, as with a post in flight

  RecordingBackend() {
    ops.name = "recording";
    ops.caps.max_region_bytes = 16 << 20;
    ops.reg = [](nic_backend *b, void *base, size_t len, unsigned access, nic_registration *out) {
      auto *self = static_cast<RecordingBackend *>(b->priv);
      std::lock_guard<std::mutex> lock(self->mu);
      *out = {base, len, access, self->next_key++, 0, 0};
      self->live[out->lkey] = {reinterpret_cast<uintptr_t>(base), len};
      self->access[out->lkey] = access;
      self->regs++;
      return 0;
    };
    ops.dereg = [](nic_backend *b, nic_registration *reg) {
      auto *self = static_cast<RecordingBackend *>(b->priv);
      if (self->busy) return -EBUSY;
      std::lock_guard<std::mutex> lock(self->mu);
      EXPECT_EQ(self->live.erase(reg->lkey), 1u) << "deregistered twice or never registered";
      self->access.erase(reg->lkey);
      self->deregs++;
      return 0;
    };
    ops.priv = this;
  }
  bool registered(uint32_t lkey) {
    std::lock_guard<std::mutex> lock(mu);
    return live.count(lkey) != 0;
  }
  // Live registrations with a byte in [p, p+len).
  int covering(const void *p, size_t len) {
    std::lock_guard<std::mutex> lock(mu);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    int n = 0;
    for (const auto &kv : live)
      n += kv.second.first < a + len && a < kv.second.first + kv.second.second;
    return n;
  }
};

class RegistrationCache : public ::testing::Test {
protected:
  static RecordingBackend *backend;
  static void SetUpTestSuite() {
    backend = new RecordingBackend;
    nic_rcache_use_backend(&backend->ops);
  }
  void SetUp() override {
    region_ = static_cast<char *>(
        mmap(nullptr, 64 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(region_, MAP_FAILED);
    memset(region_, 7, 64 * kPage);
    nic_rcache_get_stats(nic_rcache_process(), &before_);
  }
  void TearDown() override { munmap(region_, 64 * kPage); }
  nic_rcache_stats now() {
    nic_rcache_stats s;
    nic_rcache_get_stats(nic_rcache_process(), &s);
    return s;
  }
  char *region_ = nullptr;
  nic_rcache_stats before_{};
};
RecordingBackend *RegistrationCache::backend;

TEST_F(RegistrationCache, SecondLookupOfACoveredRangeIsAHit) {
  nic_rcache_ref a, b, c;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + 100, 200, NIC_ACCESS_LOCAL, &a), 0);
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + 150, 50, NIC_ACCESS_LOCAL, &b), 0);
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + 100, 200, NIC_ACCESS_LOCAL, &c), 0);
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_EQ(a.reg.lkey, c.reg.lkey);
  EXPECT_EQ(a.reg.base, region_) << "registrations are page aligned";
  EXPECT_EQ(a.reg.len, kPage);
  auto s = now();
  EXPECT_EQ(s.misses - before_.misses, 1u);
  EXPECT_EQ(s.hits - before_.hits, 2u);
  for (auto *r : {&a, &b, &c})
    nic_rcache_release(nic_rcache_process(), r->slot);
}

TEST_F(RegistrationCache, NeighboursMergeIntoOneRegistration) {
  nic_rcache_ref a, b;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, kPage, NIC_ACCESS_LOCAL, &a), 0);
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + kPage, kPage, NIC_ACCESS_LOCAL, &b),
            0);
  EXPECT_EQ(b.reg.base, region_);
  EXPECT_EQ(b.reg.len, 2 * kPage);
  EXPECT_TRUE(backend->registered(a.reg.lkey)) << "still held by a user";
  nic_rcache_release(nic_rcache_process(), a.slot);
  EXPECT_FALSE(backend->registered(a.reg.lkey)) << "the merged-away region goes with its last user";
  nic_rcache_ref c;
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 10, 2 * kPage - 20, NIC_ACCESS_LOCAL, &c),
      0);
  EXPECT_EQ(c.reg.lkey, b.reg.lkey);
  nic_rcache_release(nic_rcache_process(), b.slot);
  nic_rcache_release(nic_rcache_process(), c.slot);
}

TEST_F(RegistrationCache, DifferentAccessIsNeverMergedOrShared) {
  nic_rcache_ref local, remote;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, kPage, NIC_ACCESS_LOCAL, &local), 0);
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + kPage, kPage, NIC_ACCESS_REMOTE_READ,
                               &remote),
            0);
  EXPECT_NE(local.reg.lkey, remote.reg.lkey);
  EXPECT_EQ(remote.reg.len, kPage) << "local-only memory must not gain remote access by merging";
  EXPECT_EQ(local.reg.access & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE), 0u);
  nic_rcache_release(nic_rcache_process(), local.slot);
  nic_rcache_release(nic_rcache_process(), remote.slot);
}

TEST_F(RegistrationCache, FreeOfABlockInsideARegionInvalidatesIt) {
  char *block = static_cast<char *>(malloc(3000));
  nic_rcache_ref ref;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), block, 3000, NIC_ACCESS_LOCAL, &ref), 0);
  free(block);
  EXPECT_EQ(now().invalidations - before_.invalidations, 1u);
  EXPECT_TRUE(backend->registered(ref.reg.lkey)) << "a user in flight keeps it registered";
  nic_rcache_release(nic_rcache_process(), ref.slot);
  EXPECT_FALSE(backend->registered(ref.reg.lkey));
  // The same address handed out again gets a new registration, never the stale one.
  char *again = static_cast<char *>(malloc(3000));
  nic_rcache_ref fresh;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), again, 3000, NIC_ACCESS_LOCAL, &fresh), 0);
  EXPECT_NE(fresh.reg.lkey, ref.reg.lkey);
  nic_rcache_release(nic_rcache_process(), fresh.slot);
  free(again);
}

TEST_F(RegistrationCache, MunmapMadviseAndMremapInvalidate) {
  nic_rcache_ref a, b, c;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, kPage, NIC_ACCESS_LOCAL, &a), 0);
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 10 * kPage, kPage, NIC_ACCESS_LOCAL, &b),
      0);
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 20 * kPage, kPage, NIC_ACCESS_LOCAL, &c),
      0);
  for (auto *r : {&a, &b, &c})
    nic_rcache_release(nic_rcache_process(), r->slot);
  ASSERT_EQ(madvise(region_, kPage, MADV_DONTNEED), 0);
  EXPECT_FALSE(backend->registered(a.reg.lkey));
  EXPECT_TRUE(backend->registered(b.reg.lkey));
  ASSERT_EQ(munmap(region_ + 10 * kPage, kPage), 0);
  EXPECT_FALSE(backend->registered(b.reg.lkey));
  void *moved = mremap(region_ + 20 * kPage, kPage, 2 * kPage, MREMAP_MAYMOVE);
  ASSERT_NE(moved, MAP_FAILED);
  EXPECT_FALSE(backend->registered(c.reg.lkey));
  EXPECT_EQ(now().invalidations - before_.invalidations, 3u);
  munmap(moved, 2 * kPage);
  // What is unmapped now cannot be registered.
  nic_rcache_ref d;
  EXPECT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 10 * kPage, 16, NIC_ACCESS_LOCAL, &d),
      -EFAULT);
}

// Pages a file or another process can change under the mapping with no call of this process's
// (a hole punched, a truncate, a write through another mapping), System V segments among them:
// a registration of them is the request's own, gone with its release, never kept for the next.
TEST_F(RegistrationCache, SharedAndFileBackedMemoryIsNeverKept) {
  const size_t len = 4 * kPage;
  const int fd = memfd_create("rcache_test", 0);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(ftruncate(fd, len), 0);
  const int id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
  ASSERT_GE(id, 0) << strerror(errno);
  struct Kind {
    const char *name;
    void *p;
  };
  const Kind kinds[] = {
      {"memfd, shared", mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)},
      {"memfd, private", mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0)},
      {"anonymous, shared",
       mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)},
      {"System V segment", shmat(id, nullptr, 0)},
  };
  shmctl(id, IPC_RMID, nullptr); // goes once detached
  const uint32_t regions = now().regions;
  for (const Kind &k : kinds) {
    ASSERT_NE(k.p, MAP_FAILED) << k.name << ": " << strerror(errno);
    memset(k.p, 1, len);
    nic_rcache_ref r;
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), static_cast<char *>(k.p) + kPage, kPage,
                                 NIC_ACCESS_LOCAL, &r),
              0)
        << k.name;
    EXPECT_TRUE(backend->registered(r.reg.lkey)) << k.name;
    EXPECT_FALSE(nic_rcache_region_current(nic_rcache_process(), r.slot)) << k.name;
    nic_rcache_release(nic_rcache_process(), r.slot);
    EXPECT_FALSE(backend->registered(r.reg.lkey)) << k.name << ": kept after its release";
  }
  EXPECT_EQ(now().regions, regions);
  for (int i = 0; i < 3; i++)
    munmap(kinds[i].p, len);
  ASSERT_EQ(shmdt(kinds[3].p), 0);
  close(fd);
  // Private anonymous memory is kept.
  nic_rcache_ref anon;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, kPage, NIC_ACCESS_LOCAL, &anon), 0);
  nic_rcache_release(nic_rcache_process(), anon.slot);
  EXPECT_TRUE(backend->registered(anon.reg.lkey));
}

// The loader unmaps a closed library itself; a registration of its static data must not outlive
// it (the next library loaded there would be sent from the old pages). Its .bss, anonymous past
// the page it shares with .data, is what is cached.
TEST_F(RegistrationCache, DlcloseInvalidatesTheLibrarysStaticData) {
  void *lib = dlopen(RCACHE_DL_MODULE, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto buffer_addr = reinterpret_cast<void *(*)()>(dlsym(lib, "rcache_dl_module_buffer_addr"));
  ASSERT_NE(buffer_addr, nullptr);
  char *buffer = static_cast<char *>(buffer_addr());
  nic_rcache_ref ref;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), buffer + 4 * kPage, 2 * kPage,
                               NIC_ACCESS_LOCAL, &ref),
            0);
  nic_rcache_release(nic_rcache_process(), ref.slot);
  ASSERT_TRUE(backend->registered(ref.reg.lkey));
  ASSERT_EQ(dlclose(lib), 0);
  EXPECT_FALSE(backend->registered(ref.reg.lkey));
}

// Regions of different access over shared pages: invalidating one page must take out every
// region that had it, however the regions lie and whichever call drops the page, or a later
// request for a neighbouring page is served a registration that pins the page since replaced.
TEST_F(RegistrationCache, InvalidatingAPageDropsEveryRegionThatHadIt) {
  struct Request {
    size_t first, pages;
    unsigned access;
  };
  struct Layout {
    const char *name;
    Request a, b;
  };
  const Layout layouts[] = {
      {"0-1 local, then 1-3 local-write", {0, 2, NIC_ACCESS_LOCAL}, {1, 3, NIC_ACCESS_LOCAL_WRITE}},
      {"1-3 local-write, then 0-1 local", {1, 3, NIC_ACCESS_LOCAL_WRITE}, {0, 2, NIC_ACCESS_LOCAL}},
      {"0-3 local, then 1 remote", {0, 4, NIC_ACCESS_LOCAL}, {1, 1, NIC_ACCESS_REMOTE_READ}},
      {"1 remote, then 0-3 local", {1, 1, NIC_ACCESS_REMOTE_WRITE}, {0, 4, NIC_ACCESS_LOCAL}},
      {"0-1 remote, then 1-2 remote",
       {0, 2, NIC_ACCESS_REMOTE_READ},
       {1, 2, NIC_ACCESS_REMOTE_READ}},
  };
  struct Path {
    const char *name;
    void (*drop)(char *page);
  };
  const Path paths[] = {
      {"madvise", [](char *page) { ASSERT_EQ(madvise(page, kPage, MADV_DONTNEED), 0); }},
      {"mmap MAP_FIXED",
       [](char *page) {
         ASSERT_EQ(mmap(page, kPage, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
                   page);
       }},
      {"munmap", [](char *page) { ASSERT_EQ(munmap(page, kPage), 0); }},
      {"mremap away",
       [](char *page) {
         void *moved = mremap(page, kPage, kPage, MREMAP_MAYMOVE | MREMAP_FIXED, page + 8 * kPage);
         ASSERT_EQ(moved, page + 8 * kPage);
       }},
  };
  for (const Path &path : paths)
    for (const Layout &layout : layouts) {
      SCOPED_TRACE(std::string(path.name) + ", " + layout.name);
      // 4 pages used, and the mremap target 8 pages further.
      char *base = static_cast<char *>(mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
      ASSERT_NE(base, MAP_FAILED);
      std::unique_ptr<char, std::function<void(char *)>> unmap(
          base, [](char *p) { munmap(p, 16 * kPage); });
      nic_rcache_ref a, b;
      ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), base + layout.a.first * kPage,
                                   layout.a.pages * kPage, layout.a.access, &a),
                0);
      ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), base + layout.b.first * kPage,
                                   layout.b.pages * kPage, layout.b.access, &b),
                0);
      nic_rcache_release(nic_rcache_process(), a.slot);
      nic_rcache_release(nic_rcache_process(), b.slot);
      path.drop(base + kPage);
      EXPECT_EQ(backend->covering(base + kPage, kPage), 0)
          << "a registration of the dropped page is still cached";
      // Page 0 is still the same memory: asking for it must not bring back a stale region.
      nic_rcache_ref again;
      ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), base, kPage, NIC_ACCESS_LOCAL, &again), 0);
      EXPECT_NE(again.reg.lkey, a.reg.lkey);
      EXPECT_NE(again.reg.lkey, b.reg.lkey);
      nic_rcache_release(nic_rcache_process(), again.slot);
    }
  // Nothing registered twice or lost track of: what the cache holds is what the backend holds.
  const uint32_t regions = now().regions;
  std::lock_guard<std::mutex> lock(backend->mu);
  EXPECT_EQ(static_cast<size_t>(backend->live.size()), static_cast<size_t>(regions));
}

// The data segment shrinks without a munmap.
TEST_F(RegistrationCache, BrkAndSbrkShrinkingInvalidate) {
  char *const start = static_cast<char *>(sbrk(0));
  ASSERT_NE(start, reinterpret_cast<char *>(-1));
  const uintptr_t s = reinterpret_cast<uintptr_t>(start);
  char *const pages = reinterpret_cast<char *>((s + kPage - 1) & ~(kPage - 1));
  ASSERT_NE(sbrk(static_cast<intptr_t>(pages - start + 4 * kPage)), reinterpret_cast<void *>(-1))
      << strerror(errno);
  memset(pages, 3, 4 * kPage);
  nic_rcache_ref low, high;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), pages, kPage, NIC_ACCESS_LOCAL, &low), 0);
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), pages + 3 * kPage, kPage, NIC_ACCESS_LOCAL, &high),
      0);
  nic_rcache_release(nic_rcache_process(), low.slot);
  nic_rcache_release(nic_rcache_process(), high.slot);
  ASSERT_NE(sbrk(-static_cast<intptr_t>(2 * kPage)), reinterpret_cast<void *>(-1));
  EXPECT_FALSE(backend->registered(high.reg.lkey)) << "sbrk gave the page back, still cached";
  EXPECT_TRUE(backend->registered(low.reg.lkey));
  ASSERT_EQ(brk(start), 0) << strerror(errno);
  EXPECT_FALSE(backend->registered(low.reg.lkey)) << "brk gave the page back, still cached";
}

// A page can leave by a path the cache never sees (a raw system call): the region cached on it
// must not survive a new mapping there.
TEST_F(RegistrationCache, ANewMappingDropsWhatAnUnseenUnmapLeft) {
  char *p = static_cast<char *>(
      mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  memset(p, 1, 4 * kPage);
  nic_rcache_ref old;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), p + kPage, 2 * kPage, NIC_ACCESS_LOCAL, &old),
            0);
  nic_rcache_release(nic_rcache_process(), old.slot);
  ASSERT_EQ(syscall(SYS_munmap, p, 4 * kPage), 0);
  ASSERT_TRUE(backend->registered(old.reg.lkey)) << "the cache saw the raw munmap?";
  char *again = static_cast<char *>(
      mmap(p, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_EQ(again, p) << "the kernel did not take the hint";
  EXPECT_FALSE(backend->registered(old.reg.lkey)) << "a region of the old pages is still cached";
  nic_rcache_ref fresh;
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), p + kPage, 2 * kPage, NIC_ACCESS_LOCAL, &fresh), 0);
  EXPECT_NE(fresh.reg.lkey, old.reg.lkey);
  nic_rcache_release(nic_rcache_process(), fresh.slot);
  munmap(p, 4 * kPage);
}

// A backend that pins pages (io_uring, verbs) pins a kept region for writing: pinned for reading
// only, a page still shared copy-on-write (the zero page of memory never written, a page shared
// with a child of fork) would stay the pinned one while the process's next write moved to a
// copy. Read-only memory cannot be pinned so: it is registered per request there. A backend that
// reads memory by address (the sim) is given what was asked.
TEST_F(RegistrationCache, WithABackendThatPinsKeptRegionsArePinnedForWriting) {
  const unsigned remote = NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE;
  auto access_of = [](uint32_t lkey) {
    std::lock_guard<std::mutex> lock(backend->mu);
    return backend->access.count(lkey) ? backend->access[lkey] : ~0u;
  };
  char *never_written = static_cast<char *>(
      mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  char *read_only =
      static_cast<char *>(mmap(nullptr, 2 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(never_written, MAP_FAILED);
  ASSERT_NE(read_only, MAP_FAILED);
  nic_rcache_ref w, r;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), never_written, kPage, NIC_ACCESS_LOCAL, &w),
            0);
  EXPECT_EQ(access_of(w.reg.lkey) & ~remote, static_cast<unsigned>(NIC_ACCESS_LOCAL_WRITE));
  nic_rcache_release(nic_rcache_process(), w.slot);
  EXPECT_TRUE(backend->registered(w.reg.lkey)) << "writable anonymous memory was not kept";
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), read_only, kPage, NIC_ACCESS_LOCAL, &r), 0);
  EXPECT_EQ(access_of(r.reg.lkey), static_cast<unsigned>(NIC_ACCESS_LOCAL));
  nic_rcache_release(nic_rcache_process(), r.slot);
  EXPECT_FALSE(backend->registered(r.reg.lkey)) << "read-only memory pinned for reading was kept";
  backend->ops.caps.pages_follow = true;
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), read_only + kPage, kPage, NIC_ACCESS_LOCAL, &r), 0);
  backend->ops.caps.pages_follow = false;
  EXPECT_EQ(access_of(r.reg.lkey), static_cast<unsigned>(NIC_ACCESS_LOCAL));
  nic_rcache_release(nic_rcache_process(), r.slot);
  EXPECT_TRUE(backend->registered(r.reg.lkey)) << "kept where pages follow the address";
  munmap(never_written, 2 * kPage);
  munmap(read_only, 2 * kPage);
}

// glibc unmaps a thread's stack after the thread (or hands it to the next thread), and maps the
// next thread's stack, by calls of its own: a registration of a thread's stack is kept while
// the thread runs and dropped at its exit, and another thread's registration of it is never
// kept, as only the owner's exit can tell.
TEST_F(RegistrationCache, AThreadsStackIsKeptUntilItsExitAndByNoOtherThread) {
  std::mutex mu;
  std::condition_variable cv;
  char *stack_buffer = nullptr;
  bool checked = false;
  nic_rcache_ref own{};
  std::thread owner([&] {
    alignas(4096) char buf[4 * kPage];
    memset(buf, 5, sizeof buf);
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), buf, kPage, NIC_ACCESS_LOCAL, &own), 0);
    nic_rcache_release(nic_rcache_process(), own.slot);
    std::unique_lock<std::mutex> lock(mu);
    stack_buffer = buf;
    cv.notify_all();
    cv.wait(lock, [&] { return checked; });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return stack_buffer != nullptr; });
  }
  EXPECT_TRUE(backend->registered(own.reg.lkey)) << "the owner's registration was not kept";
  nic_rcache_ref other;
  ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), stack_buffer + 2 * kPage, kPage,
                               NIC_ACCESS_LOCAL, &other),
            0);
  nic_rcache_release(nic_rcache_process(), other.slot);
  EXPECT_FALSE(backend->registered(other.reg.lkey)) << "another thread's stack was cached";
  {
    std::lock_guard<std::mutex> lock(mu);
    checked = true;
  }
  cv.notify_all();
  owner.join();
  EXPECT_FALSE(backend->registered(own.reg.lkey)) << "kept past its thread's exit";
}

TEST_F(RegistrationCache, LeastRecentlyUsedIsEvictedPastTheLimit) {
  // 8 regions at most; touch 12 separate pages (gaps prevent merging).
  std::vector<nic_rcache_ref> refs(12);
  for (int i = 0; i < 12; i++) {
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + 2 * i * kPage, 8, NIC_ACCESS_LOCAL,
                                 &refs[i]),
              0);
    nic_rcache_release(nic_rcache_process(), refs[i].slot);
  }
  auto s = now();
  EXPECT_LE(s.regions, 8u);
  EXPECT_GE(s.evictions - before_.evictions, 4u);
  EXPECT_FALSE(backend->registered(refs[0].reg.lkey)) << "the oldest went first";
  EXPECT_TRUE(backend->registered(refs[11].reg.lkey));
}

TEST_F(RegistrationCache, RegionsInUseAreNeverEvicted) {
  std::vector<nic_rcache_ref> held(8);
  for (int i = 0; i < 8; i++)
    ASSERT_EQ(nic_rcache_acquire(nic_rcache_process(), region_ + 2 * i * kPage, 8, NIC_ACCESS_LOCAL,
                                 &held[i]),
              0);
  nic_rcache_ref extra;
  EXPECT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 40 * kPage, 8, NIC_ACCESS_LOCAL, &extra),
      -ENOSPC);
  for (auto &r : held)
    EXPECT_TRUE(backend->registered(r.reg.lkey));
  for (auto &r : held)
    nic_rcache_release(nic_rcache_process(), r.slot);
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 40 * kPage, 8, NIC_ACCESS_LOCAL, &extra),
      0);
  nic_rcache_release(nic_rcache_process(), extra.slot);
}

TEST_F(RegistrationCache, BadRangesAreRefused) {
  nic_rcache_ref r;
  EXPECT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, 0, NIC_ACCESS_LOCAL, &r), -ERANGE);
  EXPECT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, SIZE_MAX, NIC_ACCESS_LOCAL, &r),
            -ERANGE);
  EXPECT_EQ(nic_rcache_acquire(nic_rcache_process(), region_, 32 << 20, NIC_ACCESS_LOCAL, &r),
            -ERANGE)
      << "larger than the backend's largest region";
  EXPECT_EQ(nic_rcache_acquire(nic_rcache_process(), reinterpret_cast<void *>(0x1000), 8,
                               NIC_ACCESS_LOCAL, &r),
            -EFAULT);
}

// nic_register says why a range too large for one registration is refused, with the limit: the
// backend's largest registration, or the cache's bytes (this suite's 64 MiB), never as a length
// that is 0 or wraps.
TEST_F(RegistrationCache, ARangeTooLargeForOneRegistrationIsSaidSo) {
  const size_t backend_max = backend->ops.caps.max_region_bytes, len = 80 << 20;
  char *big = static_cast<char *>(
      mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  ASSERT_NE(big, MAP_FAILED);
  nic_region_ref r;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_register(big, backend_max + kPage, NIC_REG_LOCAL, &r), -NIC_ERANGE);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("more than one registration of the backend may cover (16777216 bytes)"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("length is 0"), std::string::npos) << err;
  backend->ops.caps.max_region_bytes = 256 << 20;
  testing::internal::CaptureStderr();
  EXPECT_EQ(nic_register(big, len, NIC_REG_LOCAL, &r), -NIC_ERANGE);
  err = testing::internal::GetCapturedStderr();
  backend->ops.caps.max_region_bytes = backend_max;
  EXPECT_NE(err.find("more than the registration cache holds, NICMALLOC_RCACHE_MAX_BYTES "
                     "(67108864 bytes)"),
            std::string::npos)
      << err;
  munmap(big, len);
}

// A region dropped while a post that names it is still in flight (its user let go early): the
// backend refuses, and the registration must be retried, not forgotten with its slot reused.
TEST_F(RegistrationCache, BusyDeregistrationIsRetriedNotLost) {
  nic_rcache_ref a;
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 30 * kPage, 64, NIC_ACCESS_LOCAL, &a), 0);
  nic_rcache_release(nic_rcache_process(), a.slot);
  backend->busy = true;
  ASSERT_EQ(munmap(region_ + 30 * kPage, kPage), 0);
  EXPECT_TRUE(backend->registered(a.reg.lkey)) << "the backend said busy";
  EXPECT_EQ(now().busy, 1u);
  EXPECT_EQ(now().busy_deregs - before_.busy_deregs, 1u);
  nic_rcache_ref b; // the cache goes on meanwhile, without the busy region's slot
  ASSERT_EQ(
      nic_rcache_acquire(nic_rcache_process(), region_ + 40 * kPage, 64, NIC_ACCESS_LOCAL, &b), 0);
  EXPECT_NE(b.slot, a.slot) << "a slot whose registration is not gone was reused";
  nic_rcache_release(nic_rcache_process(), b.slot);
  nic_rcache_retry_busy(nic_rcache_process());
  EXPECT_TRUE(backend->registered(a.reg.lkey)) << "still busy: kept for the next retry";
  backend->busy = false; // the post completed
  nic_rcache_retry_busy(nic_rcache_process());
  EXPECT_FALSE(backend->registered(a.reg.lkey)) << "deregistered once the post was done";
  EXPECT_EQ(now().busy, 0u);
}

// Remote users of the same pages come and go on several threads, with local users of them in
// between: whatever the interleaving, no remote registration outlives its user, and none is
// deregistered twice (the backend checks).
TEST_F(RegistrationCache, ARemoteRegistrationLeavesWithItsUserOnEveryThread) {
  std::atomic<bool> stop{false};
  std::atomic<long> rounds{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 3; t++)
    users.emplace_back([&, t] {
      unsigned seed = t + 1;
      while (!stop) {
        const size_t page = rand_r(&seed) % 2;
        const unsigned access =
            t == 2 && rand_r(&seed) % 2 ? NIC_ACCESS_LOCAL : NIC_ACCESS_REMOTE_WRITE;
        nic_rcache_ref r;
        if (nic_rcache_acquire(nic_rcache_process(), region_ + page * kPage, kPage, access, &r) ==
            0) {
          rounds++;
          nic_rcache_release(nic_rcache_process(), r.slot);
        }
      }
    });
  while (rounds < 5000)
    std::this_thread::yield();
  stop = true;
  for (auto &u : users)
    u.join();
  const uint32_t regions = now().regions;
  std::lock_guard<std::mutex> lock(backend->mu);
  for (const auto &kv : backend->access)
    EXPECT_EQ(kv.second & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE), 0u)
        << "a remote registration outlived its user: key " << kv.first;
  EXPECT_EQ(static_cast<size_t>(backend->live.size()), static_cast<size_t>(regions));
}

TEST_F(RegistrationCache, ConcurrentUseAndInvalidationStayBalanced) {
  std::atomic<bool> stop{false};
  std::atomic<long> acquired{0};
  std::vector<std::thread> users;
  for (int t = 0; t < 3; t++)
    users.emplace_back([&, t] {
      unsigned seed = t + 1;
      while (!stop) {
        size_t page = rand_r(&seed) % 32;
        nic_rcache_ref r;
        if (nic_rcache_acquire(nic_rcache_process(), region_ + page * kPage + 8, 64,
                               NIC_ACCESS_LOCAL, &r) == 0) {
          EXPECT_LE(reinterpret_cast<uintptr_t>(r.reg.base),
                    reinterpret_cast<uintptr_t>(region_ + page * kPage));
          acquired++;
          nic_rcache_release(nic_rcache_process(), r.slot);
        }
      }
    });
  for (int i = 0; i < 200; i++)
    madvise(region_ + (i % 32) * kPage, kPage, MADV_DONTNEED);
  while (acquired < 2000)
    std::this_thread::yield();
  stop = true;
  for (auto &u : users)
    u.join();
  munmap(region_, 64 * kPage); // drops everything left over this area
  region_ = static_cast<char *>(
      mmap(nullptr, 64 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  auto s = now();
  std::lock_guard<std::mutex> lock(backend->mu);
  EXPECT_EQ(static_cast<size_t>(backend->live.size()), static_cast<size_t>(s.regions))
      << "every registration the cache dropped was deregistered exactly once";
}

} // namespace
