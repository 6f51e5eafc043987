#define _GNU_SOURCE
#include "chunks.h"

#include "backoff.h"
#include "bounded_lock.h"
#include "clock.h"
#include "commit_map.h"
#include "config.h"
#include "dp_commit.h"
#include "events.h"
#include "forklock.h"
#include "log.h"
#include "reaper.h"
#include "startup.h"
#include "step_pages.h"
#include "steps.h"
#include "sub_pages.h"
#include "valgrind.h"
#include "vspace.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

struct nic_dp_range nic_dp;
uint8_t nic_dp_slices[NIC_CHUNK_SLOTS << (30 - NIC_SLICE_SHIFT)];
unsigned nic_chunk_epoch;
struct nic_chunk nic_chunks[NIC_CHUNK_SLOTS];
const void *nic_step_registrations[NIC_CHUNK_SLOTS * NIC_STEPS_MAX];
uint32_t nic_step_generations[NIC_CHUNK_SLOTS * NIC_STEPS_MAX];
static unsigned slots_used;
static pthread_mutex_t chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t created, released, refusals;
/* A chunk refused (its mapping, its arena, or its first step's pin under
 * NICMALLOC_ON_PIN_FAIL=fail) is not tried again on every request: each try maps and prefaults
 * a step. The next try waits 1 s, doubling up to a minute. */
static struct nic_backoff backoff;

/* A refused reservation (an address-space limit) is not asked for again on every dataplane
 * request: one more try a second later at most. Only the thread that wins reserving tries, or
 * two reservations could race and one be lost. */
static uint64_t reserve_retry_at_ms;
static int reserving;
/* The address-space limit the last reservation was made under (0: none), and the room it left:
 * for the lines that say why the range is smaller, or missing. */
static uint64_t as_limit, as_room;

/* Chunks the range holds: NICMALLOC_MAX_CHUNKS, or, under an address-space limit set before the
 * program started (ulimit -v), as many as fit in half the room the limit leaves. The whole range
 * counts against the limit from the start, used or not; the other half stays the program's. */
static unsigned chunks_that_fit(const struct nic_config *cfg, uint64_t limit, uint64_t room) {
  if (limit == UINT64_MAX) return cfg->max_chunks;
  const uint64_t fit = room / 2 / cfg->chunk_size;
  return fit < cfg->max_chunks ? (unsigned)fit : cfg->max_chunks;
}

static unsigned chunks_to_reserve(const struct nic_config *cfg) {
  uint64_t room = 0;
  const uint64_t limit = nic_vspace_limit(&room);
  as_limit = limit == UINT64_MAX ? 0 : limit;
  as_room = room;
  return chunks_that_fit(cfg, limit, room);
}

static int reserve_locked(void) {
  if (nic_dp_reserved_span()) return 0; /* another thread did it */
  const struct nic_config *cfg = nic_config();
  unsigned chunks = chunks_to_reserve(cfg);
  void *base = NULL;
  /* Fewer chunks where the window below 20 TiB has no room for them all. */
  while (chunks && !(base = nic_vspace_reserve((size_t)chunks * cfg->chunk_size, cfg->chunk_size,
                                               NIC_DATAPLANE_HINT)))
    chunks /= 2;
  if (!base) {
    __atomic_add_fetch(&nic_vspace_refusals, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&reserve_retry_at_ms, nic_now_ms() + 1000, __ATOMIC_RELAXED);
    return -ENOMEM;
  }
  static int said_fewer;
  if (chunks < cfg->max_chunks && nic_first_time(&said_fewer)) {
    if (as_limit)
      nic_log_fallback(false,
                       "the address-space limit (RLIMIT_AS) of %llu MiB leaves %llu MiB; the "
                       "dataplane reserves address space for %u of its %u chunks, no more than "
                       "half of that",
                       (unsigned long long)(as_limit >> 20), (unsigned long long)(as_room >> 20),
                       chunks, cfg->max_chunks);
    else
      nic_log_fallback(false,
                       "the dataplane reserves address space for %u of its %u chunks, as much as "
                       "was free in the window below 20 TiB",
                       chunks, cfg->max_chunks);
  }
  const size_t span = (size_t)chunks * cfg->chunk_size;
  nic_dp.shift = cfg->chunk_shift;
  nic_dp.step_shift = cfg->step_shift;
  __atomic_store_n(&nic_dp.base, (uintptr_t)base, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_dp.rel_16, ((uintptr_t)base - nic_commit_map.base) >> 4, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_dp.span, span, __ATOMIC_RELEASE); /* last: publishes the range */
  /* Where Valgrind took mi_free, every dataplane free goes to nic_free_dp_block, which keeps
   * the block (valgrind.h). */
  nic_fast_span_set(NIC_FAST_DATAPLANE, nic_valgrind_took_malloc ? 0 : span >> 4);
  nic_dp_commit_set((uintptr_t)base, span, nic_steps_commit, nic_steps_decommit);
  return 0;
}

