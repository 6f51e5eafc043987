/* The profiler's side tables, in mmap'd memory (no malloc from inside malloc), under one spin
 * lock: only sampled allocations, frees of possibly-sampled blocks and sends of non-dataplane
 * memory take it.
 * - Blocks: a sink sees an address inside a block (memcached sends item data from the middle of
 *   a 1 MiB slab page), so each sampled block is entered once per 64 KiB granule it covers,
 *   keyed by granule; a lookup probes its granule's chain and checks the ranges. Linear probing
 *   with backward-shift deletion keeps chains short without tombstones. Blocks past 64 MiB are
 *   entered for their first 64 MiB only.
 * - A bloom bitmap of sampled block starts lets free skip the lock for blocks never sampled.
 * - Sites: open addressing on the site hash; a full table drops new sites (counted). */
#define _GNU_SOURCE
#include "forklock.h"
#include "profile.h"

#include <string.h>
#include <sys/mman.h>

#define GRANULE_SHIFT 16
#define MAX_GRANULES 1024u
#define BLOCK_SLOTS (1u << 20) /* 32 MiB of virtual memory, touched as used */
#define BLOCK_LIMIT (BLOCK_SLOTS / 4 * 3)
#define SITE_SLOTS 8192u
#define BLOOM_BITS (1u << 20)
#define SENT 0x80000000u
#define FENCE_ONLY 0x40000000u /* recorded for NICMALLOC_FENCE=detect, not a profile sample */
#define SITE_MASK 0x3fffffffu

struct entry {
  uintptr_t granule; /* 0 = empty */
  uintptr_t start, end;
  uint32_t site; /* | SENT once the block reached a sink, | FENCE_ONLY */
  float weight;  /* 1 / probability that the block was sampled */
};

static struct entry *blocks;
static uint32_t blocks_used;
static struct nic_prof_site *sites;
static uint32_t sites_used;
static uint64_t *bloom;
static uint64_t dropped;
static int lock;

