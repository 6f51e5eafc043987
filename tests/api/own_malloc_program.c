/* A program with an allocator of its own (as rustc has jemalloc): malloc and the rest defined
 * here and exported (-rdynamic), so a preloaded nicmalloc is not the malloc. A bump allocator
 * over a static area; free gives nothing back. Prints own_calls=N. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static _Alignas(64) unsigned char area[64 << 20];
static size_t used;
static unsigned long own_calls;

/* A block: its size in the 8 bytes before it. */
static void *take(size_t size, size_t alignment) {
  if (alignment < 16) alignment = 16;
  const size_t start = (used + 8 + alignment - 1) & ~(alignment - 1);
  if (size > sizeof area || start + size > sizeof area) {
    errno = ENOMEM;
    return NULL;
  }
  used = start + size;
  memcpy(area + start - 8, &size, sizeof size);
  __atomic_add_fetch(&own_calls, 1, __ATOMIC_RELAXED);
  return area + start;
}

void *malloc(size_t size) {
  return take(size, 16);
}
void free(void *p) {
  (void)p;
}
void *calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  return take(n * size, 16); /* the area is zero and never reused */
}
size_t malloc_usable_size(void *p) {
  size_t size = 0;
  if (p) memcpy(&size, (unsigned char *)p - 8, sizeof size);
  return size;
}
void *realloc(void *p, size_t size) {
  void *q = take(size, 16);
  if (q && p) {
    const size_t old = malloc_usable_size(p);
    memcpy(q, p, old < size ? old : size);
  }
  return q;
}
void *memalign(size_t alignment, size_t size) {
  return take(size, alignment);
}
void *aligned_alloc(size_t alignment, size_t size) {
  return take(size, alignment);
}
int posix_memalign(void **out, size_t alignment, size_t size) {
  void *p = take(size, alignment);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

int main(void) {
  char *s = strdup("the C library's strdup calls our malloc");
  printf("own_calls=%lu\nsame=%d\n", own_calls, s && s[0] == 't');
  free(s);
  return 0;
}
