/* The dataplane range: one virtual reservation made at start-up, carved into chunks of
 * chunk_size bytes. A pointer is dataplane iff it lies in the range (one compare), and its chunk
 * is one shift away. Each chunk, once mapped, is a mimalloc exclusive arena. */
#ifndef NIC_CHUNKS_H
#define NIC_CHUNKS_H

#include "pin.h"

#include <mimalloc.h>
#include <stdbool.h>
#include <stdint.h>

/* UNMAPPED: never used. LIVE: mapped, pinned, allocatable. DRAINING: empty for the release
 * delay; nothing new is allocated there and owners hand back their pages. RELEASED: memory given
 * back to the OS; the slot keeps its mimalloc arena and is mapped again before reuse. */
enum nic_chunk_state {
  NIC_CHUNK_UNMAPPED = 0,
  NIC_CHUNK_LIVE,
  NIC_CHUNK_DRAINING,
  NIC_CHUNK_RELEASED,
};

/* Chunk slots: the NICMALLOC_MAX_CHUNKS limit (config.c). */
#define NIC_CHUNK_SLOTS 48
/* Steps per chunk at most: a 1 GiB chunk in steps of 2 MiB (NICMALLOC_PIN_STEP's range). */
#define NIC_STEPS_MAX 512

/* mimalloc's 64 KiB slice; NIC_COMMIT_WORDS: words of a bit per slice of a 1 GiB chunk. */
#define NIC_SLICE_SHIFT 16
#define NIC_COMMIT_WORDS ((1u << (30 - NIC_SLICE_SHIFT)) / 64)

/* One step of a chunk (steps.h): the unit that is backed, pinned and registered. */
struct nic_step {
  int backed; /* prefaulted (and locked if mapping.pinned); read with acquire */
  struct nic_mapping mapping;
  uint64_t empty_since_ms; /* reaper: when mimalloc was first seen to hold none of it; 0 = not */
  /* Locked as touched, and found wholly in memory by a scan (nic_step_resident_locked): until
   * a page of it may leave, scans count it whole without asking the kernel. Chunk lock. */
  bool whole;
  /* Refused for want of a lock (NICMALLOC_ON_PIN_FAIL=fail) and not backed since: counted once
   * in pin_failures, however often mimalloc's commits ask for it again, or the chunk, refused
   * for it, is tried again (its steps forgotten keep it). Chunk lock. */
  bool pin_refused;
};

struct nic_chunk {
  int state; /* enum nic_chunk_state, read with acquire */
  bool has_arena;
  uint64_t empty_since_ms; /* reaper: when live bytes were first seen at zero; 0 = not empty */
  mi_arena_id_t arena;
  /* The kind of the step backed last, and whether every backed step is pinned (a summary for
   * the messages and the fork child; each step has its own). */
  struct nic_mapping mapping;
  struct nic_step steps[NIC_STEPS_MAX]; /* each step's backing */
  unsigned free_watchers;               /* nic_chunk_watch_frees, under the chunk lock */
};

/* Published by span, stored last with release (0 until reserved, so nothing is dataplane): a
 * reader loads span first, with acquire, and then the rest. */
struct nic_dp_range {
  uintptr_t base;
  size_t span;         /* nic_chunks_max() * chunk_size */
  unsigned shift;      /* log2(chunk_size) */
  unsigned step_shift; /* log2(NICMALLOC_PIN_STEP), at most shift */
  /* (base - nic_commit_map.base) / 16, set before free's span of the range (fast_spans.h:
   * NIC_FAST_DATAPLANE, span in 16-byte units, 0 until then): free has the control arena's
   * rotated offset already, and this taken from it is the dataplane range's (alloc_inline.h
   * says why). Both bases are set once, the control arena's at an earlier start-up step. */
  uintptr_t rel_16;
};
extern struct nic_dp_range nic_dp __attribute__((visibility("hidden")));