unsigned nic_chunks_max(void) {
  const size_t span = nic_dp_reserved_span();
  return span ? (unsigned)(span >> nic_dp.shift) : nic_config()->max_chunks;
}

unsigned nic_chunks_max_now(void) {
  if (nic_dp_reserved_span()) return nic_chunks_max();
  if (__atomic_load_n(&reserve_retry_at_ms, __ATOMIC_RELAXED)) return 0;
  const uint64_t limit = nic_vspace_soft_limit();
  if (limit == UINT64_MAX) return nic_config()->max_chunks;
  /* Read from /proc only: without it nic_vspace_limit maps trial regions up to the whole room
   * left, and another thread's mmap meanwhile could fail for a statistic. */
  const uint64_t mapped = nic_vspace_mapped();
  if (!mapped) return nic_config()->max_chunks;
  return chunks_that_fit(nic_config(), limit, mapped < limit ? limit - mapped : 0);
}

int nic_dp_reserve_early(void) {
  if (nic_dp_reserved_span()) return 0;
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
  static int said;
  int rc = nic_dp_reserve_early();
  if (rc && __atomic_load_n(&reserve_retry_at_ms, __ATOMIC_RELAXED) && nic_first_time(&said)) {
    const struct nic_config *cfg = nic_config();
    const bool fail = cfg->on_pin_fail == NIC_PIN_FAIL_FAIL;
    const char *outcome = fail ? "get ENOMEM (NICMALLOC_ON_PIN_FAIL=fail)" : "use the control heap";
    if (as_limit)
      nic_log_fallback(fail,
                       "cannot reserve address space for dataplane chunks: the address-space "
                       "limit (RLIMIT_AS) of %llu MiB leaves %llu MiB, and the chunks may take "
                       "no more than half of that, less than one chunk (NICMALLOC_CHUNK_SIZE, "
                       "%zu MiB); dataplane requests %s until it leaves more",
                       (unsigned long long)(as_limit >> 20), (unsigned long long)(as_room >> 20),
                       cfg->chunk_size >> 20, outcome);
    else
      nic_log_fallback(fail,
                       "cannot reserve %zu bytes of address space for dataplane chunks below 20 "
                       "TiB, one chunk's; dataplane requests %s until it can",
                       cfg->chunk_size, outcome);
  }
  return rc;
}

unsigned nic_chunk_slots_used(void) {
  return __atomic_load_n(&slots_used, __ATOMIC_ACQUIRE);
}

/* The chunk's slices, from its state and free watchers (chunk lock held). The committed bit is
 * mimalloc's (steps.c sets and clears it without the lock), and the sub-page bit its owner
 * thread's (sub_pages.c), so they are kept as found. */
