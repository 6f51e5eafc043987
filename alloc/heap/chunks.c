#define _GNU_SOURCE
#include "chunks.h"

#include "clock.h"
#include "config.h"
#include "forklock.h"
#include "log.h"
#include "reaper.h"
#include "vspace.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define CHUNK_SLOTS 48 /* NICMALLOC_MAX_CHUNKS limit, see config.c */

struct nic_dp_range nic_dp;
unsigned nic_chunk_epoch;
struct nic_chunk nic_chunks[CHUNK_SLOTS];
static unsigned slots_used;
static pthread_mutex_t chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t created, released, page_fallbacks, pin_failures, refusals;
static enum nic_page_kind last_kind;
/* A chunk refused (its mapping, its arena, or its pin under NICMALLOC_ON_PIN_FAIL=fail) is not
 * tried again on every request: each try maps and prefaults a whole chunk. The next try waits
 * 1 s, doubling up to a minute. */
static uint64_t retry_at_ms, backoff_ms;

/* A refused reservation (an address-space limit) is not asked for again on every dataplane
 * request: one more try a second later at most. Only the thread that wins reserving tries, or
 * two reservations could race and one be lost. */
static uint64_t reserve_retry_at_ms;
static int reserving;

static int reserve_locked(void) {
  if (__atomic_load_n(&nic_dp.base, __ATOMIC_ACQUIRE)) return 0; /* another thread did it */
  const struct nic_config *cfg = nic_config();
  size_t span = (size_t)cfg->max_chunks * cfg->chunk_size;
  void *base = nic_vspace_reserve(span, cfg->chunk_size, NIC_DATAPLANE_HINT);
  if (!base) {
    __atomic_add_fetch(&nic_vspace_refusals, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&reserve_retry_at_ms, nic_now_ms() + 1000, __ATOMIC_RELAXED);
    return -ENOMEM;
  }
  nic_dp.span = span;
  nic_dp.shift = cfg->chunk_shift;
  __atomic_store_n(&nic_dp.base, (uintptr_t)base, __ATOMIC_RELEASE);
  return 0;
}

int nic_dp_reserve_early(void) {
  if (__atomic_load_n(&nic_dp.base, __ATOMIC_ACQUIRE)) return 0;
  uint64_t retry_at = __atomic_load_n(&reserve_retry_at_ms, __ATOMIC_RELAXED);
  if (retry_at && nic_now_ms() < retry_at) return -ENOMEM;
  if (__atomic_exchange_n(&reserving, 1, __ATOMIC_ACQUIRE)) return -ENOMEM;
  int rc = reserve_locked();
  __atomic_store_n(&reserving, 0, __ATOMIC_RELEASE);
  return rc;
}

/* Said when a request meets the refusal, not at start-up: under ulimit -v most programs never
 * ask for dataplane memory. */
int nic_dp_reserve(void) {
  int rc = nic_dp_reserve_early();
  if (rc && __atomic_load_n(&reserve_retry_at_ms, __ATOMIC_RELAXED)) {
    const struct nic_config *cfg = nic_config();
    const bool fail = cfg->on_pin_fail == NIC_PIN_FAIL_FAIL;
    nic_log_fallback_once(fail,
                          "cannot reserve %zu bytes of address space for dataplane chunks below 20 "
                          "TiB (an address-space limit?); dataplane requests %s until it can",
                          (size_t)cfg->max_chunks * cfg->chunk_size,
                          fail ? "get ENOMEM (NICMALLOC_ON_PIN_FAIL=fail)"
                               : "use the control heap");
  }
  return rc;
}

unsigned nic_chunk_slots_used(void) {
  return __atomic_load_n(&slots_used, __ATOMIC_ACQUIRE);
}

/* Smaller pages than the default asks for are the common case (no hugetlb pool): a warning only
 * when NICMALLOC_PAGE_KIND named the kind. */
static void report_mapping(unsigned index, const struct nic_mapping *m, enum nic_page_kind want) {
  if (m->kind < want) {
    page_fallbacks++;
    nic_log_fallback_once(nic_config()->page_kind_set,
                          "dataplane chunk %u is backed by %s pages, not %s (hugetlb pool too "
                          "small? see /sys/kernel/mm/hugepages); further chunks are counted in "
                          "the stats",
                          index, nic_page_kind_str(m->kind), nic_page_kind_str(want));
  }
  nic_log_info("dataplane chunk %u mapped: %s pages, %s", index, nic_page_kind_str(m->kind),
               m->pinned ? "pinned" : "NOT pinned");
}

/* Returns false when the policy says an unpinned chunk must not be used. */
static bool accept_pin_result(unsigned index, const struct nic_mapping *m) {
  if (m->pinned) return true;
  pin_failures++;
  const bool fail = nic_config()->on_pin_fail == NIC_PIN_FAIL_FAIL;
  struct rlimit lim = {0, 0};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  nic_log_fallback_once(fail,
                        "cannot lock dataplane chunk %u in memory (mlock: %s; RLIMIT_MEMLOCK is "
                        "%lu bytes, CAP_IPC_LOCK lifts it); %s",
                        index, strerror(m->pin_errno), (unsigned long)lim.rlim_cur,
                        fail ? "NICMALLOC_ON_PIN_FAIL=fail: dataplane requests get ENOMEM"
                             : "using it unpinned (NICMALLOC_ON_PIN_FAIL=fallback)");
  return !fail;
}

