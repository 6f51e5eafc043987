// End to end, in C++: a program that replaces the global operator new and delete in a file of
// its own (Inputs/replaced-new.cpp), built file by file with the plugin. The new-expressions
// that reach send in this file are rewritten to the site functions, which allocate through the
// program's operators there, so its delete takes every block; the aligned ones, whose operators
// the program left alone, are dataplane. The same file linked without the replacement gets
// dataplane blocks from every site.
// REQUIRES: nicmalloc-runtime
// RUN: %clang-nic -x c++ -O2 -c -o %t.use.o -Rpass=nic-dataplane-sites %s 2>&1 | FileCheck %s --check-prefix=REMARK
// RUN: %clang-nic -x c++ -O2 -c -o %t.repl.o %inputs/replaced-new.cpp
// RUN: %clang-nic -o %t.replaced %t.use.o %t.repl.o %nicmalloc_so -Wl,-rpath,%nicmalloc_dir -lstdc++
// RUN: %clang-nic -o %t.plain %t.use.o %nicmalloc_so -Wl,-rpath,%nicmalloc_dir -lstdc++
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t.replaced | FileCheck %s --check-prefix=REPLACED
// RUN: env NICMALLOC_CHUNK_SIZE=64M %t.plain | FileCheck %s --check-prefix=PLAIN
// REMARK-DAG: remark: _Znwm -> nic_new_site
// REMARK-DAG: remark: _Znam -> nic_new_array_site
// REMARK-DAG: remark: _ZnwmRKSt9nothrow_t -> nic_new_nothrow_site
// REMARK-DAG: remark: _ZnamRKSt9nothrow_t -> nic_new_array_nothrow_site
// REMARK-DAG: remark: _ZnwmSt11align_val_t -> nic_new_aligned_site
// REMARK-DAG: remark: _ZnamSt11align_val_t -> nic_new_array_aligned_site
// REPLACED: dataplane blocks: 2 of 6
// REPLACED-NEXT: the program's operators: 4 news, 4 deletes
// REPLACED-NEXT: done
// PLAIN: dataplane blocks: 6 of 6
// PLAIN-NEXT: done
#include <nicmalloc.h>

#include <cstdio>
#include <new>
#include <sys/socket.h>

struct Msg {
  char bytes[512];
};
struct alignas(64) Line {
  char bytes[256];
};

// Defined where the program replaces the operators.
extern "C" __attribute__((weak)) void replaced_operator_calls(long *news, long *deletes);

namespace {
int fd, dataplane, blocks;
void sent(const void *p, size_t n) {
  if (!p) return;
  send(fd, p, n, 0);
  blocks++;
  dataplane += nic_is_dataplane(p) == 1;
}
} // namespace

int main() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  fd = sv[0];
  long news = 0, deletes = 0, news_after = 0, deletes_after = 0;
  if (replaced_operator_calls) replaced_operator_calls(&news, &deletes);
  Msg *m = new Msg;
  sent(m, sizeof *m);
  char *a = new char[1000];
  sent(a, 1000);
  Msg *t = new (std::nothrow) Msg;
  sent(t, sizeof *t);
  char *ta = new (std::nothrow) char[700];
  sent(ta, 700);
  Line *l = new Line;
  sent(l, sizeof *l);
  Line *la = new Line[2];
  sent(la, 2 * sizeof *la);
  std::printf("dataplane blocks: %d of %d\n", dataplane, blocks);
  delete m;
  delete[] a;
  delete t;
  delete[] ta;
  delete l;
  delete[] la;
  if (replaced_operator_calls) {
    replaced_operator_calls(&news_after, &deletes_after);
    std::printf("the program's operators: %ld news, %ld deletes\n", news_after - news,
                deletes_after - deletes);
  }
  std::printf("done\n");
  return 0;
}
