/* Allocation sites for test_fence_detect, in a library of their own: the test links the
 * runtime's objects into its executable, and site capture skips every frame of the module the
 * runtime lives in (as it skips libnicmalloc.so's own frames in real use). */
#include "nicmalloc.h"

#include <stdlib.h>

/* The barrier after each call keeps it from becoming a tail call, which would take the frame
 * off the stack. */
char *AllocatedForTheWire(size_t size) {
  char *p = nic_malloc(size);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

char *AllocatedOnTheControlHeap(size_t size) {
  char *p = malloc(size);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}
