#include "config.h"

#include "log.h"
#include "settings.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CHUNK_SIZE (32ul << 20) /* mimalloc's smallest arena, and its alignment */
#define MAX_CHUNK_SIZE (1ul << 30)  /* io_uring's largest fixed buffer */
/* mimalloc 2.0.9 holds at most 64 arenas per process; leave some for anyone else. */
#define MAX_CHUNKS_LIMIT 48u

static struct nic_config config;
static int config_state; /* 0 unread, 1 reading, 2 ready */

/* Digits first: strtoull would skip spaces and take "-1" (even " -1") as 2^64 - 1. */
static bool parse_digits(const char *text, unsigned long long *v, char **end) {
  if (!text || *text < '0' || *text > '9') return false;
  errno = 0;
  *v = strtoull(text, end, 10);
  return !errno;
}

bool nic_parse_count(const char *text, size_t *out) {
  unsigned long long v;
  char *end;
  if (!parse_digits(text, &v, &end) || *end || v > SIZE_MAX) return false;
  *out = (size_t)v;
  return true;
}

bool nic_parse_size(const char *text, size_t *out) {
  unsigned long long v;
  char *end;
  if (!parse_digits(text, &v, &end)) return false;
  unsigned shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  default:
    break;
  }
  if (shift && *end == 'i') end++; /* KiB-style suffixes */
  if (*end == 'B') end++;
  if (*end != '\0') return false;
  if (shift && v > (SIZE_MAX >> shift)) return false;
  *out = (size_t)(v << shift);
  return true;
}

bool nic_parse_bool(const char *text, bool *out) {
  if (!text) return false;
  if (!strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on") || !strcmp(text, "true")) {
    *out = true;
    return true;
  }
  if (!strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off") || !strcmp(text, "false")) {
    *out = false;
    return true;
  }
  return false;
}

static void warn_bad(const char *name, const char *value, const char *expected) {
  nic_log_warn("%s=%s is not valid (expected %s); using the default", name, value, expected);
}

static void read_size(const char *name, size_t min, size_t max, bool power_of_two, size_t *field) {
  const char *text = nic_getenv(name);
  if (!text) return;
  size_t v;
  bool ok = nic_parse_size(text, &v) && v >= min && v <= max;
  if (ok && power_of_two && (v & (v - 1))) ok = false;
  if (ok) {
    *field = v;
    return;
  }
  nic_log_warn("%s=%s is not valid (expected a size%s between %zu and %zu, suffix K/M/G); using "
               "the default",
               name, text, power_of_two ? " that is a power of two" : "", min, max);
}

/* Counts and milliseconds: digits only. */
static void read_number(const char *name, size_t min, size_t max, size_t *field) {
  const char *text = nic_getenv(name);
  if (!text) return;
  size_t v;
  if (nic_parse_count(text, &v) && v >= min && v <= max) {
    *field = v;
    return;
  }
  nic_log_warn("%s=%s is not valid (expected a number between %zu and %zu); using the default",
               name, text, min, max);
}

static void read_bool(const char *name, bool *field) {
  const char *text = nic_getenv(name);
  if (text && !nic_parse_bool(text, field)) warn_bad(name, text, "0 or 1");
}

