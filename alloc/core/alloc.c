#include "alloc.h"

#include "alloc_inline.h"
#include "config.h"
#include "control_sub_pages.h"
#include "dp_heap.h"
#include "interposed.h"
#include "log.h"
#include "mapped.h"
#include "mi_free_lists.h"
#include "mi_layout.h"
#include "nicmalloc.h"
#include "released.h"
#include "settings.h"
#include "startup.h"
#include "unchecked_commit.h"
#include "valgrind.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t nic_auto_dp_threshold = SIZE_MAX;
bool nic_free_check = true;
nic_alloc_router_fn nic_alloc_router;

static unsigned long long dataplane_fallbacks, dataplane_failures, invalid_frees, double_frees;

/* Freed control memory stays committed for the purge delay: mimalloc's own 25 ms made a program
 * that frees and reallocates megabytes fault its pages in again and again (bench/peers.sh large:
 * 25 ms 12-14 s, 100 ms 3-8 s, 250 ms 1.9 s, the same as 1000 ms). The user's
 * MIMALLOC_DECOMMIT_DELAY, if set, wins (not in secure execution: os/mimalloc_options.c). Huge
 * requests take the slow path, past the cache and the question whether their commit will be granted
 * (control_alloc), cache or no cache. */
static void tune_control_heap(const struct nic_config *cfg) {
  if (nic_secure_execution() || !getenv("MIMALLOC_DECOMMIT_DELAY"))
    mi_option_set(mi_option_decommit_delay, (long)cfg->purge_delay_ms);
  if (nic_fast_limit > NIC_HUGE_BLOCK_MIN + 1) nic_fast_limit = NIC_HUGE_BLOCK_MIN + 1;
}

/* The size rule and the free check, before the first allocation takes a fast path. */
static void fast_paths_start(void) {
  const struct nic_config *cfg = nic_config();
  if (cfg->dp_min_size) nic_auto_dp_threshold = cfg->dp_min_size;
  nic_free_check = cfg->free_check;
  if (nic_auto_dp_threshold < nic_fast_limit) nic_fast_limit = nic_auto_dp_threshold;
  tune_control_heap(cfg);
  /* Blocks over 16 MiB take nic_dp_alloc, where their segment's commit is cut (dp_huge.h). */
  nic_dp_fast_max =
      nic_dp_max_request() < NIC_HUGE_BLOCK_MIN ? nic_dp_max_request() : NIC_HUGE_BLOCK_MIN;
}
NIC_STARTUP_STEP(fast_paths, NIC_START_FAST_PATHS, fast_paths_start);

/* A control block from mimalloc (heap NULL: the default heap). A fresh huge block commits its
 * whole segment in mimalloc's arena, a commit mimalloc uses even when the kernel refused it
 * (unchecked_commit.h): asked first, so that the request gets ENOMEM. */
static void *mi_block(mi_heap_t *heap, size_t size, size_t alignment, bool zero) {
  const bool huge = size > NIC_HUGE_BLOCK_MIN;
  if (huge && !nic_commit_room(nic_huge_commit_bytes(size + alignment))) {
    errno = ENOMEM;
    return NULL;
  }
  nic_huge_commit_expected = huge;
  /* The _at variants skip the shortcut that returns misaligned blocks in 2.0.9 (#700). */
  void *p = heap                         ? nic_heap_alloc(heap, size, alignment, zero)
            : alignment <= NIC_MIN_BLOCK ? (zero ? mi_zalloc(size) : mi_malloc(size))
            : zero                       ? mi_zalloc_aligned_at(size, alignment, 0)
                                         : mi_malloc_aligned_at(size, alignment, 0);
  nic_huge_commit_expected = false;
  if (p && !zero) nic_block_mark_live(p);
  return p;
}

