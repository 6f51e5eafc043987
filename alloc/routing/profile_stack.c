/* Call-site capture for profile-guided routing. A site is the first NIC_PROF_FRAMES return
 * addresses outside this library (malloc, nic_alloc and the profile code are skipped by address,
 * whatever the compiler inlined). libunwind's unw_backtrace (unwind.h) walks with DWARF CFI, so
 * programs built without frame pointers (Debian's) are walked correctly, and caches per address.
 * Addresses are kept raw during the run; only the profile writer and the routing loader turn them
 * into module + offset (dl_iterate_phdr takes the loader's lock, which is fine there). */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include "proc_own.h"
#include "profile.h"
#include "thread.h"
#include "unwind.h"

#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SKIP_MAX 16 /* frames of ours above the caller, with room for deep inlining changes */

static uintptr_t own_lo, own_hi; /* this library's mapped range */

static int find_own(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (start < lo) lo = start;
    if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
  }
  if (me < lo || me >= hi) return 0;
  own_lo = lo;
  own_hi = hi;
  return 1;
}

bool nic_prof_stack_init(void) {
  dl_iterate_phdr(find_own, (void *)(uintptr_t)&nic_prof_stack_init);
  return nic_unwind_load();
}

uint64_t nic_prof_hash(const uintptr_t *frames, unsigned n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (unsigned i = 0; i < n; i++) {
    h ^= frames[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h | 1; /* 0 marks an empty slot in the tables */
}

bool nic_prof_own(uintptr_t addr) {
  return addr >= own_lo && addr < own_hi;
}

/* The most frames of ours seen above the program's: a walk asks for that many and the frames
 * wanted, since its cost grows with every frame (a deep program was walked 20 frames up for
 * 4). A path with more frames of ours than seen yet walks again, further, and raises it. */
static unsigned own_depth;

unsigned nic_prof_capture_n(uintptr_t *frames, unsigned want) {
  const struct nic_unwind *unw = nic_unwind_get();
  if (!unw) return 0;
  void *raw[SKIP_MAX + NIC_PROF_FRAMES];
  const unsigned cap = sizeof raw / sizeof raw[0];
  unsigned depth = __atomic_load_n(&own_depth, __ATOMIC_RELAXED);
  for (;;) {
    const unsigned max = depth + want < cap ? depth + want : cap;
    /* libunwind's thread-local block, which the C library allocates (with malloc) on a thread's
     * first walk, is nicmalloc's own memory, whatever scope the thread is in. */
    nic_internal_enter();
    const int walked = unw->backtrace(raw, (int)max);
    nic_internal_leave();
    const unsigned got = walked > 0 ? (unsigned)walked : 0;
    unsigned i = 0;
    while (i < got && nic_prof_own((uintptr_t)raw[i]))
      i++;
    if (got == max && got - i < want && max < cap) { /* cut short: the stack goes on */
      depth = i < got ? i : SKIP_MAX;
      continue;
    }
    for (unsigned seen = __atomic_load_n(&own_depth, __ATOMIC_RELAXED); i < got && i > seen;)
      if (__atomic_compare_exchange_n(&own_depth, &seen, i, true, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
        break;
    unsigned n = 0;
    for (; i < got && n < want; i++)
      frames[n++] = (uintptr_t)raw[i];
    return n;
  }
}

unsigned nic_prof_capture(uintptr_t frames[NIC_PROF_FRAMES]) {
  return nic_prof_capture_n(frames, NIC_PROF_FRAMES);
}

struct module_query {
  uintptr_t addr;
  char *path;
  size_t cap;
  uintptr_t bias;
  bool found;
};

static char exe_path[4096];
static pthread_once_t exe_once = PTHREAD_ONCE_INIT;

static void read_exe_path(void) {
  ssize_t n = nic_proc_own_readlink("exe", exe_path, sizeof exe_path - 1);
  exe_path[n > 0 ? n : 0] = '\0';
  /* A program replaced while it runs is still the same program on the next run. */
  static const char deleted[] = " (deleted)";
  size_t len = strlen(exe_path);
  if (len > sizeof deleted - 1 && !strcmp(exe_path + len - (sizeof deleted - 1), deleted))
    exe_path[len - (sizeof deleted - 1)] = '\0';
}

/* The main program has an empty name in dl_iterate_phdr: name it by /proc's exe link, read once
 * (a process that execs starts again with a new library image; fork keeps the program). */
const char *nic_prof_object_name(const struct dl_phdr_info *info) {
  if (info->dlpi_name && info->dlpi_name[0]) return info->dlpi_name;
  pthread_once(&exe_once, read_exe_path);
  return exe_path;
}

static int find_addr(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct module_query *q = arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type != PT_LOAD || q->addr < start || q->addr >= start + ph->p_memsz) continue;
    snprintf(q->path, q->cap, "%s", nic_prof_object_name(info));
    q->bias = info->dlpi_addr;
    q->found = true;
    return 1;
  }
  return 0;
}

bool nic_prof_module_of(uintptr_t addr, char *path, size_t cap, uintptr_t *bias) {
  struct module_query q = {.addr = addr, .path = path, .cap = cap};
  dl_iterate_phdr(find_addr, &q);
  *bias = q.bias;
  return q.found;
}
