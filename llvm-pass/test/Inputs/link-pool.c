/* The other translation unit of link-time.c: a bump pool whose chunks hold replies, and a log
 * buffer that is never sent. */
#include <stddef.h>
#include <stdlib.h>

static char *chunk;
static size_t used, cap;

__attribute__((noinline)) static void pool_grow(size_t n) {
  cap = n > 65536 ? n : 65536;
  chunk = malloc(cap);
  used = 0;
}

char *pool_get(size_t n) {
  if (!chunk || used + n > cap) pool_grow(n);
  char *p = chunk + used;
  used += n;
  return p;
}

char *log_line(size_t n) {
  return malloc(n);
}