static void *control_alloc(size_t size, size_t alignment, bool zero) {
  size = nic_block_request(size);
  /* See nic_own_thread_create. The main thread's heap lasts as long as the process. */
  if (__builtin_expect(nic_self.lifetime_depth, 0) && !nic_on_main_thread()) {
    void *apart = nic_thread_key_block(size);
    if (!apart) apart = nic_mapped_alloc(size, alignment);
    if (apart) return apart; /* else in a heap, as before: slower thread exits, not a failure */
  }
  /* nicmalloc's own blocks (NIC_INTERNAL_SCOPE) come from a heap of their own: mimalloc pages
   * belong to one heap and span whole OS pages, so none shares a page with a program's buffer
   * that the fence write-protects while the NIC reads it (a post's bookkeeping written there
   * waited out the fence's timeout, with the program's held writes let through after it). */
  mi_heap_t *own = nic_self.internal_depth ? nic_internal_heap() : NULL;
  if (own) return mi_block(own, size, alignment, zero);
  if (nic_mapped_wanted(size, alignment)) return nic_mapped_alloc(size, alignment);
  /* A fresh huge block is zero already; a cached one would need clearing. A fresh one is made
   * as large as its address space allows, so that once cached it fits more requests. */
  if (size > NIC_HUGE_BLOCK_MIN && alignment <= NIC_MIN_BLOCK && !zero &&
      nic_config()->huge_cache_bytes) {
    void *cached = nic_huge_cache_take(size);
    if (cached) return cached;
    size = nic_huge_fresh_capacity(size);
  }
  return mi_block(NULL, size, alignment, zero);
}

/* The threshold's SIZE_MAX means "no size rule", so it must not catch a request of SIZE_MAX
 * bytes: malloc(SIZE_MAX) was called a dataplane request larger than a chunk. */
static bool wants_dataplane(size_t size, enum nic_route route) {
  if (route != NIC_ROUTE_AUTO) return route == NIC_ROUTE_DATAPLANE;
  if (!nic_thread_ready() || nic_self.internal_depth > 0) return false;
  return nic_self.scope_depth > 0 ||
         (size >= nic_auto_dp_threshold && nic_auto_dp_threshold != SIZE_MAX);
}

/* Said once per cause, the first time each one sends a request elsewhere (counted in the stats
 * every time); a warning only where NICMALLOC_ON_PIN_FAIL=fail makes it refuse the request. A
 * refused mapping, backing or pin was explained where it happened (chunks.c, steps.c), but not
 * every refusal is (a reservation under way on another thread, a retry window): the request's
 * side is said once too, so that no cause leaves a request on the control heap unsaid. */
static void report_once(enum nic_dp_failure why, size_t size, size_t alignment, bool fail) {
  const char *outcome =
      fail ? "returning ENOMEM (NICMALLOC_ON_PIN_FAIL=fail)" : "serving it from the control heap";
  switch (why) {
  case NIC_DP_TOO_LARGE:
    /* A size a chunk holds, refused for the room its alignment adds: "larger than 60 MiB" of a
     * request under 60 MiB read as a wrong limit. */
    if (size <= nic_dp_max_request() && alignment > NIC_MIN_BLOCK)
      nic_log_fallback_once(fail,
                            "a dataplane request of %zu bytes aligned to %zu bytes is larger than "
                            "a chunk can hold with that alignment (%zu bytes unaligned; see "
                            "NICMALLOC_CHUNK_SIZE); %s",
                            size, alignment, nic_dp_max_request(), outcome);
    else
      nic_log_fallback_once(fail,
                            "a dataplane request of %zu bytes is larger than a chunk can hold "
                            "(%zu; see NICMALLOC_CHUNK_SIZE); %s",
                            size, nic_dp_max_request(), outcome);
    break;
  case NIC_DP_CAP:
    /* Full may be of threads, not bytes: a thread-per-connection server past the ceiling. */
    nic_log_fallback_once(
        fail,
        "dataplane chunks are full and the cap of %u chunks is reached (%s); %s, and later ones "
        "too. Each thread with dataplane blocks holds mimalloc segments of its own, %lu MiB of a "
        "chunk's address space at least, so the chunks hold at most %zu such threads at once",
        nic_chunks_max(),
        nic_chunks_max() < nic_config()->max_chunks
            ? "fewer than NICMALLOC_MAX_CHUNKS: what the address-space limit leaves"
            : "see NICMALLOC_MAX_CHUNKS",
        outcome, (unsigned long)(NIC_MI_SEGMENT_SIZE >> 20),
        (size_t)nic_chunks_max() * (nic_config()->chunk_size / NIC_MI_SEGMENT_SIZE));
    break;
  case NIC_DP_NO_THREAD:
    nic_log_fallback_once(
        fail, "a dataplane request came from a thread past its last exit hook; %s", outcome);
    break;
  case NIC_DP_NO_TABLE:
    nic_log_fallback_once(
        fail,
        "a dataplane request of %zu bytes aligned beyond %zu bytes could not be "
        "noted in the table of over-aligned blocks (no memory for it to grow); %s",
        size, (size_t)NIC_MI_ALIGNMENT_MAX, outcome);
    break;
  case NIC_DP_MAP_REFUSED:
    /* With NICMALLOC_VERBOSE only, even under fail: where the refusal happened said it first,
     * as a warning under fail, and one cause is one warning. */
    nic_log_fallback_once(false,
                          "a dataplane request of %zu bytes found no dataplane memory: a chunk "
                          "could not be reserved, mapped, backed or pinned (the first such refusal "
                          "is said on its own); %s, and later ones too while it lasts",
                          size, outcome);
    break;
  default:
    break;
  }
}

