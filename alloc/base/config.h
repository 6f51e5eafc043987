/* The allocator's settings in the shape its hot paths read, taken once from the typed values of
 * settings.h (which parses, ranges and warns). */
#ifndef NIC_CONFIG_H
#define NIC_CONFIG_H

#include "nicmalloc.h"

#include <stdbool.h>
#include <stddef.h>

enum nic_stats_at_exit {
  NIC_STATS_AT_EXIT_OFF,  /* NICMALLOC_STATS=0 */
  NIC_STATS_AT_EXIT_TEXT, /* 1: the readable report */
  NIC_STATS_AT_EXIT_JSON, /* json: one JSON object */
};

enum nic_pin_fail_policy {
  NIC_PIN_FAIL_FALLBACK, /* serve from an unpinned chunk, or from the control heap */
  NIC_PIN_FAIL_FAIL,     /* return NULL with errno = ENOMEM */
};

struct nic_config {
  size_t chunk_size;                    /* NICMALLOC_CHUNK_SIZE: power of two, 32 MiB .. 1 GiB */
  unsigned chunk_shift;                 /* log2(chunk_size) */
  size_t pin_step;                      /* NICMALLOC_PIN_STEP, at most chunk_size */
  unsigned step_shift;                  /* log2(pin_step) */
  unsigned max_chunks;                  /* NICMALLOC_MAX_CHUNKS */
  enum nic_page_kind page_kind;         /* NICMALLOC_PAGE_KIND: the largest kind to try */
  bool page_kind_set;                   /* ... named a kind (not auto): a fallback is a warning */
  bool fence_protect;                   /* NICMALLOC_FENCE=protect (safety/fence_protect.c) */
  enum nic_pin_fail_policy on_pin_fail; /* NICMALLOC_ON_PIN_FAIL */
  bool populate_at_commit;              /* NICMALLOC_DP_POPULATE=commit */
  size_t dp_min_size; /* NICMALLOC_DP_MIN_SIZE: malloc of at least this is dataplane; 0 = off */
  unsigned release_delay_ms;   /* NICMALLOC_RELEASE_DELAY_MS */
  unsigned purge_delay_ms;     /* NICMALLOC_PURGE_DELAY_MS: freed control memory kept this long */
  size_t huge_cache_bytes;     /* NICMALLOC_HUGE_CACHE_BYTES: freed blocks over 16 MiB kept */
  unsigned rcache_max_regions; /* NICMALLOC_RCACHE_MAX_REGIONS */
  size_t rcache_max_bytes;     /* NICMALLOC_RCACHE_MAX_BYTES */
  bool free_check;             /* NICMALLOC_FREE_CHECK */
  unsigned keep_chunks;        /* NICMALLOC_KEEP_CHUNKS: never released */
  enum nic_stats_at_exit stats_at_exit; /* NICMALLOC_STATS, or on by NICMALLOC_STATS_FILE */
  const char *stats_file; /* NICMALLOC_STATS_FILE: the report goes there; NULL = stderr */
  bool verbose;           /* NICMALLOC_VERBOSE */
  /* Profile-guided sites (profile.h). */
  const char *profile_path; /* NICMALLOC_PROFILE: write a site profile here at exit; NULL = off */
  size_t profile_sample;    /* NICMALLOC_PROFILE_SAMPLE: mean bytes between samples */
  const char *sites_path;   /* NICMALLOC_SITES: route the sites of this profile; NULL = off */
  size_t sites_min_size;    /* NICMALLOC_SITES_MIN_SIZE: smaller requests are never routed */
  size_t sites_budget;      /* NICMALLOC_SITES_BUDGET: bytes routed per site, at most */
  size_t sites_headroom;    /* NICMALLOC_SITES_HEADROOM: budget = this x profiled sent blocks */
};

/* Parsed on first use; valid for the life of the process. */
const struct nic_config *nic_config(void);

#endif
