#include "pressure.h"
#include "bounce.h"
#include "bounded_lock.h"
#include "chunk_reg.h"

#include "chunks.h"
#include "forklock.h"
#include "page.h"
#include "rcache.h"
#include "tcache_model.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MODEL_PAGE 4096u
#define BUSY_SLOTS 64 /* regions tracked for the report; the busiest survive */
/* Copying starts once the working set is over the capacity and stops only once it is back under
 * 90% of it: between the two, the decision stays as it was, so that a working set at the
 * capacity does not switch copying on and off from one post to the next. */
#define HIGH_FROM_PCT 100u
#define LOW_UNDER_PCT 90u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(pressure, NIC_FORK_PRESSURE, &lock, NULL);
/* The settings are read by the first post or stats read; the model (about 1.4 MiB for the cx5
 * preset's 16,384 entries, and up to 7 MiB more as its window of 65,536 lookups fills) is built
 * by the first post only, so a program that posts nothing and reads its statistics
 * (NICMALLOC_STATS at exit) does not pay for it. */
static pthread_once_t params_once = PTHREAD_ONCE_INIT, model_once = PTHREAD_ONCE_INIT;
static struct nic_tcache *model; /* NULL before the first post, or when the settings are unusable */
static struct nic_tcache_params params;
static int high;
static uint64_t copies;
static struct busy {
  uint64_t region, posts;
  uintptr_t addr; /* an address in it, for the report */
} busy[BUSY_SLOTS];

static void read_params(void) {
  nic_tcache_params_from_env(&params);
  if (params.window == 0) params.window = params.capacity * NIC_TCACHE_WINDOW_PER_ENTRY;
  params.page_size = MODEL_PAGE;
}

static void make_model(void) {
  pthread_once(&params_once, read_params);
  __atomic_store_n(&model, nic_tcache_new(&params), __ATOMIC_RELEASE);
}

/* Whether the entry's translations are its chunk step's: an arena entry, or a copy in a bounce
 * slab of dataplane memory (a slab the chunks could not hold is a registration-cache region). */
static bool in_step(const struct nic_sga_entry *e) {
  return e->kind == NIC_REGION_ARENA || (e->kind == NIC_SGA_BOUNCE && nic_in_dp(e->addr));
}

/* Chunk steps and cache regions get distinct ids (cache lkeys are below 2^32). */
static uint64_t region_of(const struct nic_sga_entry *e, bool step) {
  if (step)
    return (1ull << 32) |
           ((uint64_t)nic_chunk_index(e->addr) * NIC_STEPS_MAX + nic_step_index(e->addr));
  return e->lkey;
}

static void count_busy(uint64_t region, uintptr_t addr) {
  struct busy *least = &busy[0];
  for (unsigned i = 0; i < BUSY_SLOTS; i++) {
    if (busy[i].posts && busy[i].region == region) {
      busy[i].posts++;
      return;
    }
    if (busy[i].posts < least->posts) least = &busy[i];
  }
  *least = (struct busy){region, 1, addr}; /* evicts the quietest */
}

void nic_pressure_note(const struct nic_sga_entry *entries, unsigned n) {
  pthread_once(&model_once, make_model);
  if (!model) return;
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < n; i++) {
    /* Every entry, copies too: the NIC reads a copy through its bounce slab's translations,
     * which take room in its cache like any other. Leaving them out also left the working set
     * as it was for as long as every post was copied, and so the copying on for good. */
    const struct nic_sga_entry *e = &entries[i];
    const bool step = in_step(e);
    uintptr_t addr = (uintptr_t)e->addr;
    size_t len = e->len;
    /* One model, one page size: a chunk on huge pages needs one translation per huge page, so
     * its addresses are scaled to count each huge page as one model page. */
    if (step) {
      unsigned kind =
          nic_chunk_at(nic_chunk_index(e->addr))->steps[nic_step_index(e->addr)].mapping.kind;
      unsigned shift = kind == NIC_PAGE_1G ? 30 : kind >= NIC_PAGE_THP ? 21 : 12;
      uintptr_t first = addr >> shift, last = (addr + len - 1) >> shift;
      addr = first * MODEL_PAGE;
      len = (last - first + 1) * MODEL_PAGE;
    }
    nic_tcache_access(model, region_of(e, step), 0, addr, len);
    count_busy(region_of(e, step), (uintptr_t)e->addr);
  }
  struct nic_tcache_counters c;
  nic_tcache_get(model, &c);
  /* Partial figures (the window started afresh, out of memory) leave the decision as it was. */
  const uint64_t pct_scaled = c.ws_entries * 100;
  if (c.ws_valid && pct_scaled > (uint64_t)params.capacity * HIGH_FROM_PCT)
    __atomic_store_n(&high, 1, __ATOMIC_RELAXED);
  else if (c.ws_valid && pct_scaled < (uint64_t)params.capacity * LOW_UNDER_PCT)
    __atomic_store_n(&high, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}