/* A dataplane block aligned beyond what mimalloc serves: cut out of a block with room for the
 * alignment, in a chunk like any other. Its start, on a segment boundary, sends its frees past
 * mimalloc to the table (mapped.h); the bytes before it stay unused. */
static void *dp_alloc_offset(size_t size, size_t alignment, bool zero, enum nic_dp_failure *why) {
  if (size > SIZE_MAX - alignment) {
    *why = NIC_DP_TOO_LARGE;
    return NULL;
  }
  char *base = nic_dp_alloc(size + alignment, 0, zero, why);
  if (!base) return NULL;
  if (!zero) nic_block_mark_live(base);
  char *p = (char *)(((uintptr_t)base + alignment - 1) & ~(uintptr_t)(alignment - 1));
  if (nic_mapped_add(p, mi_usable_size(base) - (size_t)(p - base), base)) return p;
  nic_free_dp_block(base);
  *why = NIC_DP_NO_TABLE;
  return NULL;
}

static void *dataplane_or_policy(size_t size, size_t alignment, bool zero) {
  enum nic_dp_failure why;
  void *p = alignment <= NIC_MIN_BLOCK ? nic_dp_alloc_fast(size, zero, false) : NULL;
  if (p) return p;
  if (alignment > NIC_MI_ALIGNMENT_MAX) {
    p = dp_alloc_offset(size, alignment, zero, &why);
    if (p) return p;
  } else {
    p = nic_dp_alloc(nic_block_request(size), alignment, zero, &why);
    if (p) {
      if (!zero) nic_block_mark_live(p);
      return p;
    }
  }
  const bool fail = nic_config()->on_pin_fail == NIC_PIN_FAIL_FAIL;
  __atomic_add_fetch(fail ? &dataplane_failures : &dataplane_fallbacks, 1, __ATOMIC_RELAXED);
  report_once(why, size, alignment, fail);
  if (fail) return NULL;
  return control_alloc(size, alignment, zero);
}

void *nic_alloc_core(size_t size, size_t alignment, bool zero, enum nic_route route) {
  void *p = wants_dataplane(size, route) ? dataplane_or_policy(size, alignment, zero)
                                         : control_alloc(size, alignment, zero);
  if (!p) errno = ENOMEM;
  return p;
}

void *nic_dp_alloc_fast_failed(size_t size, bool zero, bool retry) {
  struct nic_thread *t = &nic_self;
  if (t->full_until_ns) {          /* at the cap: a free of its own did not help */
    const int saved_errno = errno; /* the pause's waits time out; the general path comes next */
    nic_dp_pause_fast(t);
    errno = saved_errno;
  }
  return retry ? nic_alloc(size, 0, zero, NIC_ROUTE_DATAPLANE) : NULL;
}

void *nic_control_alloc_failed(void) {
  errno = ENOMEM;
  return NULL;
}

