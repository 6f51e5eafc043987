/* Process set-up and tear-down: read the settings, reserve the address space, make fork safe,
 * print the report at exit. Set-up runs on the first allocation, which may come long before
 * this library's constructor (from other libraries' constructors or the dynamic loader). */
#include "init.h"

#include "alloc_inline.h"
#include "config.h"
#include "dp_heap.h"
#include "forklock.h"
#include "huge_cache.h"
#include "log.h"
#include "mi_free_lists.h"
#include "nicmalloc.h"
#include "profile.h"
#include "site_table.h"
#include "small_usable.h"
#include "vspace.h"

#include <mimalloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

enum { INIT_NOT_STARTED, INIT_RUNNING, INIT_DONE };
static int init_state;
static __thread bool initializing __attribute__((tls_model("initial-exec")));

/* Freed control memory stays committed for the purge delay: mimalloc's own 25 ms made a program
 * that frees and reallocates megabytes fault its pages in again and again (bench/peers.sh large:
 * 25 ms 12-14 s, 100 ms 3-8 s, 250 ms 1.9 s, the same as 1000 ms). The user's
 * MIMALLOC_DECOMMIT_DELAY, if set, wins. Huge requests take the slow path, past the cache. */
static void tune_control_heap(const struct nic_config *cfg) {
  if (!getenv("MIMALLOC_DECOMMIT_DELAY"))
    mi_option_set(mi_option_decommit_delay, (long)cfg->purge_delay_ms);
  if (cfg->huge_cache_bytes && nic_fast_limit > NIC_HUGE_BLOCK_MIN + 1)
    nic_fast_limit = NIC_HUGE_BLOCK_MIN + 1;
}

static void init_once(void) {
  nic_free_key_init(); /* before anything here allocates */
  /* Settings first: whether a copy of stderr is kept depends on them, and their warnings go to
   * fd 2 as it is, the start-up stderr by definition. */
  const struct nic_config *cfg = nic_config();
  nic_log_note_stderr(cfg->stats_at_exit != NIC_STATS_AT_EXIT_OFF);
  if (cfg->dp_min_size) nic_auto_dp_threshold = cfg->dp_min_size;
  nic_free_check = cfg->free_check;
  /* Profiling or routing sends (some) mallocs to the slow path, where profile.c sees them. */
  size_t limit = nic_profile_fast_limit();
  nic_fast_limit = limit < nic_auto_dp_threshold ? limit : nic_auto_dp_threshold;
  tune_control_heap(cfg);
  nic_dp_fast_max = nic_dp_max_request();
  /* Before mimalloc maps its first segment: see vspace.h. */
  nic_control_arena_init(nic_free_check);
  nic_huge_cache_init(nic_control_size);
  nic_dp_reserve_early();
  nic_small_usable_init();  /* after the arena: it allocates */
  nic_mi_free_lists_init(); /* it allocates too */
  nic_site_table_apply();
  /* Every lock of the runtime, in one order: forklock.h. May allocate; the initializing flag
   * sends that allocation past us. */
  pthread_atfork(nic_forklock_prepare, nic_forklock_parent, nic_forklock_child);
}

void nic_global_init_slow(void) {
  int expected = INIT_NOT_STARTED;
  if (__atomic_compare_exchange_n(&init_state, &expected, INIT_RUNNING, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    initializing = true;
    init_once();
    initializing = false;
    __atomic_store_n(&init_state, INIT_DONE, __ATOMIC_RELEASE);
    return;
  }
  if (initializing) return; /* re-entered from init_once on this thread */
  while (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != INIT_DONE)
    sched_yield();
}

bool nic_global_init_done(void) {
  return __atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == INIT_DONE;
}

__attribute__((constructor(101))) static void nic_init(void) {
  nic_global_init();
  nic_thread_ready();
  nic_profile_start();       /* reads NICMALLOC_SITES, resolves the send calls: see profile.c */
  nic_thread_refresh_fast(); /* it may have lowered nic_dp_fast_max */
}

__attribute__((destructor)) static void nic_fini(void) {
  nic_profile_finish(); /* writes NICMALLOC_PROFILE */
  if (nic_config()->stats_at_exit == NIC_STATS_AT_EXIT_JSON)
    nic_print_stats_json(nic_log_fd());
  else if (nic_config()->stats_at_exit)
    nic_print_stats(nic_log_fd());
}
