/* mimalloc's own settings in secure execution. nicmalloc ignores every NICMALLOC_* variable there
 * (settings.h), but mimalloc read its MIMALLOC_* ones as it loaded, before us: a user running a
 * setuid program could make it print its options, errors and statistics (MIMALLOC_VERBOSE,
 * MIMALLOC_SHOW_ERRORS, MIMALLOC_SHOW_STATS), or tune its commits and purges. So in secure
 * execution each option goes back to its default, before nicmalloc sets its own (the purge
 * delay, commits on demand), which then go by nicmalloc's defaults too. What mimalloc did as it
 * loaded cannot be undone: lines it printed then, and the memory MIMALLOC_RESERVE_* reserved,
 * which foreign_arenas.c takes up unused. */
#include "settings.h"
#include "startup.h"

#include <mimalloc.h>

struct option_default {
  mi_option_t option;
  long value;
};

/* mimalloc 2.0.9's defaults (its src/options.c); with another version only the printing ones
 * are switched off. */
static const struct option_default defaults_2_0_9[] = {
    {mi_option_show_errors, 0},
    {mi_option_show_stats, 0},
    {mi_option_verbose, 0},
    {mi_option_eager_commit, 1},
    {mi_option_large_os_pages, 0},
    {mi_option_reserve_huge_os_pages, 0},
    {mi_option_reserve_huge_os_pages_at, -1},
    {mi_option_reserve_os_memory, 0},
    {mi_option_page_reset, 0},
    {mi_option_abandoned_page_decommit, 0},
    {mi_option_eager_commit_delay, 1},
    {mi_option_decommit_delay, 25},
    {mi_option_use_numa_nodes, 0},
    {mi_option_limit_os_alloc, 0},
    {mi_option_os_tag, 100},
    {mi_option_max_errors, 16},
    {mi_option_max_warnings, 16},
    {mi_option_max_segment_reclaim, 8},
    {mi_option_allow_decommit, 1},
    {mi_option_segment_decommit_delay, 500},
    {mi_option_decommit_extend_delay, 1},
    {mi_option_destroy_on_exit, 0},
};
/* Every option of mimalloc.h but its four deprecated ones: one added there must be added here. */
_Static_assert(sizeof defaults_2_0_9 / sizeof defaults_2_0_9[0] == _mi_option_last - 4,
               "an option of mimalloc.h has no default here");

static void options_start(void) {
  if (!nic_secure_execution()) return;
  if (mi_version() != 209) {
    mi_option_disable(mi_option_show_errors);
    mi_option_disable(mi_option_show_stats);
    mi_option_disable(mi_option_verbose);
    return;
  }
  for (size_t i = 0; i < sizeof defaults_2_0_9 / sizeof defaults_2_0_9[0]; i++)
    mi_option_set(defaults_2_0_9[i].option, defaults_2_0_9[i].value);
}
NIC_STARTUP_STEP(mimalloc_options, NIC_START_MIMALLOC_OPTIONS, options_start);
