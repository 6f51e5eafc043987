// End to end: a block grown by a rewritten realloc still holds the old bytes when the program
// reads them before writing anything (they were lost at -O2 while the site function was
// declared as returning uninitialized memory).
// REQUIRES: nicmalloc-runtime
// RUN: %clang-nic -O2 -o %t %s %nicmalloc_so -Wl,-rpath,%nicmalloc_dir
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t | FileCheck %s
// CHECK: sent 16 bytes, first 65, byte 8 is 65
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

__attribute__((noinline)) static int grow_and_send(int fd, char *p, size_t n, int *first_out) {
  char *q = realloc(p, 2 * n);
  if (!q) return -1;
  int first = q[0];
  q[n] = (char)first;
  int r = (int)send(fd, q, 2 * n, 0);
  free(q);
  *first_out = first;
  return r;
}

int main(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  char *p = malloc(8);
  if (!p) return 1;
  memcpy(p, "ABCDEFGH", 8);
  int first = -1;
  int sent = grow_and_send(sv[0], p, 8, &first);
  char got[16] = {0};
  size_t have = 0;
  while (sent > 0 && have < (size_t)sent) {
    ssize_t k = read(sv[1], got + have, (size_t)sent - have);
    if (k <= 0) return 1;
    have += (size_t)k;
  }
  printf("sent %d bytes, first %d, byte 8 is %d\n", sent, first, got[8]);
  return 0;
}