/* The range's span once reserved, else 0; nic_dp's other fields are set when it is not 0. */
static inline size_t nic_dp_reserved_span(void) {
  return __atomic_load_n(&nic_dp.span, __ATOMIC_ACQUIRE);
}
/* Span first: a thread reserving the range sets base before it (a base of 0 read with the new
 * span would take every address below the span for dataplane). */
static inline bool nic_in_dp(const void *p) {
  const size_t span = nic_dp_reserved_span();
  return (uintptr_t)p - nic_dp.base < span;
}
static inline unsigned nic_chunk_index(const void *p) {
  return (unsigned)(((uintptr_t)p - nic_dp.base) >> nic_dp.shift);
}
static inline void *nic_chunk_base(unsigned index) {
  return (void *)(nic_dp.base + ((uintptr_t)index << nic_dp.shift));
}
/* Which step of its chunk p lies in. */
static inline unsigned nic_step_index(const void *p) {
  return (unsigned)((((uintptr_t)p - nic_dp.base) & (((uintptr_t)1 << nic_dp.shift) - 1)) >>
                    nic_dp.step_shift);
}
static inline unsigned nic_steps_per_chunk(void) {
  return 1u << (nic_dp.shift - nic_dp.step_shift);
}
static inline void *nic_step_base(unsigned index, unsigned step) {
  return (char *)nic_chunk_base(index) + ((size_t)step << nic_dp.step_shift);
}

/* Reserves the range. Idempotent. Returns 0 or -errno (then no dataplane memory exists). */
int nic_dp_reserve(void);
/* The same at start-up, before anything asked for dataplane memory: says nothing. */
int nic_dp_reserve_early(void);
/* The cap on chunks: NICMALLOC_MAX_CHUNKS, or once the range is reserved as many as it holds
 * (fewer under an address-space limit). */
unsigned nic_chunks_max(void);
/* For the statistics (chunks_max): as many as the range holds once reserved; before, as many as
 * a reservation would take now (NICMALLOC_MAX_CHUNKS, fewer under an address-space limit), and 0
 * while the last one was refused (no chunk fitted; tried again at a dataplane request). */
unsigned nic_chunks_max_now(void);
/* Bumped on every chunk state change, and when the stats want fresh usage figures: threads
 * compare it with the value they last saw to learn, with one load, that they must refresh. */
extern unsigned nic_chunk_epoch __attribute__((visibility("hidden")));
void nic_chunk_set_state(unsigned index, enum nic_chunk_state state);

/* Maps, pins and hands a chunk to mimalloc: a released slot first (same arena), else a new
 * one. Returns 0 and the index, -ENOSPC at the cap, or -ENOMEM when mapping or (with
 * NICMALLOC_ON_PIN_FAIL=fail) pinning failed. Called only under nic_dp_grow_lock (dp_heap.c). */
int nic_chunk_create(unsigned *index_out);
/* Inline: nic_translate and the dataplane paths look a chunk up on every call. */
extern struct nic_chunk nic_chunks[] __attribute__((visibility("hidden")));
static inline struct nic_chunk *nic_chunk_at(unsigned index) {
  return &nic_chunks[index];
}
/* The registration layer's record of each step's registration while it has one (set with
 * release, NULL otherwise; regcache/cache/chunk_reg.c), opaque to the heap: one flat table in
 * the range's step order, so that nic_translate finds it with one shift of the offset. */
extern const void *nic_step_registrations[NIC_CHUNK_SLOTS * NIC_STEPS_MAX]
    __attribute__((visibility("hidden")));
static inline const void **nic_step_registration(unsigned index, unsigned step) {
  return &nic_step_registrations[((size_t)index << (nic_dp.shift - nic_dp.step_shift)) + step];
}
/* Each step's generation, in the same order: bumped whenever the step's memory is given back
 * (the step's release, or its chunk's), under the chunk lock. An array entry records it at
 * nic_sga_add, and its post finds the block freed from a changed one, even where the step was
 * registered again under the very key the entry holds (an io_uring fixed-buffer slot is taken
 * lowest first). */
