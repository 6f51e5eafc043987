// A flow that crosses translation units is seen only at link time: a pool allocator in one file
// (Inputs/link-pool.c) hands out buffers that this file sends. Each unit alone rewrites
// nothing; the merged module, analysed as full LTO does (nic-dataplane-sites-link), rewrites
// the pool's malloc, and the plain pass on the merged module does not run twice.
// RUN: rm -f %t.jsonl %t.link.jsonl
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.jsonl %clang-nic -O1 -flto -c -o %t.send.o %s
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.jsonl %clang-nic -O1 -flto -c -o %t.pool.o %S/Inputs/link-pool.c
// RUN: FileCheck %s --check-prefix=UNITS < %t.jsonl
// RUN: llvm-link -o %t.bc %t.send.o %t.pool.o
// RUN: opt -load-pass-plugin=%plugin -passes=nic-dataplane-sites -S -o - %t.bc | FileCheck %s --check-prefix=AGAIN
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.link.jsonl opt -load-pass-plugin=%plugin -passes=nic-dataplane-sites-link -S -o - %t.bc | FileCheck %s --check-prefix=LINK
// RUN: FileCheck %s --check-prefix=TABLE < %t.link.jsonl
// UNITS: {"module":"{{.*}}link-time.c","sites":[]}
// UNITS: {"module":"{{.*}}link-pool.c","sites":[]}
// AGAIN-LABEL: define {{.*}} @pool_grow(
// AGAIN: call {{.*}} @malloc(
// LINK-LABEL: define {{.*}} @pool_grow(
// LINK: call {{.*}} @nic_malloc_site(i64 noundef %{{.*}}, i32 noundef {{[0-9]+}})
// LINK-LABEL: define {{.*}} @log_line(
// LINK: call {{.*}} @malloc(
// TABLE: "file":"{{.*}}link-pool.c","function":"pool_grow"{{.*}}"sink":"send arg 1
#include <stddef.h>
#include <sys/socket.h>

char *pool_get(size_t n);
char *log_line(size_t n);

void serve(int fd, size_t n) {
  char *reply = pool_get(n);
  send(fd, reply, n, 0);
  char *line = log_line(n);
  line[0] = 0;
}
