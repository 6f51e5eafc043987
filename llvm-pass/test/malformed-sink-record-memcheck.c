// A one-field record in .nic_sinks, under memcheck: the pass must refuse it without reading a
// second field. (An LLVM without assertions, Debian's, gave the same error by luck: the field
// past the end was the struct's own type, read as a value, and that read ran past the end of the
// LLVMContext.) clang, not opt: clang's context is on the heap, where memcheck sees the overrun.
// REQUIRES: valgrind
// RUN: not valgrind -q --error-exitcode=99 clang -fpass-plugin=%plugin -O1 -c -o /dev/null %s 2>&1 | FileCheck %s --implicit-check-not='=={{[0-9]+}}=='
// CHECK: error: nicmalloc dataplane sites: malformed NIC_SINK record rec
#include <stdlib.h>
#include <sys/socket.h>

struct one_field {
  void (*fn)(void);
};
static void mysink(void) {}
__attribute__((used, section(".nic_sinks"))) static const struct one_field rec = {mysink};

int h(int fd) {
  char *p = malloc(10);
  int r = (int)send(fd, p, 10, 0);
  free(p);
  return r;
}
