/* Linked with -lnicmalloc: plain malloc is nicmalloc's control heap, nic_malloc is dataplane. */
#include <nicmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *control = malloc(64), *dataplane = nic_malloc(4096);
  if (!control || !dataplane) return 1;
  strcpy(control, "control");
  memset(dataplane, 7, 4096);
  int ok = !nic_is_dataplane(control) && nic_is_dataplane(dataplane);
  free(control);
  free(dataplane);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("consumer: %s, %u chunk(s)\n", ok ? "ok" : "WRONG", s.chunks_live);
  return ok ? 0 : 1;
}