static void read_page_kind(void) {
  const char *text = nic_getenv("NICMALLOC_PAGE_KIND");
  if (!text || !strcmp(text, "auto")) return;
  static const struct {
    const char *name;
    enum nic_page_kind kind;
  } kinds[] = {
      {"1g", NIC_PAGE_1G}, {"2m", NIC_PAGE_2M}, {"thp", NIC_PAGE_THP}, {"4k", NIC_PAGE_4K}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (!strcmp(text, kinds[i].name)) {
      config.page_kind = kinds[i].kind;
      config.page_kind_set = true;
      return;
    }
  warn_bad("NICMALLOC_PAGE_KIND", text, "auto, 1g, 2m, thp or 4k");
}

static void read_pin_policy(void) {
  const char *text = nic_getenv("NICMALLOC_ON_PIN_FAIL");
  if (!text) return;
  if (!strcmp(text, "fallback"))
    config.on_pin_fail = NIC_PIN_FAIL_FALLBACK;
  else if (!strcmp(text, "fail"))
    config.on_pin_fail = NIC_PIN_FAIL_FAIL;
  else
    warn_bad("NICMALLOC_ON_PIN_FAIL", text, "fallback or fail");
}

static void read_stats_at_exit(void) {
  const char *text = nic_getenv("NICMALLOC_STATS");
  bool on;
  if (!text) return;
  if (!strcmp(text, "json"))
    config.stats_at_exit = NIC_STATS_AT_EXIT_JSON;
  else if (nic_parse_bool(text, &on))
    config.stats_at_exit = on ? NIC_STATS_AT_EXIT_TEXT : NIC_STATS_AT_EXIT_OFF;
  else
    warn_bad("NICMALLOC_STATS", text, "0, 1 or json");
}

/* Profile-guided sites (profile.h). An empty path is treated as unset. */
static void read_profile_settings(void) {
  const char *profile = nic_getenv("NICMALLOC_PROFILE"), *sites = nic_getenv("NICMALLOC_SITES");
  config.profile_path = profile && *profile ? profile : NULL;
  config.sites_path = sites && *sites ? sites : NULL;
  config.profile_sample = 64 << 10;
  config.sites_min_size = 256;
  config.sites_budget = (size_t)1 << 30;
  read_size("NICMALLOC_PROFILE_SAMPLE", 1, (size_t)1 << 40, false, &config.profile_sample);
  read_size("NICMALLOC_SITES_MIN_SIZE", 0, SIZE_MAX, false, &config.sites_min_size);
  read_size("NICMALLOC_SITES_BUDGET", 0, SIZE_MAX, false, &config.sites_budget);
  config.sites_headroom = 2;
  read_number("NICMALLOC_SITES_HEADROOM", 0, 1000, &config.sites_headroom);
}

static void read_all(void) {
  config.chunk_size = MAX_CHUNK_SIZE;
  config.max_chunks = 16;
  config.page_kind = NIC_PAGE_1G;
  config.on_pin_fail = NIC_PIN_FAIL_FALLBACK;
  config.dp_min_size = 0;
  config.release_delay_ms = 1000;
  config.purge_delay_ms = 250;
  config.huge_cache_bytes = (size_t)128 << 20;
  config.stats_at_exit = NIC_STATS_AT_EXIT_OFF;
  config.verbose = false;
  config.rcache_max_regions = 1024; /* libfabric's and MVAPICH's default */
  config.rcache_max_bytes = (size_t)4 << 30;
  config.free_check = true;
  config.keep_chunks = 1; /* a bursty program must not map and pin a chunk per burst */

  read_bool("NICMALLOC_VERBOSE", &config.verbose);
  read_stats_at_exit();
  read_bool("NICMALLOC_FREE_CHECK", &config.free_check);
  read_size("NICMALLOC_CHUNK_SIZE", MIN_CHUNK_SIZE, MAX_CHUNK_SIZE, true, &config.chunk_size);
  size_t max_chunks = config.max_chunks;
  read_number("NICMALLOC_MAX_CHUNKS", 1, MAX_CHUNKS_LIMIT, &max_chunks);
  config.max_chunks = (unsigned)max_chunks;
  read_page_kind();
  read_pin_policy();
  read_size("NICMALLOC_DP_MIN_SIZE", 0, SIZE_MAX, false, &config.dp_min_size);
  size_t delay = config.release_delay_ms;
  read_number("NICMALLOC_RELEASE_DELAY_MS", 0, 3600u * 1000u, &delay);
  config.release_delay_ms = (unsigned)delay;
  delay = config.purge_delay_ms;
  read_number("NICMALLOC_PURGE_DELAY_MS", 0, 3600u * 1000u, &delay);
  config.purge_delay_ms = (unsigned)delay;
  read_size("NICMALLOC_HUGE_CACHE_BYTES", 0, SIZE_MAX, false, &config.huge_cache_bytes);
  size_t regions = config.rcache_max_regions;
  read_number("NICMALLOC_RCACHE_MAX_REGIONS", 1, 1u << 20, &regions);
  config.rcache_max_regions = (unsigned)regions;
  read_size("NICMALLOC_RCACHE_MAX_BYTES", 1u << 12, SIZE_MAX, false, &config.rcache_max_bytes);
  size_t keep = config.keep_chunks;
  read_number("NICMALLOC_KEEP_CHUNKS", 0, MAX_CHUNKS_LIMIT, &keep);
  config.keep_chunks = (unsigned)keep;
  config.chunk_shift = (unsigned)__builtin_ctzl(config.chunk_size);
  read_profile_settings();
}

const struct nic_config *nic_config(void) {
  if (__atomic_load_n(&config_state, __ATOMIC_ACQUIRE) == 2) return &config;
  int expected = 0;
  if (__atomic_compare_exchange_n(&config_state, &expected, 1, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    read_all();
    __atomic_store_n(&config_state, 2, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&config_state, __ATOMIC_ACQUIRE) != 2)
      __builtin_ia32_pause();
  }
  return &config;
}