static void write_slices(unsigned index) {
  const struct nic_chunk *c = &nic_chunks[index];
  const bool mapped = c->state == NIC_CHUNK_LIVE || c->state == NIC_CHUNK_DRAINING;
  const size_t slices = (size_t)1 << (nic_dp.shift - NIC_SLICE_SHIFT);
  const size_t per_segment = (size_t)1 << (25 - NIC_SLICE_SHIFT); /* mimalloc's 32 MiB */
  uint8_t *bytes = nic_chunk_slices(index);
  for (size_t i = 0; i < slices; i++) {
    const uint8_t value = (mapped ? NIC_DP_SLICE_MAPPED : 0) |
                          (c->free_watchers || i % per_segment == 0 ? NIC_DP_SLICE_GENERAL : 0);
    uint8_t old = __atomic_load_n(&bytes[i], __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(
        &bytes[i], &old, (uint8_t)((old & (NIC_DP_SLICE_COMMITTED | NIC_DP_SLICE_SUBPAGE)) | value),
        true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
    }
  }
}

void nic_chunk_set_state(unsigned index, enum nic_chunk_state state) {
  __atomic_store_n(&nic_chunks[index].state, state, __ATOMIC_RELEASE);
  write_slices(index);
  __atomic_add_fetch(&nic_chunk_epoch, 1, __ATOMIC_RELEASE);
}

void nic_chunk_watch_frees(unsigned index, int delta) {
  pthread_mutex_lock(&chunk_lock);
  nic_chunks[index].free_watchers += (unsigned)delta;
  write_slices(index);
  pthread_mutex_unlock(&chunk_lock);
}

static unsigned pick_slot_locked(void) {
  for (unsigned i = 0; i < slots_used; i++)
    if (nic_chunks[i].state == NIC_CHUNK_RELEASED) return i;
  return slots_used;
}

static int refuse_for_a_while(void) {
  nic_backoff_refused(&backoff);
  return -ENOMEM;
}

static int create_locked(unsigned *index_out) {
  const struct nic_config *cfg = nic_config();
  unsigned index = pick_slot_locked();
  if (index >= nic_chunks_max()) return -ENOSPC;
  if (nic_backoff_waiting(&backoff)) return -ENOMEM;
  void *base = nic_chunk_base(index);
  struct nic_chunk *c = &nic_chunks[index];
  const bool fresh = c->state == NIC_CHUNK_UNMAPPED; /* a released slot is mapped lazily still */
  const bool fail = cfg->on_pin_fail == NIC_PIN_FAIL_FAIL;
  int rc = fresh ? nic_map_lazy(base, cfg->chunk_size) : 0;
  if (rc) {
    refusals++;
    nic_log_fallback_once(fail,
                          "cannot map dataplane chunk %u (%s); dataplane requests get the "
                          "NICMALLOC_ON_PIN_FAIL policy meanwhile, and it is tried again later",
                          index, strerror(-rc));
    return refuse_for_a_while();
  }
  /* The first step now: mimalloc's first segment goes there, and a chunk whose first step
   * cannot be backed (or pinned, under NICMALLOC_ON_PIN_FAIL=fail) is refused as a whole. */
  nic_steps_forget_locked(index);
  c->mapping = (struct nic_mapping){.kind = NIC_PAGE_NONE, .pinned = false};
  if (nic_step_back_locked(index, 0)) {
    if (!nic_step_back_lock_refused()) refusals++; /* a lock refused is a pin failure */
    if (fresh) nic_unmap_chunk(base, cfg->chunk_size);
    return refuse_for_a_while();
  }
  /* Not committed: mimalloc commits inside the arena with mprotect, which backs and pins the
   * step it falls in (steps.h); its decommits and resets there do nothing (os/dp_commit.h),
   * so registered pages never leave. A released slot keeps its arena: mimalloc cannot remove
   * one. */
  if (!c->has_arena &&
      !mi_manage_os_memory_ex(base, cfg->chunk_size, false, false, true, -1, true, &c->arena)) {
    refusals++;
    nic_log_fallback_once(fail,
                          "mimalloc refused dataplane chunk %u as an arena (at most 64 arenas per "
                          "process, and its bookkeeping needs memory: RLIMIT_DATA?); it is tried "
                          "again later",
                          index);
    nic_steps_forget_locked(index);
    nic_unmap_chunk(base, cfg->chunk_size);
    return refuse_for_a_while();
  }
  nic_backoff_succeeded(&backoff);
  c->has_arena = true;
  c->empty_since_ms = 0;
  created++;
  nic_publish_chunk_mapped(index, base, cfg->chunk_size);
  nic_chunk_set_state(index, NIC_CHUNK_LIVE);
  if (index == slots_used) __atomic_store_n(&slots_used, index + 1, __ATOMIC_RELEASE);
  *index_out = index;
  return 0;
}

/* Marks every step of the chunk unbacked (remembering which were backed), then looks for slices
 * mimalloc holds committed: the order of nic_step_release_locked, for all steps at once. A
 * commit racing with it (a thread whose allocation was under way when the chunk stopped being
 * live) either set its bits before this looked, and the chunk stays, or finds its step
 * unbacked and waits for the chunk lock, behind which it finds the chunk released and maps it
 * again (nic_steps_commit). True when nothing is committed. */
static bool steps_uncommitted_locked(unsigned index, uint64_t *backed) {
  struct nic_chunk *c = &nic_chunks[index];
  const unsigned steps = nic_steps_per_chunk();
  for (unsigned s = 0; s < steps; s++)
    if (__atomic_exchange_n(&c->steps[s].backed, 0, __ATOMIC_SEQ_CST))
      backed[s / 64] |= 1ull << (s % 64);
  for (unsigned s = 0; s < steps; s++)
    if (nic_step_committed(index, s)) return false;
  return true;
}

/* The chunk stays: its steps' pages never left. */
static void steps_restore_locked(unsigned index, const uint64_t *backed) {
  for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
    if (backed[s / 64] >> (s % 64) & 1)
      __atomic_store_n(&nic_chunks[index].steps[s].backed, 1, __ATOMIC_RELEASE);
}

void nic_chunk_revive_locked(unsigned index) {
  struct nic_chunk *c = &nic_chunks[index];
  nic_steps_forget_locked(index);
  c->mapping = (struct nic_mapping){.kind = NIC_PAGE_NONE, .pinned = false};
  c->empty_since_ms = 0;
  created++; /* a chunk mapped, as by nic_chunk_create */
  nic_log_info("dataplane chunk %u mapped again for an allocation under way at its release", index);
  nic_publish_chunk_mapped(index, nic_chunk_base(index), (size_t)1 << nic_dp.shift);
  nic_chunk_set_state(index, NIC_CHUNK_LIVE);
}

bool nic_chunk_release_locked(unsigned index) {
  struct nic_chunk *c = &nic_chunks[index];
  uint64_t backed[NIC_STEPS_MAX / 64] = {0};
  /* The layers above let go of the chunk next (a registration busy with posts keeps it). */
  if (!steps_uncommitted_locked(index, backed) ||
      !nic_publish_chunk_releasing(index, nic_chunk_base(index), (size_t)1 << nic_dp.shift)) {
    steps_restore_locked(index, backed);
    return false;
  }
  nic_release_chunk_memory(nic_chunk_base(index), (size_t)1 << nic_dp.shift);
  for (unsigned s = 0; s < nic_steps_per_chunk(); s++)
    nic_step_generation_bump(index, s);
  nic_steps_forget_locked(index);
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
  if (!nic_bounded_lock(&chunk_lock, "chunks")) return;
  size_t size = (size_t)1 << nic_dp.shift, step = (size_t)1 << nic_dp.step_shift;
  for (unsigned i = 0; i < slots_used; i++) {
    if (nic_chunks[i].state == NIC_CHUNK_DRAINING) out->draining++;
    if (nic_chunks[i].state != NIC_CHUNK_LIVE && nic_chunks[i].state != NIC_CHUNK_DRAINING)
      continue;
    out->live++;
    out->mapped_bytes += size;
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
      const struct nic_step *st = &nic_chunks[i].steps[s];
      if (!st->backed) continue;
      /* Less the pages given back inside it (step_pages.h); a step locked as it is touched, or
       * with 4 KiB pages given back under live blocks (sub_pages.h), holds what is in memory. */
      const size_t dropped = nic_step_pages_dropped_bytes(i, s);
      const size_t held = st->mapping.populated && !nic_sub_pages_touched(i, s)
                              ? step - dropped
                              : nic_step_resident_locked(i, s);
      out->dropped_bytes += dropped;
      out->backed_bytes += step - dropped;
      if (st->mapping.pinned) out->pinned_bytes += held, out->pinned_steps++;
    }
  }
  struct nic_step_totals steps;
  nic_step_totals_locked(&steps);
  out->created = created;
  out->released = released;
  out->steps_backed = steps.backed;
  out->steps_released = steps.released;
  out->page_fallbacks = steps.page_fallbacks;
  out->pin_failures = steps.pin_failures;
  out->refusals = refusals;
  out->last_kind = steps.last_kind;
  pthread_mutex_unlock(&chunk_lock);
}