/* A call that succeeds leaves errno as it found it, as glibc's malloc does: the general path
 * makes calls that may fail on the way to an answer (a stack walk's probes, mimalloc asking the
 * OS, a dataplane attempt before the control heap), and a program may test errno after a call
 * that allocates inside (getpwnam, strtod). The fast paths touch no errno. */
void *nic_alloc(size_t size, size_t alignment, bool zero, enum nic_route route) {
  return nic_alloc_from(size, alignment, zero, route, NULL);
}

void *nic_alloc_from(size_t size, size_t alignment, bool zero, enum nic_route route,
                     const void *caller) {
  const int saved_errno = errno;
  nic_startup();
  /* Profile-guided sites (routing/profile.c): sampling and routing take over when either is on.
   * Not for nicmalloc's own blocks, nor for those glibc makes for a thread's lifetime (a key
   * block from a pool, control_alloc): no site to route, and no mimalloc block to record. */
  const nic_alloc_router_fn router = __atomic_load_n(&nic_alloc_router, __ATOMIC_ACQUIRE);
  void *p =
      __builtin_expect(router != NULL, 0) && !nic_self.internal_depth && !nic_self.lifetime_depth
          ? router(size, alignment, zero, route, caller)
          : nic_alloc_core(size, alignment, zero, route);
  errno = p ? saved_errno : ENOMEM;
  return p;
}

/* NICMALLOC_DP_MIN_SIZE's blocks take the inline dataplane path where the general path would
 * come to it anyway: the thread set up and outside scopes and nicmalloc's own code (fast_span
 * is nonzero), no router (profiling, site routing), and the fast paths' limit still the size
 * rule's (site records lower it at run time). The general path cost such a malloc/free pair of
 * 4 KiB about 93 instructions more than nic_malloc's (bench/callgrind_hotpaths.sh, 4096 B). */
void *nic_alloc_auto_general(size_t size, bool zero, const void *caller) {
  if (__builtin_expect(size == SIZE_MAX, 0)) { /* no allocator can serve it, nor tries */
    nic_probe_malloc_seen = true;
    errno = ENOMEM;
    return NULL;
  }
  if (size >= nic_auto_dp_threshold &&
      __atomic_load_n(&nic_fast_limit, __ATOMIC_RELAXED) == nic_auto_dp_threshold &&
      __atomic_load_n(&nic_self.fast_span, __ATOMIC_RELAXED) != 0 &&
      __atomic_load_n(&nic_alloc_router, __ATOMIC_ACQUIRE) == NULL) {
    void *p = nic_dp_alloc_fast(size, zero, false);
    if (p) return p;
  }
  return nic_alloc_from(size, 0, zero, NIC_ROUTE_AUTO, caller);
}

/* A freed block given to realloc or malloc_usable_size is no double free; the report names the
 * use. Both count as double_frees in the statistics, as uses of a freed block. */
/* p starts where a block of the control arena may start, on a page mimalloc holds that is not
 * readable: a program that made a block's first page PROT_NONE (a guard page on a stack it
 * allocated) and freed the block without making it readable again. Its key cannot be read, so
 * it cannot be checked or freed; "not allocated by nicmalloc" would send the reader astray. */
static bool on_unreadable_heap_page(const void *p) {
  const uintptr_t offset = (uintptr_t)p - nic_commit_map.base;
  return nic_block_aligned(p) &&
         offset < __atomic_load_n(&nic_commit_map.checked, __ATOMIC_RELAXED) &&
         !nic_commit_map_readable(offset) && mi_is_in_heap_region(p);
}

/* As mimalloc's MIMALLOC_MAX_ERRORS: a program that frees or reallocs bad pointers in a loop
 * must not fill stderr with them. Every one is counted (invalid_frees, double_frees). */
#define BAD_BLOCK_LINES 256

/* 64 bits: a 32-bit count wrapped after 2^32 reports (minutes of a loop) and the lines began
 * again. */