static void lock_table(void) {
  while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
    while (__atomic_load_n(&lock, __ATOMIC_RELAXED))
      __builtin_ia32_pause();
}
static void unlock_table(void) {
  __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

void *nic_prof_map(size_t bytes) {
  void *p =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

bool nic_prof_table_init(void) {
  blocks = nic_prof_map(sizeof(struct entry) * BLOCK_SLOTS);
  sites = nic_prof_map(sizeof(struct nic_prof_site) * SITE_SLOTS);
  bloom = nic_prof_map(BLOOM_BITS / 8);
  return blocks && sites && bloom;
}

static uint32_t mix(uintptr_t x, uint32_t mask) {
  x *= 0x9e3779b97f4a7c15ull;
  return (uint32_t)(x >> 40) & mask;
}

static uint32_t site_slot(uint64_t hash, const uintptr_t *frames, unsigned n) {
  for (uint32_t i = mix(hash, SITE_SLOTS - 1);; i = (i + 1) & (SITE_SLOTS - 1)) {
    struct nic_prof_site *s = &sites[i];
    if (s->hash == hash) return i;
    if (s->hash) continue;
    if (sites_used >= SITE_SLOTS / 4 * 3) return UINT32_MAX;
    sites_used++;
    s->hash = hash;
    s->nframes = n;
    memcpy(s->frames, frames, n * sizeof *frames);
    return i;
  }
}

static void insert(uintptr_t granule, uintptr_t start, uintptr_t end, uint32_t site, float w) {
  uint32_t i = mix(granule, BLOCK_SLOTS - 1);
  while (blocks[i].granule)
    i = (i + 1) & (BLOCK_SLOTS - 1);
  blocks[i] = (struct entry){granule, start, end, site, w};
  blocks_used++;
}

/* Backward-shift deletion: moves later members of the cluster into the hole when their home
 * slot does not lie cyclically in (hole, j]. */
static void erase(uint32_t hole) {
  for (uint32_t j = (hole + 1) & (BLOCK_SLOTS - 1); blocks[j].granule;
       j = (j + 1) & (BLOCK_SLOTS - 1)) {
    uint32_t home = mix(blocks[j].granule, BLOCK_SLOTS - 1);
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (stays) continue;
    blocks[hole] = blocks[j];
    hole = j;
  }
  blocks[hole].granule = 0;
  blocks_used--;
}

static uint32_t find(uintptr_t granule, uintptr_t addr, bool by_start) {
  for (uint32_t i = mix(granule, BLOCK_SLOTS - 1); blocks[i].granule;
       i = (i + 1) & (BLOCK_SLOTS - 1)) {
    const struct entry *e = &blocks[i];
    if (e->granule != granule) continue;
    if (by_start ? e->start == addr : (addr >= e->start && addr < e->end)) return i;
  }
  return UINT32_MAX;
}

static uint64_t *bloom_word(uintptr_t p, uint64_t *bit) {
  uint32_t h = mix(p, BLOOM_BITS - 1);
  *bit = 1ull << (h & 63);
  return &bloom[h / 64];
}

void nic_prof_table_sample(void *p, size_t usable, double weight, const uintptr_t *frames,
                           unsigned n) {
  uintptr_t start = (uintptr_t)p, end = start + usable;
  uintptr_t first = start >> GRANULE_SHIFT, last = (end - 1) >> GRANULE_SHIFT;
  if (last - first >= MAX_GRANULES) last = first + MAX_GRANULES - 1;
  lock_table();
  uint32_t site = site_slot(nic_prof_hash(frames, n), frames, n);
  if (site == UINT32_MAX || blocks_used + (last - first + 1) > BLOCK_LIMIT ||
      find(first, start, true) != UINT32_MAX) {
    dropped++;
    unlock_table();
    return;
  }
  struct nic_prof_site *s = &sites[site];
  s->sampled++;
  s->est_allocs += weight;
  s->est_bytes += weight * (double)usable;
  for (uintptr_t g = first; g <= last; g++)
    insert(g, start, end, site, (float)weight);
  uint64_t bit, *word = bloom_word(start, &bit);
  __atomic_or_fetch(word, bit, __ATOMIC_RELAXED);
  unlock_table();
}

void nic_prof_table_record(void *p, size_t usable, const uintptr_t *frames, unsigned n) {
  uintptr_t start = (uintptr_t)p, end = start + usable;
  uintptr_t first = start >> GRANULE_SHIFT, last = (end - 1) >> GRANULE_SHIFT;
  if (last - first >= MAX_GRANULES) last = first + MAX_GRANULES - 1;
  lock_table();
  uint32_t site = site_slot(nic_prof_hash(frames, n), frames, n);
  if (site != UINT32_MAX && blocks_used + (last - first + 1) <= BLOCK_LIMIT &&
      find(first, start, true) == UINT32_MAX) {
    for (uintptr_t g = first; g <= last; g++)
      insert(g, start, end, site | FENCE_ONLY, 0.0f);
    uint64_t bit, *word = bloom_word(start, &bit);
    __atomic_or_fetch(word, bit, __ATOMIC_RELAXED);
  }
  unlock_table();
}

bool nic_prof_table_block_at(const void *p, uintptr_t *start, uintptr_t *end, uintptr_t *frames,
                             unsigned *n) {
  if (!blocks) return false;
  uintptr_t a = (uintptr_t)p;
  lock_table();
  uint32_t i = find(a >> GRANULE_SHIFT, a, false);
  if (i != UINT32_MAX) {
    const struct nic_prof_site *s = &sites[blocks[i].site & SITE_MASK];
    *start = blocks[i].start;
    *end = blocks[i].end;
    *n = s->nframes;
    memcpy(frames, s->frames, s->nframes * sizeof *frames);
  }
  unlock_table();
  return i != UINT32_MAX;
}

void nic_prof_table_forget(void *p) {
  uint64_t bit, *word = bloom_word((uintptr_t)p, &bit);
  if (!(__atomic_load_n(word, __ATOMIC_RELAXED) & bit)) return;
  uintptr_t start = (uintptr_t)p;
  lock_table();
  uint32_t i = find(start >> GRANULE_SHIFT, start, true);
  if (i != UINT32_MAX) {
    uintptr_t end = blocks[i].end, last = (end - 1) >> GRANULE_SHIFT;
    for (uintptr_t g = start >> GRANULE_SHIFT; g <= last; g++) {
      uint32_t j = find(g, start, true);
      if (j == UINT32_MAX) break; /* past the entered granules of a huge block */
      erase(j);
    }
  }
  unlock_table();
}

void nic_prof_table_sent(const void *p, size_t len) {
  if (!__atomic_load_n(&blocks_used, __ATOMIC_RELAXED)) return;
  uintptr_t a = (uintptr_t)p;
  lock_table();
  uint32_t i = find(a >> GRANULE_SHIFT, a, false);
  if (i != UINT32_MAX && !(blocks[i].site & FENCE_ONLY)) {
    struct nic_prof_site *s = &sites[blocks[i].site & SITE_MASK];
    const struct entry e = blocks[i];
    size_t n = len < e.end - a ? len : e.end - a;
    s->sent += n;
    s->est_sent += e.weight * (double)n;
    if (!(e.site & SENT)) { /* first send from this block: count its bytes once */
      s->est_sent_blocks += e.weight * (double)(e.end - e.start);
      for (uintptr_t g = e.start >> GRANULE_SHIFT; g <= (e.end - 1) >> GRANULE_SHIFT; g++) {
        uint32_t j = find(g, e.start, true);
        if (j == UINT32_MAX) break;
        blocks[j].site |= SENT;
      }
    }
  }
  unlock_table();
}

unsigned nic_prof_table_sites(struct nic_prof_site *out, unsigned cap) {
  unsigned n = 0;
  lock_table();
  for (uint32_t i = 0; i < SITE_SLOTS && n < cap; i++)
    if (sites[i].hash && (sites[i].sampled || sites[i].sent)) /* not fence-only sites */
      out[n++] = sites[i];
  unlock_table();
  return n;
}

uint64_t nic_prof_table_dropped(void) {
  return __atomic_load_n(&dropped, __ATOMIC_RELAXED);
}

/* Held across fork (alloc/base/forklock.h); free again in the child. */
static void table_lock_reset(void) {
  lock = 0;
}

/* The child's profile is added to its parent's (profile_write.c), so it starts its counts from
 * zero; its blocks keep their sites, so what it sends from them is still counted. */
static void after_fork_child(void) {
  for (uint32_t i = 0; sites && i < SITE_SLOTS; i++) {
    struct nic_prof_site *s = &sites[i];
    if (!s->hash) continue;
    s->sampled = s->sent = 0;
    s->est_allocs = s->est_bytes = s->est_sent = s->est_sent_blocks = 0;
  }
  dropped = 0;
}
NIC_FORKLOCK_CUSTOM(profile_table, NIC_FORK_PROFILE_TABLE, lock_table, unlock_table,
                    table_lock_reset, after_fork_child);
