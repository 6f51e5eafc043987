/* The control arena's resident memory in a program that allocates one small block: pages of the
 * size classes that are used, not of classes only a check needed (the dataplane layout check of
 * dp_live.c made at start-up left a heap and a page of 5000-byte blocks behind, 28 KiB in every
 * process). Counts the 64 KiB mimalloc pages (2.0.9's slices) of the block's mapping that hold
 * a resident 4 KiB page; exit 0 when at most kSlicesMax do. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The segment header, the library's own start-up blocks, and the three classes the free-list
 * check of mi_free_lists.c uses at start-up (16 bytes, the block's too, 1000 and a medium page). */
enum { kSlice = 64 << 10, kSlicesMax = 5 };

static char maps[1 << 16]; /* static: reading must not allocate (it would touch the arena) */

int main(void) {
  volatile char *block = malloc(16);
  if (!block) return 2;
  block[0] = 1;
  const uintptr_t p = (uintptr_t)block;
  int fd = open("/proc/self/maps", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, maps, sizeof maps - 1) : -1;
  if (n <= 0) return 2;
  maps[n] = 0;
  close(fd);
  uintptr_t lo = 0, hi = 0;
  for (char *line = maps; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : 0) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a <= p && p < b) {
      lo = a;
      hi = b;
      break;
    }
  }
  int pagemap = open("/proc/self/pagemap", O_RDONLY);
  if (!lo || pagemap < 0) return 2;
  unsigned slices = 0;
  char where[4096];
  int len = 0;
  for (uintptr_t s = lo; s < hi; s += kSlice) {
    for (uintptr_t a = s; a < s + kSlice && a < hi; a += 4096) {
      uint64_t entry;
      if (pread(pagemap, &entry, sizeof entry, (off_t)(a / 4096 * 8)) != sizeof entry) return 2;
      if (entry >> 63) { /* present */
        slices++;
        if (len < (int)sizeof where - 32)
          len += snprintf(where + len, sizeof where - len, " +%#lx", (unsigned long)(s - lo));
        break;
      }
    }
  }
  close(pagemap);
  printf("%s: %u of the control arena's 64 KiB pages resident (at%s), at most %d expected\n",
         slices <= kSlicesMax ? "ok" : "FAIL", slices, where, kSlicesMax);
  return slices <= kSlicesMax ? 0 : 1;
}
