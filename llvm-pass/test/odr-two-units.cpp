// Two translation units share Buf<char>'s constructor (linkonce_odr); only this one sends the
// buffer it allocates. The rewrite is this unit's own local copy, so the sent buffer is
// dataplane and the other unit's is not whichever unit the linker sees first (a rewrite of the
// shared constructor made the answer depend on the link order).
// REQUIRES: nicmalloc-runtime
// RUN: %clang-nic -x c++ -O2 -I%inputs -c -o %t.main.o %s
// RUN: %clang-nic -x c++ -O2 -I%inputs -c -o %t.other.o %inputs/odr-other.cpp
// RUN: clang++ -o %t.mo %t.main.o %t.other.o %nicmalloc_so -Wl,-rpath,%nicmalloc_dir
// RUN: clang++ -o %t.om %t.other.o %t.main.o %nicmalloc_so -Wl,-rpath,%nicmalloc_dir
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t.mo | FileCheck %s
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t.om | FileCheck %s
// CHECK: sent: dataplane
// CHECK-NEXT: received 4096 bytes, same as sent
// CHECK-NEXT: other: control k
// CHECK-NEXT: done
#include "odr-buf.h"
#include <nicmalloc.h>
#include <cstdio>
#include <sys/socket.h>

void other();

int main() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  static char got[4096];
  {
    Buf<char> b(sizeof got);
    memset(b.data, 's', b.n);
    printf("sent: %s\n", nic_is_dataplane(b.data) ? "dataplane" : "control");
    if (send(sv[0], b.data, b.n, 0) != ssize_t(b.n)) return 2;
    size_t have = 0;
    while (have < sizeof got) {
      ssize_t r = recv(sv[1], got + have, sizeof got - have, 0);
      if (r <= 0) return 3;
      have += size_t(r);
    }
    printf("received %zu bytes, %s\n", have,
           memcmp(got, b.data, have) == 0 ? "same as sent" : "DIFFERENT");
  }
  other();
  printf("done\n");
  return 0;
}