void nic_chunks_lock(void) {
  pthread_mutex_lock(&chunk_lock);
}
bool nic_chunks_lock_bounded(void) {
  return nic_bounded_lock(&chunk_lock, "chunks");
}
void nic_chunks_unlock(void) {
  pthread_mutex_unlock(&chunk_lock);
}

/* Fork child, every lock fresh. Hugetlb steps the child must not share were put in place
 * before (fork_hugetlb.c). */
static void after_fork_child(void) {
  reserving = 0; /* the thread that held it is gone (not held across fork: forklock.h) */
  for (unsigned i = 0; i < slots_used; i++) {
    /* mlock is not inherited, and re-locking would copy every page of every step. */
    nic_chunks[i].mapping.pinned = false;
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
      nic_chunks[i].steps[s].mapping.pinned = false;
      nic_step_not_whole_locked(i, s); /* unlocked pages may be reclaimed */
      /* The registrations are the parent's: a key of one would have the NIC reach the parent's
       * pages, not the child's copies. nic_translate reports key 0 here, as for a step not
       * registered, until the child's own backend registers it (written only where set, so
       * that the table stays shared). */
      const void **reg = nic_step_registration(i, s);
      if (*reg) *reg = NULL;
    }
  }
}
NIC_FORKLOCK_MUTEX(chunks, NIC_FORK_CHUNKS, &chunk_lock, after_fork_child);

/* Under an address-space limit the range waits for the first dataplane request: reserved here
 * it would take half of what the limit leaves from every program, most of which never ask. */
static void reserve_early(void) {
  if (nic_vspace_soft_limit() == UINT64_MAX) nic_dp_reserve_early();
}
NIC_STARTUP_STEP(dataplane_range, NIC_START_DATAPLANE, reserve_early);
