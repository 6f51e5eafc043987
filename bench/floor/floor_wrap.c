/* The least an interposer over Debian's shared mimalloc can cost, for bench/floor/run.sh.
 * forward_*: malloc and free that only call mimalloc (tail calls through the GOT, as
 * libnicmalloc's are). keyed_*: the least a free that refuses double frees needs: a range test
 * for the heap's reservation and a key read, compared and written into the freed block, which
 * malloc clears again (the key sits in the second word, as nicmalloc's does, since mimalloc's
 * free list takes the first). */
#include <mimalloc.h>
#include <stddef.h>
#include <stdint.h>

#define FREED_KEY 0x6e69636d616c6c6fULL

/* A reservation that covers everything: the test costs what a real one would. */
__attribute__((visibility("hidden"))) uintptr_t heap_base = 0, heap_size = UINTPTR_MAX;

void *forward_malloc(size_t size) {
  return mi_malloc(size);
}

void forward_free(void *p) {
  mi_free(p);
}

void *keyed_malloc(size_t size) {
  uint64_t *p = mi_malloc(size < 16 ? 16 : size);
  if (p) p[1] = 0;
  return p;
}

void keyed_free(void *p) {
  if ((uintptr_t)p - heap_base < heap_size && ((uint64_t *)p)[1] != FREED_KEY) {
    ((uint64_t *)p)[1] = FREED_KEY;
    mi_free(p);
    return;
  }
  if (p) __builtin_trap(); /* a real interposer reports here; the benchmark never comes here */
}