void nic_chunk_set_state(unsigned index, enum nic_chunk_state state) {
  __atomic_store_n(&nic_chunks[index].state, state, __ATOMIC_RELEASE);
  __atomic_add_fetch(&nic_chunk_epoch, 1, __ATOMIC_RELEASE);
}

static unsigned pick_slot_locked(void) {
  for (unsigned i = 0; i < slots_used; i++)
    if (nic_chunks[i].state == NIC_CHUNK_RELEASED) return i;
  return slots_used;
}

static int refuse_for_a_while(void) {
  backoff_ms = backoff_ms ? (backoff_ms * 2 > 60000 ? 60000 : backoff_ms * 2) : 1000;
  retry_at_ms = nic_now_ms() + backoff_ms;
  return -ENOMEM;
}

static int create_locked(unsigned *index_out) {
  const struct nic_config *cfg = nic_config();
  unsigned index = pick_slot_locked();
  if (index >= cfg->max_chunks) return -ENOSPC;
  if (retry_at_ms && nic_now_ms() < retry_at_ms) return -ENOMEM;
  void *base = nic_chunk_base(index);
  struct nic_chunk *c = &nic_chunks[index];
  /* 1 GiB pages only fit chunks of 1 GiB. */
  enum nic_page_kind want = cfg->page_kind;
  if (want == NIC_PAGE_1G && cfg->chunk_size < (1ul << 30)) want = NIC_PAGE_2M;
  struct nic_mapping m;
  int rc = nic_map_chunk(base, cfg->chunk_size, want, &m);
  const bool fail = cfg->on_pin_fail == NIC_PIN_FAIL_FAIL;
  if (rc) {
    refusals++;
    nic_log_fallback_once(fail,
                          "cannot map dataplane chunk %u (%s); dataplane requests get the "
                          "NICMALLOC_ON_PIN_FAIL policy meanwhile, and it is tried again later",
                          index,
                          rc == -EDQUOT ? "it would not fit under the memory cgroup's limit, and "
                                          "prefaulting it would wake the OOM killer"
                                        : strerror(-rc));
    return refuse_for_a_while();
  }
  report_mapping(index, &m, want);
  if (!accept_pin_result(index, &m)) {
    nic_unmap_chunk(base, cfg->chunk_size);
    return refuse_for_a_while();
  }
  /* is_large=true tells mimalloc the memory is pinned: it must never decommit or reset it, or
   * the NIC's registration would point at pages the process no longer uses. A released slot
   * keeps its arena: mimalloc cannot remove one. */
  if (!c->has_arena &&
      !mi_manage_os_memory_ex(base, cfg->chunk_size, true, true, true, -1, true, &c->arena)) {
    refusals++;
    nic_log_fallback_once(fail,
                          "mimalloc refused dataplane chunk %u as an arena (at most 64 arenas per "
                          "process, and its bookkeeping needs memory: RLIMIT_DATA?); it is tried "
                          "again later",
                          index);
    nic_unmap_chunk(base, cfg->chunk_size);
    return refuse_for_a_while();
  }
  backoff_ms = 0;
  retry_at_ms = 0;
  c->has_arena = true;
  c->mapping = m;
  c->empty_since_ms = 0;
  c->registered = 0;
  c->reg_retry_at_ms = 0;
  last_kind = m.kind;
  created++;
  nic_chunk_set_state(index, NIC_CHUNK_LIVE);
  if (index == slots_used) __atomic_store_n(&slots_used, index + 1, __ATOMIC_RELEASE);
  *index_out = index;
  return 0;
}

int nic_chunk_register(unsigned index, struct nic_registration *out) {
  struct nic_chunk *c = &nic_chunks[index];
  if (__atomic_load_n(&c->registered, __ATOMIC_ACQUIRE)) {
    *out = c->reg;
    return 0;
  }
  struct nic_backend *b = nic_backend_active();
  if (!b) return -ENODEV;
again:
  pthread_mutex_lock(&chunk_lock);
  int rc = 0;
  bool refused = false;
  if (c->state != NIC_CHUNK_LIVE && c->state != NIC_CHUNK_DRAINING)
    rc = -ENOENT;
  else if (!c->registered && c->reg_retry_at_ms && nic_now_ms() < c->reg_retry_at_ms)
    rc = c->reg_error;
  /* Local write: nic_register hands this registration out for NIC_REG_LOCAL_WRITE too (receive
   * buffers), and a verbs MR without it fails every receive into the chunk. */
  else if (!c->registered &&
           (rc = nic_backend_reg(b, nic_chunk_base(index), (size_t)1 << nic_dp.shift,
                                 NIC_ACCESS_LOCAL_WRITE, &c->reg)) == 0)
    __atomic_store_n(&c->registered, 1, __ATOMIC_RELEASE);
  else if (rc == -EAGAIN) { /* pages of it are protected: wait without the lock, try again */
    pthread_mutex_unlock(&chunk_lock);
    if (nic_backend_reg_wait(nic_chunk_base(index), (size_t)1 << nic_dp.shift)) goto again;
    pthread_mutex_lock(&chunk_lock);
    rc = -ENOSPC;
    refused = true;
  } else if (rc) {
    c->reg_error = rc;
    c->reg_retry_at_ms = nic_now_ms() + 1000;
    refused = true;
  }
  if (rc == 0) *out = c->reg;
  pthread_mutex_unlock(&chunk_lock);
  if (refused)
    nic_log_warn_once("cannot register dataplane chunk %u with backend %s (%s); it is tried again "
                      "after a second, and its memory cannot reach the NIC meanwhile",
                      index, b->name, strerror(-rc));
  return rc;
}

