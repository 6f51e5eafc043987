/* nic_preinit_probe: allocates from the main program's .preinit_array, which the loader runs
 * before any library's constructor and before libc has set environ, then again in main. Prints
 * whether each block is dataplane (NICMALLOC_DP_MIN_SIZE routes them by size). */
#include "nicmalloc.h"

#include <stdio.h>
#include <stdlib.h>

static void *early;

static void preinit(int argc, char **argv, char **envp) {
  (void)argc, (void)argv, (void)envp;
  early = malloc(4096);
}
__attribute__((section(".preinit_array"),
               used)) static void (*const preinit_entry)(int, char **, char **) = preinit;

int main(void) {
  void *late = malloc(4096);
  printf("preinit_dp=%d\nmain_dp=%d\n", early ? nic_is_dataplane(early) : -1,
         late ? nic_is_dataplane(late) : -1);
  fflush(stdout);
  free(early);
  free(late);
  return 0;
}
