/* A handful of slots under one lock: huge blocks are rare and each one saves thousands of page
 * faults, so neither the lock nor the linear scans show. Blocks are handed back to mimalloc with
 * the lock dropped, since mi_free of a huge block unmaps memory. */
#define _GNU_SOURCE
#include "huge_cache.h"

#include "block.h"
#include "bounded_lock.h"
#include "config.h"
#include "forklock.h"
#include "page.h"
#include "proc_number.h"
#include "reaper.h"
#include "released.h"
#include "startup.h"
#include "thread.h"
#include "vspace.h"

#include <mimalloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 16
#define TRIM_MIN ((size_t)1 << 20) /* a smaller unused tail is not worth a system call */

struct slot {
  void *block; /* NULL: empty */
  size_t usable;
  uint64_t freed_ms;
};

bool nic_huge_classes;

/* Under `ulimit -d` a fresh 20 MB block committed 64 MiB of the limit, and a program got a third
 * of the blocks mimalloc's or glibc's malloc give it. */
static bool data_limited(void) {
  struct rlimit lim;
  return getrlimit(RLIMIT_DATA, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY;
}

static void huge_cache_init(size_t control_arena_size) {
  nic_huge_classes = nic_config()->huge_cache_bytes && control_arena_size >= ((size_t)1 << 40) &&
                     nic_proc_number(NIC_OVERCOMMIT_MODE, NULL) != NIC_OVERCOMMIT_NEVER &&
                     !data_limited();
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(huge_cache, NIC_FORK_HUGE_CACHE, &lock, NULL);
static struct slot slots[SLOTS];
static size_t cached_bytes;
static unsigned cached_blocks;
static uint64_t hits, misses, purged;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *remove_slot(struct slot *s) {
  void *block = s->block;
  cached_bytes -= s->usable;
  cached_blocks--;
  s->block = NULL;
  return block;
}

static struct slot *oldest_slot(void) {
  struct slot *oldest = NULL;
  for (unsigned i = 0; i < SLOTS; i++)
    if (slots[i].block && (!oldest || slots[i].freed_ms < oldest->freed_ms)) oldest = &slots[i];
  return oldest;
}

static void free_all(void **blocks, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    nic_released_note(blocks[i]);
    mi_free(blocks[i]);
  }
}

bool nic_huge_cache_put(void *p) {
  const size_t cap = nic_config()->huge_cache_bytes;
  const size_t usable = mi_usable_size(p);
  if (usable <= NIC_HUGE_BLOCK_MIN) return false;
  if (usable > cap) {
    nic_released_note(p); /* the caller gives it to mimalloc */
    return false;
  }
  void *evicted[SLOTS];
  unsigned n_evicted = 0;
  pthread_mutex_lock(&lock);
  while (cached_blocks == SLOTS || cached_bytes + usable > cap)
    evicted[n_evicted++] = remove_slot(oldest_slot());
  for (unsigned i = 0; i < SLOTS; i++)
    if (!slots[i].block) {
      slots[i] = (struct slot){p, usable, now_ms()};
      break;
    }
  cached_bytes += usable;
  cached_blocks++;
  purged += n_evicted;
  pthread_mutex_unlock(&lock);
  free_all(evicted, n_evicted);
  /* Someone must give the block back if no other comes; not from a thread still setting up. */
  if (nic_self.state == NIC_THREAD_READY) nic_reaper_start();
  return true;
}

/* The kernel takes back the pages past keep; they stay mapped and read as zero, which mimalloc
 * (it treats the block as committed) never relies on. */
static void trim_tail(char *block, size_t keep, size_t usable) {
  uintptr_t start = nic_page_up((uintptr_t)block + keep);
  uintptr_t end = nic_page_down((uintptr_t)block + usable);
  if (end > start && end - start >= TRIM_MIN) madvise((void *)start, end - start, MADV_DONTNEED);
}

void *nic_huge_cache_take(size_t size) {
  if (size <= NIC_HUGE_BLOCK_MIN) return NULL;
  const size_t capacity = nic_huge_fresh_capacity(size);
  const size_t largest = capacity > 2 * size ? capacity : 2 * size;
  struct slot *best = NULL;
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < SLOTS; i++) {
    struct slot *s = &slots[i];
    /* At most twice the request, or what a fresh block for it would hold: a bigger block would
     * hold address space and page tables for nothing; the trim below gives its pages back, not
     * those. */
    if (s->block && s->usable >= size && s->usable <= largest &&
        (!best || s->usable < best->usable))
      best = s;
  }
  size_t usable = best ? best->usable : 0;
  void *block = best ? remove_slot(best) : NULL;
  if (block)
    hits++;
  else
    misses++;
  pthread_mutex_unlock(&lock);
  if (!block) return NULL;
  /* Pages within what a fresh block would span stay for the new owner: giving them back made
   * the next larger owner fault them in again (bench/peers.sh large: 159k faults instead of
   * 111k, 1.5x instead of 1.2x tcmalloc's time, for 4% less peak RSS). */
  trim_tail(block, capacity, usable);
  nic_block_mark_live(block);
  return block;
}

bool nic_huge_cache_holds(const void *p) {
  bool held = false;
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < SLOTS && !held; i++)
    held = slots[i].block == p;
  pthread_mutex_unlock(&lock);
  return held;
}

void nic_huge_cache_purge(unsigned max_age_ms) {
  void *expired[SLOTS];
  unsigned n = 0;
  pthread_mutex_lock(&lock);
  if (cached_blocks) {
    const uint64_t now = now_ms();
    for (unsigned i = 0; i < SLOTS; i++)
      if (slots[i].block && (max_age_ms == 0 || now - slots[i].freed_ms >= max_age_ms))
        expired[n++] = remove_slot(&slots[i]);
    purged += n;
  }
  pthread_mutex_unlock(&lock);
  free_all(expired, n);
}

void nic_huge_cache_stats(struct nic_huge_cache_stats *out) {
  *out = (struct nic_huge_cache_stats){0};
  if (!nic_bounded_lock(&lock, "huge block cache")) return;
  *out = (struct nic_huge_cache_stats){cached_bytes, cached_blocks, hits, misses, purged};
  pthread_mutex_unlock(&lock);
}

static void huge_cache_start(void) {
  huge_cache_init(nic_control_size);
}
NIC_STARTUP_STEP(huge_cache, NIC_START_HUGE_CACHE, huge_cache_start);