bool nic_chunk_release_locked(unsigned index) {
  struct nic_chunk *c = &nic_chunks[index];
  /* No stale registration may outlive the memory: deregister first, or do not release. */
  if (c->registered) {
    struct nic_backend *b = nic_backend_if_open();
    if (b && b->dereg(b, &c->reg) != 0) return false;
    __atomic_store_n(&c->registered, 0, __ATOMIC_RELEASE);
  }
  nic_release_chunk_memory(nic_chunk_base(index), (size_t)1 << nic_dp.shift);
  c->mapping.pinned = false;
  c->empty_since_ms = 0;
  released++;
  nic_log_info("dataplane chunk %u released to the OS", index);
  nic_chunk_set_state(index, NIC_CHUNK_RELEASED);
  return true;
}

int nic_chunk_create(unsigned *index_out) {
  if (nic_dp_reserve()) return -ENOMEM;
  pthread_mutex_lock(&chunk_lock);
  int rc = create_locked(index_out);
  pthread_mutex_unlock(&chunk_lock);
  if (rc == 0) nic_reaper_start();
  return rc;
}

void nic_chunk_totals(struct nic_chunk_totals *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&chunk_lock);
  size_t size = (size_t)1 << nic_dp.shift;
  for (unsigned i = 0; i < slots_used; i++) {
    if (nic_chunks[i].state == NIC_CHUNK_DRAINING) out->draining++;
    if (nic_chunks[i].state != NIC_CHUNK_LIVE && nic_chunks[i].state != NIC_CHUNK_DRAINING)
      continue;
    out->live++;
    out->mapped_bytes += size;
    if (nic_chunks[i].mapping.pinned) out->pinned_bytes += size;
  }
  out->created = created;
  out->released = released;
  out->page_fallbacks = page_fallbacks;
  out->pin_failures = pin_failures;
  out->refusals = refusals;
  out->last_kind = last_kind;
  pthread_mutex_unlock(&chunk_lock);
}

void nic_chunks_lock(void) {
  pthread_mutex_lock(&chunk_lock);
}
void nic_chunks_unlock(void) {
  pthread_mutex_unlock(&chunk_lock);
}

/* A private hugetlb chunk shares its pages with the parent after fork, and the child's first
 * write to each needs a whole free huge page for copy-on-write; with the pool empty (nicmalloc
 * took what it needed) the child dies of SIGBUS. So the child swaps such chunks for ordinary
 * memory holding the same bytes, before it returns from fork. It costs a copy of each chunk, in
 * the child only, and only when the pool could not cover the writes; posix_spawn and vfork
 * children run no fork handlers and pay nothing. */
static void unshare_hugetlb_chunk(unsigned index, size_t size) {
  struct nic_chunk *c = &nic_chunks[index];
  size_t page = c->mapping.kind == NIC_PAGE_1G ? (1ul << 30) : (2ul << 20);
  if (free_hugepages_of(page) >= size / page) return;
  void *base = nic_chunk_base(index);
  void *copy = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) {
    nic_log_warn("fork child: cannot copy hugetlb chunk %u (%s); writing to it may raise SIGBUS",
                 index, strerror(errno));
    return;
  }
  memcpy(copy, base, size);
  if (mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, base) == MAP_FAILED) {
    nic_log_warn("fork child: cannot move the copy of chunk %u into place (%s)", index,
                 strerror(errno));
    munmap(copy, size);
    return;
  }
  c->mapping.kind = NIC_PAGE_4K;
}

/* Fork child, every lock fresh. */
static void after_fork_child(void) {
  reserving = 0; /* the thread that held it is gone (not held across fork: forklock.h) */
  size_t size = (size_t)1 << nic_dp.shift;
  for (unsigned i = 0; i < slots_used; i++) {
    /* mlock is not inherited, and re-locking would copy every page of every chunk. */
    nic_chunks[i].mapping.pinned = false;
    bool mapped =
        nic_chunks[i].state == NIC_CHUNK_LIVE || nic_chunks[i].state == NIC_CHUNK_DRAINING;
    if (mapped && nic_chunks[i].mapping.kind >= NIC_PAGE_2M) unshare_hugetlb_chunk(i, size);
  }
}
NIC_FORKLOCK_MUTEX(chunks, NIC_FORK_CHUNKS, &chunk_lock, after_fork_child);
