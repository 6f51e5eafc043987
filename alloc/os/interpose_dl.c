/* dlclose unmaps a library with the loader's own munmap, which no interposed call sees, so a
 * registration of its static data (a send buffer in .data or .bss) would outlive the pages it
 * pins, and a library loaded later at that address would be sent from them. The library's whole
 * address span is invalidated before the real dlclose, and again after it (a registration another
 * thread made meanwhile): whether this close is the last one is not known beforehand, and a
 * needless invalidation only costs registering again. */
#define _GNU_SOURCE
#include "events.h"
#include "export.h"

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

struct span_search {
  const struct link_map *map;
  uintptr_t start, end; /* end 0: not found */
};

static int find_span(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct span_search *s = data;
  if (info->dlpi_addr != s->map->l_addr || !info->dlpi_name || !s->map->l_name ||
      strcmp(info->dlpi_name, s->map->l_name) != 0)
    return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    const uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (!s->end || lo < s->start) s->start = lo;
    if (hi > s->end) s->end = hi;
  }
  return 1;
}

NIC_EXPORT int dlclose(void *handle) {
  static int (*real_dlclose)(void *);
  if (!real_dlclose) real_dlclose = (int (*)(void *))dlsym(RTLD_NEXT, "dlclose");
  if (!real_dlclose) return -1; /* no C library below us: nothing can be closed */
  struct link_map *map = NULL;
  void *h = handle;
  __asm__("" : "+r"(h)); /* declared nonnull, yet a program may pass NULL: keep the test */
  struct span_search s = {NULL, 0, 0};
  if (h && dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map) {
    s.map = map;
    dl_iterate_phdr(find_span, &s);
    if (s.end) nic_publish_pages_leaving(s.start, s.end - s.start);
  }
  const int rc = real_dlclose(handle);
  if (s.end) nic_publish_pages_left(s.start, s.end - s.start);
  return rc;
}
