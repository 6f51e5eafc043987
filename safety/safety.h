/* What the safety modules share: settings, counters, and the hooks the allocator calls. */
#ifndef NIC_SAFETY_H
#define NIC_SAFETY_H

#include "events.h"
#include "nicmalloc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum nic_fence_mode { NIC_FENCE_OFF, NIC_FENCE_WAIT, NIC_FENCE_PROTECT, NIC_FENCE_DETECT };
/* How protect write-protects pages (safety/fence_protect.c): auto = userfaultfd, else mprotect. */
enum nic_fence_protect_with { NIC_PROTECT_AUTO, NIC_PROTECT_UFFD, NIC_PROTECT_MPROTECT };
enum nic_realloc_inflight { NIC_REALLOC_MOVE, NIC_REALLOC_WAIT };

struct nic_safety_config {
  size_t copy_threshold;     /* NICMALLOC_COPY_THRESHOLD: entries shorter are copied (512) */
  enum nic_fence_mode fence; /* NICMALLOC_FENCE: off | wait | protect | detect */
  unsigned fence_timeout_ms; /* NICMALLOC_FENCE_TIMEOUT_MS (5000) */
  enum nic_fence_protect_with protect_with; /* NICMALLOC_FENCE_PROTECT (auto) */
  bool detect_sites;  /* NICMALLOC_FENCE_DETECT_SAMPLE is not off: record allocation sites */
  size_t detect_mean; /* its mean bytes between recorded blocks; 0 = every block */
  enum nic_realloc_inflight realloc_inflight; /* NICMALLOC_REALLOC_INFLIGHT: move | wait */
};
/* Read from the environment on first use. */
const struct nic_safety_config *nic_safety_config(void);
/* Tests and benchmarks switch settings at run time (not thread-safe against users). */
void nic_safety_config_set(const struct nic_safety_config *c);
/* Parses a NICMALLOC_FENCE value, warning about bad values. */
enum nic_fence_mode nic_safety_fence_setting(void);

/* Counters, updated with relaxed atomics. */
struct nic_safety_counters {
  uint64_t inflight_posts, inflight_entries, deferred_frees, deferred_pending, holds;
  uint64_t recv_messages, recv_bytes, recv_held_buffers, recv_held_bytes, recv_stalls;
  uint64_t recv_capped, recv_waiting, recv_capped_dropped, recv_no_buffer;
  uint64_t bounce_bytes, fence_waits, fence_timeouts, realloc_moves;
  /* NICMALLOC_FENCE=protect|detect (safety/fence.h) */
  uint64_t fence_held_writes, fence_writers_held, fence_bypasses, fence_unprotected;
  uint64_t fence_mismatches, fence_release_errors;
};
extern struct nic_safety_counters nic_safety_ctr;
#define NIC_SAFETY_COUNT(field, n) __atomic_add_fetch(&nic_safety_ctr.field, (n), __ATOMIC_RELAXED)

/* ---- deferred.c: a watcher of the allocator's frees and reallocs (base/events.h) ---- */
/* free(): true when p was deferred (a page of it is in flight or held) or reported as a
 * double free of a block already deferred; false means free it now. */
bool nic_safety_defer_free(void *p);
/* realloc(): as usual, move it (in flight), or refuse: p is a deferred, i.e. already freed,
 * block (reported). */
enum nic_resize_answer nic_safety_realloc_check(void *p, size_t usable);
/* True when p is a block whose free is deferred (the user freed it already). */
bool nic_safety_is_deferred(const void *p);
/* True when p is a block already freed: its free key (block.h), read only at a block-aligned
 * address in mapped memory of our heaps (both words then lie on p's page), or its free still
 * deferred. For nic_sga_add and nic_hold, which must refuse such a pointer. */
bool nic_safety_was_freed(const void *p);
/* Releases deferred blocks none of whose pages is referenced any more. Any thread. */
void nic_safety_retry_deferred(void);
/* Tests: called by a retry on the thread making it, at each step of its deferred frees. */
enum nic_retry_phase {
  NIC_RETRY_TAKEN,    /* their pages were found clear; nothing written into them yet (a post of
                         a neighbour may protect the page since) */
  NIC_RETRY_KEYED,    /* their free keys are written; the allocator does not have them yet */
  NIC_RETRY_RELEASED, /* the allocator has them back; their records have not left the table */
};
extern void (*nic_safety_retry_hook)(enum nic_retry_phase phase, void *const *blocks, unsigned n);
/* Tests: called by a free that is being deferred, under the table's lock, once it found the
 * block's pages busy and before its record is in the table. */
extern void (*nic_safety_defer_hook)(const void *p);

/* Tests: called by a completion (sga_post.c) on the thread running it, after it dropped its
 * message's page references and before protect makes those pages writable again: pages that
 * look clear to the page counts may still be write-protected there. */
struct nic_sga_entry;
extern void (*nic_safety_unref_hook)(const struct nic_sga_entry *e, uint32_t n);

/* The registration-cache slot an array entry holds, 0 for none. An arena entry holds none: its
 * field keeps its step's generation at nic_sga_add instead (chunks.h), which its post compares.
 * The field is tested first: most arena entries' generation is 0, and a reset of the array
 * (every entry) then costs what it did before. */
static inline uint32_t nic_sga_entry_slot(const struct nic_sga_entry *e) {
  return e->cache_slot && e->kind != NIC_REGION_ARENA ? e->cache_slot : 0;
}

/* Whether sga is an array nic_sga_init set up (its limit within the array, its count within the
 * limit), as nic_sga_add, nic_sga_post and nic_sga_reset ask before they read its entries. An
 * array whose nic_sga_init failed is never one: the init writes an empty array of limit 0
 * before it can fail. */
static inline bool nic_sga_ready(const struct nic_sga *sga) {
  return sga && sga->max && sga->max <= NIC_SGA_CAPACITY && sga->count <= sga->max;
}

/* sga.c: caller (nic_sga_init, nic_sga_post) found no default backend: why, said once per kind
 * (a child of fork's, a start refused for a shortage that is tried again, none that can run),
 * and -ENODEV. */
int nic_sga_no_backend(const char *caller);

/* safety_stats.c: the safety fields of struct nic_stats, NIC cache pressure included. */
struct nic_stats;
void nic_safety_fill_stats(struct nic_stats *out);

/* ---- fence.c ---- */
/* Waits until no posted entry covers a page of [start, end), polling the backend; 0 or
 * -ETIMEDOUT (reported, naming who and, as then, what the caller does next). */
int nic_fence_wait(uintptr_t start, uintptr_t end, const char *who, const char *then);

#endif
