// realloc copies the old block, so a rewritten realloc must not tell the optimiser that the new
// block is uninitialized: with allockind("realloc,uninitialized") GVN folded the read of q[0]
// to undef at -O2 and dropped both the load and the store of it. The other families keep what
// their memory really holds (calloc zeroed, aligned_alloc aligned and uninitialized).
// RUN: %clang-nic -O2 -S -emit-llvm -o - %s | FileCheck %s
#include <stdlib.h>
#include <sys/socket.h>

// CHECK-LABEL: define {{.*}} @grow_and_send(
// CHECK: %[[Q:.*]] = tail call ptr @nic_realloc_site(ptr noundef %p, i64 noundef %[[N2:.*]], i32 noundef {{[0-9]+}})
// CHECK: %[[FIRST:.*]] = load i8, ptr %[[Q]]
// CHECK: store i8 %[[FIRST]], ptr
// CHECK: call i64 @send(i32 noundef %fd, ptr noundef nonnull %[[Q]]
int grow_and_send(int fd, char *p, size_t n) {
  char *q = realloc(p, 2 * n);
  if (!q) return -1;
  int first = q[0]; // one of p's bytes, copied by realloc
  q[n] = (char)first;
  int r = (int)send(fd, q, 2 * n, 0);
  free(q);
  return r + first;
}

int zeroed_and_aligned(int fd, size_t n) {
  char *z = calloc(n, 2);
  char *a = aligned_alloc(64, n);
  if (!z || !a) return -1;
  int r = (int)send(fd, z, 2 * n, 0) + (int)send(fd, a, n, 0);
  free(z);
  free(a);
  return r;
}

// CHECK-DAG: declare {{.*}} @nic_realloc_site(ptr allocptr {{.*}}) {{.*}}[[RE:#[0-9]+]]
// CHECK-DAG: declare {{.*}} @nic_calloc_site({{.*}}) {{.*}}[[CA:#[0-9]+]]
// CHECK-DAG: declare {{.*}} @nic_aligned_alloc_site(i64 allocalign {{.*}}) {{.*}}[[AL:#[0-9]+]]
// CHECK-DAG: attributes [[RE]] = { {{.*}}allockind("realloc") allocsize(1) {{.*}}"alloc-family"="malloc"
// CHECK-DAG: attributes [[CA]] = { {{.*}}allockind("alloc,zeroed") allocsize(0,1) {{.*}}"alloc-family"="malloc"
// CHECK-DAG: attributes [[AL]] = { {{.*}}allockind("alloc,uninitialized,aligned") allocsize(1) {{.*}}"alloc-family"="malloc"
