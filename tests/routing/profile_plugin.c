/* A library profile_probe loads with dlopen after start-up: its buffers are sent, so a profile
 * names a site in a module that no process has at start-up. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kBlocks = 400, kSize = 8192 };

__attribute__((noinline)) static char *plugin_site(size_t n) {
  char *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

/* Sends kBlocks buffers over fd (the peer drained by reading back); returns how many were
 * dataplane by is_dataplane. */
int plugin_send(int fd, int peer, int (*is_dataplane)(const void *)) {
  static char sink[kSize];
  int dataplane = 0;
  for (int i = 0; i < kBlocks; i++) {
    char *p = plugin_site(kSize);
    memset(p, 'p', kSize);
    dataplane += is_dataplane(p);
    if (send(fd, p, kSize, 0) != kSize) return -1;
    for (size_t got = 0; got < kSize;) {
      ssize_t r = read(peer, sink, kSize - got);
      if (r <= 0) return -1;
      got += (size_t)r;
    }
    free(p);
  }
  return dataplane;
}
