// End to end: compile with the plugin, link libnicmalloc, run. The buffer sent on a socket is
// dataplane memory, the one that is only logged is not, and switching the site off by the id
// from the site table (no recompilation) sends the next allocation to the control heap.
// REQUIRES: nicmalloc-runtime
// RUN: rm -f %t.jsonl
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.jsonl %clang-nic -O2 -o %t %s %nicmalloc_so -Wl,-rpath,%nicmalloc_dir
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t | FileCheck %s
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t `sed -e 's/.*"id":\([0-9]*\).*/\1/' %t.jsonl` | FileCheck %s --check-prefix=OFF
// CHECK: sent: dataplane
// CHECK: logged: control
// OFF: site switched off
// OFF: sent: control
#include <nicmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char *produce(int fd, size_t n) {
  char *buf = malloc(n);
  memset(buf, 'x', n);
  send(fd, buf, n, 0);
  return buf;
}

int main(int argc, char **argv) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  if (argc > 1 && nic_site_set_enabled((uint32_t)atoi(argv[1]), 0) == 0)
    printf("site switched off\n");
  char *sent = produce(sv[0], 4096);
  char *logged = malloc(4096);
  memset(logged, 'y', 4096);
  fwrite(logged, 1, 16, stderr);
  printf("sent: %s\n", nic_is_dataplane(sent) ? "dataplane" : "control");
  printf("logged: %s\n", nic_is_dataplane(logged) ? "dataplane" : "control");
  free(sent);
  free(logged);
  return 0;
}
