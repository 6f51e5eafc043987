/* A detect mismatch on stderr: the range, then for each block it covers (up to four) the block
 * and the allocation site recorded for it (alloc/routing/profile*.c records the sites: see
 * NICMALLOC_FENCE_DETECT_SAMPLE). Frames are named with libunwind, which reads the symbol tables
 * of the loaded files, static functions included, and given as module+offset for addr2line.
 * Reports are rare; they may allocate and take locks (never from inside malloc). */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include "fence.h"
#include "forklock.h"
#include "log.h"
#include "profile.h"
#include "unwind.h"

#include <pthread.h>
#include <stdio.h>

#define BLOCKS_MAX 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* one report's lines together */
NIC_FORKLOCK_MUTEX(fence_report, NIC_FORK_FENCE_REPORT, &lock, NULL);

/* libunwind looks names up through a cursor: one on this frame, pointed at ip. */
static bool symbol(uintptr_t ip, char *name, size_t cap, uintptr_t *offset) {
  const struct nic_unwind *unw = nic_unwind_get(); /* loaded when detect recorded sites */
  unw_context_t context;
  unw_cursor_t cursor;
  unw_word_t off;
  if (!unw || unw->getcontext(&context) || unw->init_local(&cursor, &context) ||
      unw->set_reg(&cursor, UNW_REG_IP, ip) || unw->get_proc_name(&cursor, name, cap, &off))
    return false;
  *offset = off;
  return true;
}

static void describe_frame(unsigned i, uintptr_t ip) {
  char name[256], path[512];
  uintptr_t off = 0, bias = 0;
  /* A return address may be the first byte after its function: look up the call itself. */
  bool named = symbol(ip - 1, name, sizeof name, &off);
  bool found = nic_prof_module_of(ip, path, sizeof path, &bias);
  nic_log_error("    #%u %s+%#lx (%s+%#lx)", i, named ? name : "??",
                (unsigned long)(named ? off + 1 : 0), found ? path : "?",
                (unsigned long)(ip - bias));
}

void nic_fence_report(const void *addr, size_t len, const char *when) {
  NIC_SAFETY_COUNT(fence_mismatches, 1);
  uintptr_t a = (uintptr_t)addr, end = a + len;
  pthread_mutex_lock(&lock);
  nic_log_error("NICMALLOC_FENCE=detect: [%#lx, %#lx) (%zu bytes) was written %s", (unsigned long)a,
                (unsigned long)end, len, when);
  for (unsigned b = 0; b < BLOCKS_MAX && a < end; b++) {
    uintptr_t start, stop, frames[NIC_PROF_FRAMES];
    unsigned n;
    if (!nic_prof_table_block_at((const void *)a, &start, &stop, frames, &n)) {
      nic_log_error("  %#lx: no allocation site recorded here (NICMALLOC_FENCE_DETECT_SAMPLE; "
                    "blocks shorter than NICMALLOC_COPY_THRESHOLD are not recorded)",
                    (unsigned long)a);
      break;
    }
    nic_log_error("  in the block [%#lx, %#lx) (%lu bytes), allocated at:", (unsigned long)start,
                  (unsigned long)stop, (unsigned long)(stop - start));
    for (unsigned i = 0; i < n; i++)
      describe_frame(i, frames[i]);
    a = stop;
  }
  pthread_mutex_unlock(&lock);
}
