// NIC_SINK on a bare declaration: the record survives to the pass, which reads it and deletes
// it (no .nic_sinks section in the object). Without the plugin the record stays.
// RUN: %clang-nic -O1 -S -emit-llvm -o - %s | FileCheck %s
// RUN: %clang-nic -O1 -c -o %t.o %s && llvm-objdump -h %t.o | FileCheck %s --check-prefix=OBJ
// RUN: clang -I%S/../../include -O1 -c -o %t.plain.o %s && llvm-objdump -h %t.plain.o | FileCheck %s --check-prefix=PLAIN
// RUN: clang -x c++ -I%S/../../include -fsyntax-only -Wall -Wextra -Werror %s
#include "nicmalloc.h"
#include <stdlib.h>

struct conn;
struct frame {
  int len;
  const void *payload;
};
long conn_write(struct conn *c, const void *buf, unsigned long len);
NIC_SINK(conn_write, "1");
int frame_post(struct conn *c, const struct frame *f);
NIC_SINK(frame_post, "1:8");
void trace(const void *p);

// CHECK-NOT: nic_sink_record
// CHECK-LABEL: define {{.*}} @f(
// CHECK: call {{.*}} @nic_malloc_site(i64 noundef %n, i32 noundef
// CHECK: call {{.*}} @nic_malloc_site(i64 noundef 64, i32 noundef
// CHECK: call {{.*}} @malloc(i64 noundef 8)
void f(struct conn *c, unsigned long n) {
  conn_write(c, malloc(n), n);
  struct frame fr = {64, malloc(64)};
  frame_post(c, &fr);
  void *t = malloc(8);
  trace(t);
  free(t);
}
// OBJ-NOT: nic_sinks
// PLAIN: .nic_sinks
