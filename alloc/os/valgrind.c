#include "valgrind.h"

#include "log.h"

#include <mimalloc.h>
#include <string.h>

extern char **environ;

bool nic_valgrind_took_malloc;

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
bool nic_under_valgrind(void) {
  return RUNNING_ON_VALGRIND != 0;
}
#else
bool nic_under_valgrind(void) {
  return false;
}
#endif

/* Valgrind preloads each tool's interceptions into the program as vgpreload_<tool>-<platform>.so
 * and says so in its environment; nothing else names the tool to the program. */
bool nic_under_memcheck(void) {
  if (!nic_under_valgrind()) return false;
  for (char **e = environ; e && *e; e++)
    if (!strncmp(*e, "LD_PRELOAD=", 11) && strstr(*e, "/vgpreload_memcheck-")) return true;
  return false;
}

void nic_valgrind_check(void) {
  if (!nic_under_valgrind()) return;
  /* Valgrind's malloc (when it took mimalloc's) and free go together, so the probe is freed by
   * the allocator that made it. */
  void *probe = mi_malloc(64);
  nic_valgrind_took_malloc = probe && !mi_is_in_heap_region(probe);
  mi_free(probe);
  if (nic_valgrind_took_malloc)
    nic_log_warn("running under Valgrind, which replaced the malloc family of libnicmalloc and "
                 "libmimalloc (its default): the program's heap is Valgrind's, and the dataplane "
                 "blocks nicmalloc allocates itself (nic_malloc, receive buffers) are kept when "
                 "freed, never reused (Valgrind's free cannot take them). Run Valgrind with "
                 "--soname-synonyms=somalloc=nouserintercepts to keep nicmalloc's allocator "
                 "(Valgrind then follows no heap blocks)");
  else
    nic_log_info("running under Valgrind, nicmalloc's allocator kept%s",
                 nic_under_memcheck() ? "; the control arena is reserved at its smallest" : "");
}
