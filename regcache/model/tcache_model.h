/* A model of the NIC's address-translation cache: what a ConnectX-class NIC must hold on chip to
 * DMA from registered memory. Each region has MPT entries (its key, bounds and rights) and one
 * MTT entry per page (virtual page -> bus address) at the page size the registration was made
 * with. Both kinds share one LRU cache of `capacity` entries; every entry a DMA needs that is
 * not cached costs one miss (a PCIe read of host memory, ~1 us).
 *
 * Also counts the working set: distinct regions and pages among the last `window` entries looked
 * up (an access looks up its region's MPT entries, then each page it spans), which is what the
 * pressure figure compares with the capacity. A window of a few times the capacity can show a
 * cache overcommitted that many times over: every lookup of a cache that misses on each one is
 * a distinct entry.
 *
 * Standalone: libc only, no other nicmalloc module. Not thread-safe: one model per thread, or
 * the caller serializes. Used by the sim backend, the MR-miss benchmark and the pressure
 * tracker. */
#ifndef NIC_TCACHE_MODEL_H
#define NIC_TCACHE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nic_tcache_params {
  uint32_t capacity;       /* cache entries, MPT and MTT together; 1 .. 2^24 */
  uint32_t mpt_per_region; /* entries each region's MPT takes; 0 = do not model MPT; <= 16 */
  uint64_t page_size;      /* MTT granularity: a power of two from 4 KiB to 1 GiB */
  uint32_t miss_ns;        /* modeled cost of one miss */
  uint32_t window;         /* entries looked up in the working-set window; 0 = off; <= 2^26 */
};

/* The presets' window, per entry of capacity (and the window of a capacity given alone). */
#define NIC_TCACHE_WINDOW_PER_ENTRY 4u
#define NIC_TCACHE_WINDOW_MAX (NIC_TCACHE_WINDOW_PER_ENTRY << 24)

struct nic_tcache_preset {
  const char *name;
  struct nic_tcache_params params;
  const char *basis; /* where each number comes from and how sure it is */
};

#define NIC_TCACHE_DEFAULT_PRESET "cx5"

/* The preset called name, or NULL. */
const struct nic_tcache_preset *nic_tcache_preset_find(const char *name);
/* The i-th preset, or NULL past the end: for listing them. */
const struct nic_tcache_preset *nic_tcache_preset_at(size_t i);

/* Fills *out from NICMALLOC_SIM_TCACHE (preset, default cx5), then the overrides
 * NICMALLOC_SIM_TCACHE_ENTRIES (which scales the window with it, NIC_TCACHE_WINDOW_PER_ENTRY),
 * NICMALLOC_SIM_TCACHE_PAGE (4K, 2M, 1G or any power of two in between), NICMALLOC_SIM_MISS_NS
 * and NICMALLOC_SIM_TCACHE_WINDOW. A bad value is warned about once, by settings.c, and keeps
 * the preset's number. */
void nic_tcache_params_from_env(struct nic_tcache_params *out);
/* True when every field is in range. */
bool nic_tcache_params_valid(const struct nic_tcache_params *p);
/* Entries a region [base, base+len) needs to be fully resident: MPT + pages spanned. */
uint64_t nic_tcache_entries_for(const struct nic_tcache_params *p, uintptr_t base, size_t len);

struct nic_tcache_counters {
  uint64_t accesses;   /* nic_tcache_access calls */
  uint64_t lookups;    /* entries looked up: hits + misses */
  uint64_t hits;       /* entries found cached */
  uint64_t misses;     /* mpt_misses + mtt_misses */
  uint64_t mpt_misses; /* region-key misses */
  uint64_t mtt_misses; /* page-translation misses */
  uint64_t evictions;  /* entries pushed out by capacity */
  uint64_t modeled_ns; /* misses x miss_ns */
  uint64_t resident;   /* entries cached now */
  /* Working set over the last `window` entries looked up (all 0 when the window is off). */
  uint64_t ws_regions;      /* distinct regions */
  uint64_t ws_pages;        /* distinct (region, page) pairs */
  uint64_t ws_entries;      /* ws_regions x mpt_per_region + ws_pages: compare with capacity */
  uint64_t ws_peak_entries; /* largest ws_entries seen */
  /* False while the ws_ figures are partial: from when the window's table could not grow (out
   * of memory; the window then starts afresh) until a whole window of lookups has been counted
   * again. An access counts only its last `window` lookups, so the table holds at most that
   * many keys (and one per record, the regions'). */
  bool ws_valid;
};

struct nic_tcache;

/* NULL with errno EINVAL (bad params) or ENOMEM. Allocates all cache memory up front (and the
 * window's records: 24 bytes per MPT + 1 entries of it, touched as they fill); only the
 * working-set table grows later (24-byte slots, at most half of them used). Its memory is mapped by
 * system call, never malloc'd, so a caller may update the model under a lock that the allocator's
 * paths may need. */
struct nic_tcache *nic_tcache_new(const struct nic_tcache_params *p);
struct nic_tcache *nic_tcache_new_preset(const char *name);
void nic_tcache_free(struct nic_tcache *m);
const struct nic_tcache_params *nic_tcache_params_of(const struct nic_tcache *m);

/* One DMA of [addr, addr+len) through region `region` (any id unique among live regions) that
 * starts at region_base. Looks up the MPT entries, then the MTT entry of every page touched
 * (pages counted from region_base's page, as the MTT does). Returns the misses. Costs O(pages
 * touched). */
uint32_t nic_tcache_access(struct nic_tcache *m, uint64_t region, uintptr_t region_base,
                           uintptr_t addr, size_t len);
/* Deregistration: drop the region's cached entries, as the NIC invalidates them. O(capacity).
 * The working-set window keeps its history. */
void nic_tcache_forget(struct nic_tcache *m, uint64_t region);
void nic_tcache_get(const struct nic_tcache *m, struct nic_tcache_counters *out);
/* Zeroes the counters (not the cache contents or the window). */
void nic_tcache_reset_counters(struct nic_tcache *m);

#ifdef __cplusplus
}
#endif
#endif