static bool say_bad_block(void) {
  static uint64_t said;
  const uint64_t n = __atomic_fetch_add(&said, 1, __ATOMIC_RELAXED);
  if (n == BAD_BLOCK_LINES)
    nic_log_error("%u bad pointers reported; later ones are only counted (nic_get_stats: "
                  "invalid_frees, double_frees)",
                  BAD_BLOCK_LINES);
  return n < BAD_BLOCK_LINES;
}

void nic_report_bad_block(const void *p, const char *caller, enum nic_block_use use, bool freed) {
  /* A big block whose memory went back leaves neither a block nor a key to find. */
  if (!freed && nic_released_lately(p)) freed = true;
  if (!freed) {
    __atomic_add_fetch(&invalid_frees, 1, __ATOMIC_RELAXED);
    if (!say_bad_block()) return;
    if (on_unreadable_heap_page(p))
      nic_log_error("%s(%p): the page holding the block's start is not readable (protected with "
                    "mprotect and not made readable again, or unmapped): it cannot be checked "
                    "and is not freed; ignored",
                    caller, p);
    else
      nic_log_error("%s(%p): pointer was not allocated by nicmalloc; ignored", caller, p);
    return;
  }
  __atomic_add_fetch(&double_frees, 1, __ATOMIC_RELAXED);
  if (!say_bad_block()) return;
  switch (use) {
  case NIC_USE_FREE:
    nic_log_error("%s(%p): double free (block already freed); ignored", caller, p);
    break;
  case NIC_USE_REALLOC:
    nic_log_error("%s(%p): realloc of a freed block; returning NULL (EINVAL)", caller, p);
    break;
  case NIC_USE_SIZE:
    nic_log_error("%s(%p): malloc_usable_size of a freed block; returning 0", caller, p);
    break;
  }
}

void nic_report_inside_block(const void *p, const char *caller, uintptr_t block) {
  __atomic_add_fetch(&invalid_frees, 1, __ATOMIC_RELAXED);
  if (!say_bad_block()) return;
  if (block)
    nic_log_error("%s(%p): pointer was not allocated by nicmalloc (it lies %zu bytes inside the "
                  "block at %p); ignored",
                  caller, p, (size_t)((uintptr_t)p - block), (void *)block);
  else
    nic_log_error("%s(%p): pointer was not allocated by nicmalloc (it lies in nicmalloc's heap "
                  "where no block starts); ignored",
                  caller, p);
}

/* Blocks in the huge cache are freed to the program and live to mimalloc: asked first. So are
 * control blocks malloc_trim held back with their pages (control_sub_pages.h): on no list, and
 * their key may lie intact on a page still in memory. */
bool nic_key_match_freed(const void *p) {
  if (nic_maybe_huge_block(p) && nic_huge_cache_holds(p)) return true;
  if (nic_control_sub_pages_held_back(p)) return true;
  return nic_mi_block_state(p) != NIC_MI_LIVE;
}

bool nic_dropped_block_freed(const void *p) {
  if (nic_control_sub_pages_held_back(p)) return true;
  nic_control_sub_pages_note_rebuilt(p);
  return nic_mi_block_state(p) == NIC_MI_FREE;
}

/* Free's fast path reads no thread state, so what a free owes its thread is done here: a
 * set-up thread catches up with the chunk states, and a thread paused at the cap on the
 * block's chunk (whose frees come here: chunks.h) learns of the room made. */
void nic_free_dp_block(void *p) {
  struct nic_thread *t = &nic_self;
  if (__builtin_expect(nic_valgrind_took_malloc, 0)) {
    /* mi_free is Valgrind's there, which would call the block invalid (memcheck) or abort
     * (massif): kept, marked freed, as the start-up message says (valgrind.h). */
    nic_block_set_word(p, nic_free_key());
    return;
  }
  nic_free_dp_block_keyed(p, nic_free_key());
  if (t->state != NIC_THREAD_READY) return;
  if (!nic_dp_epoch_seen(t)) nic_dp_refresh(t);
  if (__builtin_expect(t->dp_fast_paused, 0)) nic_dp_freed_while_paused(t, nic_chunk_index(p));
}