extern uint32_t nic_step_generations[NIC_CHUNK_SLOTS * NIC_STEPS_MAX]
    __attribute__((visibility("hidden")));
static inline uint32_t *nic_step_generation_at(unsigned index, unsigned step) {
  return &nic_step_generations[((size_t)index << (nic_dp.shift - nic_dp.step_shift)) + step];
}
static inline void nic_step_generation_bump(unsigned index, unsigned step) {
  __atomic_add_fetch(nic_step_generation_at(index, step), 1, __ATOMIC_RELEASE);
}
/* The generation of the step holding p, a dataplane address. */
static inline uint32_t nic_step_generation_of(const void *p) {
  return __atomic_load_n(&nic_step_generations[((uintptr_t)p - nic_dp.base) >> nic_dp.step_shift],
                         __ATOMIC_ACQUIRE);
}
/* One byte per 64 KiB slice of the range (mimalloc's slice), so that free's dataplane path finds
 * a block's with a shift of the offset and decides with one compare, instead of a state in a
 * 14 KiB record and a second map. Its bits:
 * - NIC_DP_SLICE_MAPPED: the chunk is LIVE or DRAINING (written with its state, chunk lock);
 * - NIC_DP_SLICE_GENERAL: frees there take the general path: the first slice of every 32 MiB,
 *   where a mimalloc segment (aligned so) keeps its header and no block starts (a pointer at the
 *   boundary itself would have mi_free look at the segment below it), and every slice of a chunk
 *   a thread paused at the cap waits on (nic_chunk_watch_frees);
 * - NIC_DP_SLICE_COMMITTED: mimalloc holds the slice committed (set on its commits, cleared on
 *   its decommits, steps.c, with atomic or/and: commits of backed steps take no lock). A step it
 *   holds nothing committed in can be given back, as mimalloc commits again, through the chunk
 *   lock, before it touches any byte there. No live block lies outside a committed slice: a
 *   block there is freed, and its bytes (the free key) may be gone (a released step, or a unit
 *   given back inside a live step: steps.h, step_pages.h), so nothing reads them.
 * - NIC_DP_SLICE_SUBPAGE: a block of a mimalloc page in the slice was taken off its free lists
 *   and 4 KiB pages under it given back (sub_pages.h): a free there asks whether its block is
 *   one of those before it reads the key, which may read as zeros. Set and cleared by the
 *   owner thread of the page, and cleared with the slice's decommit.
 * A slice is NIC_DP_SLICE_FAST, frees there taking their fast path, only with exactly
 * MAPPED | COMMITTED. */
enum {
  NIC_DP_SLICE_MAPPED = 1,
  NIC_DP_SLICE_GENERAL = 2,
  NIC_DP_SLICE_COMMITTED = 4,
  NIC_DP_SLICE_SUBPAGE = 8,
  NIC_DP_SLICE_FAST = NIC_DP_SLICE_MAPPED | NIC_DP_SLICE_COMMITTED,
};
extern uint8_t nic_dp_slices[NIC_CHUNK_SLOTS << (30 - NIC_SLICE_SHIFT)]
    __attribute__((visibility("hidden")));
static inline uint8_t *nic_chunk_slices(unsigned index) {
  return &nic_dp_slices[(size_t)index << (nic_dp.shift - NIC_SLICE_SHIFT)];
}
/* Frees into chunk index take the general path while the count is above zero (delta +1 or -1;
 * takes the chunk lock). */
void nic_chunk_watch_frees(unsigned index, int delta);
/* Live and draining chunks are mapped: a pointer into one can be read. */
static inline bool nic_chunk_readable(unsigned index) {
  return __atomic_load_n(nic_chunk_slices(index), __ATOMIC_ACQUIRE) & NIC_DP_SLICE_MAPPED;
}
/* The slice at units_16 16-byte units (less than nic_dp.span / 16) into the range is mapped,
 * committed, may start a block, and nothing asks its frees to take the general path. */
