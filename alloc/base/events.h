/* Memory events: what the allocator and the OS-memory layer tell the layers above them. The
 * heap frees blocks, maps and gives back dataplane chunks, and the interposed mmap family sees
 * pages leave; it does not know that a registration cache, a NIC model or in-flight protection
 * exist. Those layers subscribe with a watcher (NIC_MEMORY_WATCHER), as SPDK's spdk_mem_map
 * notify callbacks let RDMA code follow memory without the allocator knowing RDMA.
 *
 * The free path pays nothing for this while nobody needs to hear of frees: nic_free_watch is zero
 * then, and when it is not, the spans free's fast paths compare with are published as zero
 * (fast_spans.h), so that every free takes the general path. Its low half counts what block
 * watchers hold (pages posted or held, profiling's standing interest), its high half what range
 * watchers hold (cached registrations). A watcher adds to its half before its own state says
 * "interested" and takes away after, so that its own count is never nonzero while the word is
 * zero, nor the spans published. */
#ifndef NIC_EVENTS_H
#define NIC_EVENTS_H

#include "fast_spans.h"
#include "registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern uint64_t nic_free_watch __attribute__((visibility("hidden"))); /* no GOT load */

/* Block watchers only: dataplane blocks are never in a range watcher's cache. */
static inline bool nic_watching_blocks(void) {
  return (uint32_t)__atomic_load_n(&nic_free_watch, __ATOMIC_RELAXED) != 0;
}
static inline bool nic_watching_ranges(void) {
  return (__atomic_load_n(&nic_free_watch, __ATOMIC_RELAXED) >> 32) != 0;
}
static inline void nic_watch_blocks(int64_t delta) {
  const uint64_t now = __atomic_add_fetch(&nic_free_watch, (uint64_t)delta, __ATOMIC_SEQ_CST);
  nic_fast_spans_follow(now - (uint64_t)delta, now);
}
static inline void nic_watch_ranges(int64_t delta) {
  const uint64_t now = __atomic_add_fetch(&nic_free_watch, (uint64_t)delta << 32, __ATOMIC_SEQ_CST);
  nic_fast_spans_follow(now - ((uint64_t)delta << 32), now);
}

/* pages_left follows every munmap and madvise that drops pages, so it is published only while a
 * watcher holds something it may concern (the registration cache: a region, or a miss
 * registering one) and says so here: one load then for the calls that find it zero. A watcher
 * adds before it may need the event (a miss, before it pins) and takes away after, with what
 * it then keeps counted already. */
extern uint64_t nic_left_watch __attribute__((visibility("hidden")));

static inline void nic_watch_left(int64_t delta) {
  __atomic_add_fetch(&nic_left_watch, (uint64_t)delta, __ATOMIC_SEQ_CST);
}

/* What realloc may do with a block a watcher cares about. */
enum nic_resize_answer {
  NIC_RESIZE_AS_USUAL = 0,
  NIC_RESIZE_MOVE = 1,    /* copy to a new block; never resize in place */
  NIC_RESIZE_REFUSE = -1, /* the block is freed already (its free was taken): EINVAL */
};

/* Every member may be NULL. */
struct nic_memory_watcher {
  const char *name;
  /* A block the program frees, before any byte of it changes. A watcher that takes the block
   * (the NIC may still read it) returns true and hands it back later with nic_release_deferred
   * (core/alloc_inline.h). Watchers that never take one set observes_only, and all of them hear of
   * the block before any watcher may take it. */
  bool observes_only;
  bool (*block_freeing)(void *p);
  /* realloc of a live block of `usable` bytes. */
  enum nic_resize_answer (*block_resizing)(void *p, size_t usable);
  /* [start, start+len) no longer holds what it held: a freed block, a fresh mapping over
   * memory that left unseen, a moved program break. */
  void (*range_stale)(uintptr_t start, size_t len);
  /* The pages of [start, start+len) are about to leave the address space or be replaced
   * (munmap, mremap, madvise dropping them, a fixed mmap or shmat over them, shmdt, dlclose). */
  void (*pages_leaving)(uintptr_t start, size_t len);
  /* The call that pages_leaving told of has returned, whether it succeeded or not: what a
   * watcher took in meanwhile (a registration pinning the pages the call then replaced) is
   * dropped here. Published by the interposed calls that take pages away, while nic_left_watch
   * is not zero; errno is the call's (kept across the watchers). */
  void (*pages_left)(uintptr_t start, size_t len);
  /* mprotect(start, len, prot), by anyone (mimalloc commits with it). A watcher whose own page
   * protection the call must not undo makes the call itself and returns true with *rc its result
   * (0 or -errno); the first that does so makes it for all. */
  bool (*protection_changing)(uintptr_t start, size_t len, int prot, int *rc);
  /* A dataplane chunk's memory is new (mapped and pinned), or about to be given back; a
   * watcher that cannot let it go yet (its registration is busy) returns false, and the chunk
   * stays. Called with the chunks lock held. */
  void (*chunk_mapped)(unsigned index, void *base, size_t len);
  bool (*chunk_releasing)(unsigned index, void *base, size_t len);
  /* One step of a live chunk, empty for the release delay, is about to be given back (its
   * pages unlocked and dropped, to be backed again when mimalloc uses it anew); false keeps it,
   * as for a chunk. Called with the chunks lock held. */
  bool (*step_releasing)(unsigned index, unsigned step, void *base, size_t len);
  /* A thread that acts for the NIC (a DMA engine) starts (true) or ends (false). */
  void (*nic_thread)(bool starting);
  /* Periodic work, from the reaper's passes (at least every few seconds while it runs). */
  void (*tick)(void);
};

#define NIC_MEMORY_WATCHER(id, ...)                                                                \
  static const struct nic_memory_watcher nic_watcher_##id NIC_REGISTRY_ENTRY(nic_watchers) = {     \
      .name = #id, __VA_ARGS__}

/* Publishers. */
bool nic_publish_block_freeing(void *p); /* true: a watcher took it */
enum nic_resize_answer nic_publish_block_resizing(void *p, size_t usable);
void nic_publish_range_stale(uintptr_t start, size_t len);
void nic_publish_pages_leaving(uintptr_t start, size_t len);
void nic_publish_pages_left_watched(uintptr_t start, size_t len);
/* After the system call, so acquire: what a watcher counted in the word before it pinned pages
 * that the call then took is seen by its watcher's handler. */
static inline void nic_publish_pages_left(uintptr_t start, size_t len) {
  if (__atomic_load_n(&nic_left_watch, __ATOMIC_ACQUIRE))
    nic_publish_pages_left_watched(start, len);
}
/* true: a watcher made the call, with result *rc */
bool nic_publish_protection_changing(uintptr_t start, size_t len, int prot, int *rc);
void nic_publish_chunk_mapped(unsigned index, void *base, size_t len);
bool nic_publish_chunk_releasing(unsigned index, void *base, size_t len);
bool nic_publish_step_releasing(unsigned index, unsigned step, void *base, size_t len);
void nic_publish_nic_thread(bool starting);
void nic_publish_tick(void);

#endif