/* A free a watcher took (safety/deferred.c), done now that no page of the block is referenced. */
void nic_release_deferred(void *p) {
  nic_release_block_now(p);
}

/* free never changes errno (POSIX.1-2024, and glibc since 2.33): the general path may unmap,
 * publish to watchers, decommit or report. */
void nic_free_general(void *p, const char *caller) {
  if (!p) {
    nic_probe_free_seen = true;
    return;
  }
  if (__builtin_expect(nic_thread_is_key_block(p), 0)) {
    nic_thread_key_block_free();
    return;
  }
  const int saved_errno = errno;
  if (nic_is_mapped(p) || nic_check_live_block(p, caller, NIC_USE_FREE)) nic_release_block(p);
  errno = saved_errno;
}

void nic_free_named(void *p, const char *caller) {
  nic_free_inline(p, caller);
}

size_t nic_usable_size(const void *p, const char *caller) {
  if (!p) return 0;
  if (nic_mapped_maybe(p)) {
    const size_t usable = nic_mapped_usable(p);
    if (usable) return usable;
  }
  if (!nic_check_live_block(p, caller, NIC_USE_SIZE)) return 0;
  return mi_usable_size(p);
}

static void *realloc_routed(void *p, size_t size, enum nic_route route, const char *caller,
                            bool *freed) {
  if (!p) return nic_alloc(size, 0, false, route);
  const bool mapped = nic_is_mapped(p);
  if (!mapped && !nic_check_live_block(p, caller, NIC_USE_REALLOC)) {
    errno = EINVAL;
    return NULL;
  }
  if (size == 0 && route == NIC_ROUTE_AUTO) { /* glibc frees and returns NULL */
    nic_release_block(p);
    *freed = true;
    return NULL;
  }
  const bool was_dp = nic_in_dp(p);
  if (route == NIC_ROUTE_AUTO && was_dp) route = NIC_ROUTE_DATAPLANE;
  const size_t usable = nic_block_usable(p);
  const bool heap_ok = route != NIC_ROUTE_DATAPLANE || was_dp;
  /* Safety: a block the NIC may still read is moved, or waited for (NICMALLOC_REALLOC_INFLIGHT);
   * one whose free is deferred was freed already. */
  const int inflight =
      __builtin_expect(nic_watching_blocks(), 0) ? nic_publish_block_resizing(p, usable) : 0;
  if (inflight < 0) {
    errno = EINVAL;
    return NULL;
  }
  /* Keep the block when it fits and would not waste more than half of it. */
  if (heap_ok && !inflight && size <= usable && size >= usable / 2) return p;
  /* A mapped block that stays one moves by page tables, not by copying (glibc does the same):
   * pages never written stay unwritten. */
  if (mapped && heap_ok && !inflight && nic_mapped_wanted(size, 0) && !nic_watching_ranges()) {
    void *q = nic_mapped_resize(p, size);
    if (q) return q;
  }
  void *q = nic_alloc(size, 0, false, route);
  if (!q) return NULL; /* p stays valid, as C requires */
  memcpy(q, p, size < usable ? size : usable);
  nic_release_block(p);
  return q;
}

/* As nic_alloc: an answer leaves errno as it was (a mapped block's mremap may have failed on
 * the way), and so does realloc(p, 0) freeing p, as free does; a refusal says why (EINVAL or
 * ENOMEM, set where it was decided). */
void *nic_realloc_routed(void *p, size_t size, enum nic_route route, const char *caller) {
  const int saved_errno = errno;
  bool freed = false;
  void *q = realloc_routed(p, size, route, caller, &freed);
  if (q || freed) errno = saved_errno;
  return q;
}

void nic_core_fill_stats(struct nic_stats *out) {
  out->dataplane_fallbacks = __atomic_load_n(&dataplane_fallbacks, __ATOMIC_RELAXED);
  out->dataplane_failures = __atomic_load_n(&dataplane_failures, __ATOMIC_RELAXED);
  out->invalid_frees = __atomic_load_n(&invalid_frees, __ATOMIC_RELAXED);
  out->double_frees = __atomic_load_n(&double_frees, __ATOMIC_RELAXED);
}