static inline bool nic_dp_units_fast(uintptr_t units_16) {
  return __atomic_load_n(&nic_dp_slices[units_16 >> (NIC_SLICE_SHIFT - 4)], __ATOMIC_ACQUIRE) ==
         NIC_DP_SLICE_FAST;
}
/* Whether any slice of [first, last] (slice numbers inside chunk index) is committed: eight
 * bytes a load where they are aligned (the reaper asks for every step of every chunk). */
typedef uint64_t __attribute__((may_alias)) nic_marks8;
static inline bool nic_slices_committed(unsigned index, size_t first, size_t last) {
  const uint8_t *bytes = nic_chunk_slices(index);
  const uint64_t committed8 = 0x0101010101010101ull * NIC_DP_SLICE_COMMITTED;
  for (size_t i = first; i <= last;) {
    if ((i & 7) == 0 && last - i >= 7) {
      if (__atomic_load_n((const nic_marks8 *)&bytes[i], __ATOMIC_SEQ_CST) & committed8)
        return true;
      i += 8;
    } else if (__atomic_load_n(&bytes[i++], __ATOMIC_SEQ_CST) & NIC_DP_SLICE_COMMITTED) {
      return true;
    }
  }
  return false;
}
/* Whether mimalloc holds the slice at offset (less than nic_dp.span) into the range committed. */
static inline bool nic_dp_slice_held(uintptr_t offset) {
  return __atomic_load_n(&nic_dp_slices[offset >> NIC_SLICE_SHIFT], __ATOMIC_ACQUIRE) &
         NIC_DP_SLICE_COMMITTED;
}
/* The byte of the slice at offset (less than nic_dp.span) into the range: the general free path
 * asks whether mimalloc holds it committed, and whether blocks are held back there, before it
 * reads a block's key. */
static inline uint8_t nic_dp_slice_byte(uintptr_t offset) {
  return __atomic_load_n(&nic_dp_slices[offset >> NIC_SLICE_SHIFT], __ATOMIC_ACQUIRE);
}
/* Number of chunk slots ever mapped (live chunks are among the first this many). */
unsigned nic_chunk_slots_used(void);

/* Gives a drained chunk's memory back to the OS (caller holds the chunk lock). Returns false,
 * leaving it DRAINING, when mimalloc still holds any slice of it committed (a live block, a
 * segment, a cached segment, or an allocation under way: reaper.c) or a watcher cannot let it
 * go yet (events.h: its registration still has posts in flight). */
bool nic_chunk_release_locked(unsigned index);

/* mimalloc commits in a released chunk: an allocation that was under way when the chunk was
 * given back (reaper.c). The chunk is made LIVE again, as nic_chunk_create would (its range is
 * still mapped, backed by nothing; the caller backs the step), so that the allocation lands in
 * a live chunk rather than failing, which would leave mimalloc's claim on the arena behind for
 * good. Chunk lock held. */
void nic_chunk_revive_locked(unsigned index);

struct nic_chunk_totals {
  uint32_t live, draining;
  size_t mapped_bytes, pinned_bytes, backed_bytes, dropped_bytes;
  uint32_t pinned_steps;
  uint64_t steps_backed, steps_released; /* over the process lifetime */
  uint64_t created, released, page_fallbacks, pin_failures;
  uint64_t refusals; /* chunks the kernel would not map or mimalloc not take as an arena */
  enum nic_page_kind last_kind;
};
void nic_chunk_totals(struct nic_chunk_totals *out);

/* The chunk lock (the reaper's release; fork holds it across: forklock.h, where the child
 * also finds its chunks unpinned, as mlock is not inherited, and hugetlb chunks safe to write). */
void nic_chunks_lock(void);
/* nic_chunks_lock, which may give up under nic_bounded_begin (bounded_lock.h): false then. */
bool nic_chunks_lock_bounded(void);
void nic_chunks_unlock(void);

#endif