bool nic_pressure_high(void) {
  return __atomic_load_n(&high, __ATOMIC_RELAXED);
}

void nic_pressure_count_copy(void) {
  __atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED);
}

void nic_pressure_fill_stats(struct nic_stats *out) {
  pthread_once(&params_once, read_params);
  out->nic_cache_capacity = params.capacity;
  out->pressure_copies = __atomic_load_n(&copies, __ATOMIC_RELAXED);
  /* What the NIC must hold for everything registered now: each chunk at its page size, each
   * cache region and each registration of a request's own at 4 KiB. */
  uint64_t entries = 0, regions = 0;
  size_t step = (size_t)1 << nic_dp.step_shift;
  for (unsigned i = 0; i < nic_chunk_slots_used(); i++)
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
      if (!nic_chunk_registration(i, s)) continue;
      enum nic_page_kind kind = nic_chunk_at(i)->steps[s].mapping.kind;
      size_t page = kind == NIC_PAGE_1G    ? (1ul << 30)
                    : kind >= NIC_PAGE_THP ? (2ul << 20)
                                           : NIC_PAGE_SIZE;
      regions++;
      entries += params.mpt_per_region + step / page;
    }
  struct nic_rcache_stats rc;
  nic_rcache_get_stats(nic_rcache_process(), &rc);
  regions += rc.regions + rc.own_regions;
  entries += (rc.regions + rc.own_regions) * params.mpt_per_region +
             (rc.bytes + rc.own_bytes) / NIC_PAGE_SIZE;
  out->nic_regions = regions;
  out->nic_entries_needed = entries;
  if (!__atomic_load_n(&model, __ATOMIC_ACQUIRE)) return; /* nothing posted: no working set */
  if (!nic_bounded_lock(&lock, "NIC cache pressure")) return;
  struct nic_tcache_counters c;
  nic_tcache_get(model, &c);
  pthread_mutex_unlock(&lock);
  out->nic_working_set = c.ws_entries;
  /* Rounded up: over 100% as soon as the working set is over the capacity, where copying starts
   * (201 entries of 200 read 100% rounded down). */
  out->nic_pressure_pct =
      params.capacity ? (uint32_t)((c.ws_entries * 100 + params.capacity - 1) / params.capacity)
                      : 0;
  out->nic_modeled_misses = c.misses;
}

void nic_pressure_describe(char *buf, size_t cap) {
  struct busy top[3] = {{0}};
  buf[0] = '\0';
  if (!nic_bounded_lock(&lock, "NIC cache pressure")) return;
  for (unsigned i = 0; i < BUSY_SLOTS; i++)
    for (unsigned k = 0; k < 3; k++)
      if (busy[i].posts > top[k].posts) {
        memmove(&top[k + 1], &top[k], (2 - k) * sizeof top[0]);
        top[k] = busy[i];
        break;
      }
  pthread_mutex_unlock(&lock);
  size_t used = 0;
  buf[0] = '\0';
  for (unsigned k = 0; k < 3 && top[k].posts && used < cap; k++) {
    const unsigned id = (unsigned)(top[k].region & 0xffffffffu); /* chunk x NIC_STEPS_MAX + step */
    int n =
        top[k].region >> 32
            ? snprintf(buf + used, cap - used, "%schunk %u step %u: %llu entries", k ? ", " : "",
                       id / NIC_STEPS_MAX, id % NIC_STEPS_MAX, (unsigned long long)top[k].posts)
            : snprintf(buf + used, cap - used, "%scache region near %p: %llu entries",
                       k ? ", " : "", (void *)top[k].addr, (unsigned long long)top[k].posts);
    if (n > 0) used += (size_t)n;
  }
}
