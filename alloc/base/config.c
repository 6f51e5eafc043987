#include "config.h"

#include "log.h"
#include "settings.h"

#include <stdio.h>

static struct nic_config config;
static int config_state; /* 0 unread, 1 reading, 2 ready */

static unsigned setting_unsigned(enum nic_setting s) {
  return (unsigned)nic_setting_number(s); /* the table's ranges keep these under 2^32 */
}

/* "32M", "1G": a step or chunk size as the settings take it. */
static const char *size_text(size_t v, char *buf, size_t cap) {
  if (v % (1ul << 30) == 0)
    snprintf(buf, cap, "%zuG", v >> 30);
  else
    snprintf(buf, cap, "%zuM", v >> 20);
  return buf;
}

/* The step, after the chunk size and page kind. A 1 GiB page cannot back a smaller step: an
 * explicit 1g takes 1 GiB steps (as far as the chunk allows) unless NICMALLOC_PIN_STEP says
 * otherwise, which then falls back, with a warning. A step past the chunk is a bad value like
 * one outside the table's range: one warning, and the step the setting's absence gives (the
 * table's default, read by the settings' parser). */
static void read_pin_step(int kind) {
  const size_t asked = (size_t)nic_setting_number(NIC_S_PIN_STEP);
  const bool given = nic_setting_given(NIC_S_PIN_STEP);
  const bool too_large = given && asked > config.chunk_size;
  config.pin_step = asked;
  if (too_large) (void)nic_parse_size(nic_setting_row(NIC_S_PIN_STEP)->def, &config.pin_step);
  if (kind == 1 && (!given || too_large) && config.pin_step < (1ul << 30))
    config.pin_step = config.chunk_size < (1ul << 30) ? config.chunk_size : (1ul << 30);
  if (config.pin_step > config.chunk_size) config.pin_step = config.chunk_size;
  config.step_shift = (unsigned)__builtin_ctzl(config.pin_step);
  if (too_large) {
    char step[24], chunk[24], used[24];
    nic_log_warn("NICMALLOC_PIN_STEP=%s: expected at most NICMALLOC_CHUNK_SIZE (%s); using %s",
                 size_text(asked, step, sizeof step),
                 size_text(config.chunk_size, chunk, sizeof chunk),
                 size_text(config.pin_step, used, sizeof used));
  }
}

static void read_all(void) {
  /* Order of NICMALLOC_PAGE_KIND's words: auto|1g|2m|thp|4k; auto tries 1g first. */
  static const enum nic_page_kind kinds[] = {NIC_PAGE_1G, NIC_PAGE_1G, NIC_PAGE_2M, NIC_PAGE_THP,
                                             NIC_PAGE_4K};
  config.verbose = nic_setting_bool(NIC_S_VERBOSE);
  /* Order of NICMALLOC_STATS's words: the false spellings, the true ones, json. A file named
   * for the report asks for one unless NICMALLOC_STATS says otherwise. */
  const int stats = nic_setting_choice(NIC_S_STATS);
  config.stats_file = nic_setting_text(NIC_S_STATS_FILE);
  const bool asked = stats >= 4 || (config.stats_file && !nic_setting_given(NIC_S_STATS));
  config.stats_at_exit = stats == 8 ? NIC_STATS_AT_EXIT_JSON
                         : asked    ? NIC_STATS_AT_EXIT_TEXT
                                    : NIC_STATS_AT_EXIT_OFF;
  config.free_check = nic_setting_bool(NIC_S_FREE_CHECK);
  config.chunk_size = (size_t)nic_setting_number(NIC_S_CHUNK_SIZE);
  config.chunk_shift = (unsigned)__builtin_ctzl(config.chunk_size);
  config.max_chunks = setting_unsigned(NIC_S_MAX_CHUNKS);
  int kind = nic_setting_choice(NIC_S_PAGE_KIND);
  config.page_kind = kinds[kind > 0 ? kind : 0];
  config.page_kind_set = kind > 0;
  read_pin_step(kind);
  /* In the order of NICMALLOC_FENCE's words: off|wait|protect|detect. The kernel write-protects
   * a hugetlb page only whole, so under protect a post of a few bytes would hold every write to
   * the 2 MiB (or 1 GiB) around them, receive buffers and the poster's next message among them,
   * and a thread held so can be the one its completion waits for. Transparent huge pages are
   * protected per 4 KiB (the kernel splits the mapping, not the page), so auto stops there. */
  config.fence_protect = nic_setting_choice(NIC_S_FENCE) == 2;
  if (config.fence_protect && !config.page_kind_set) config.page_kind = NIC_PAGE_THP;
  /* fallback|fail */
  config.on_pin_fail =
      nic_setting_choice(NIC_S_ON_PIN_FAIL) == 1 ? NIC_PIN_FAIL_FAIL : NIC_PIN_FAIL_FALLBACK;
  /* register|commit */
  config.populate_at_commit = nic_setting_choice(NIC_S_DP_POPULATE) == 1;
  config.dp_min_size = (size_t)nic_setting_number(NIC_S_DP_MIN_SIZE);
  config.release_delay_ms = setting_unsigned(NIC_S_RELEASE_DELAY_MS);
  config.purge_delay_ms = setting_unsigned(NIC_S_PURGE_DELAY_MS);
  config.huge_cache_bytes = (size_t)nic_setting_number(NIC_S_HUGE_CACHE_BYTES);
  config.rcache_max_regions = setting_unsigned(NIC_S_RCACHE_MAX_REGIONS);
  config.rcache_max_bytes = (size_t)nic_setting_number(NIC_S_RCACHE_MAX_BYTES);
  config.keep_chunks = setting_unsigned(NIC_S_KEEP_CHUNKS);
  config.profile_path = nic_setting_text(NIC_S_PROFILE);
  config.sites_path = nic_setting_text(NIC_S_SITES);
  config.profile_sample = (size_t)nic_setting_number(NIC_S_PROFILE_SAMPLE);
  config.sites_min_size = (size_t)nic_setting_number(NIC_S_SITES_MIN_SIZE);
  config.sites_budget = (size_t)nic_setting_number(NIC_S_SITES_BUDGET);
  config.sites_headroom = (size_t)nic_setting_number(NIC_S_SITES_HEADROOM);
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
