// Flow across functions: a helper that sends its argument, a helper that returns its argument,
// a buffer parked in a global and sent elsewhere, and one sent through a function pointer.
// RUN: %clang-nic -O1 -c -o /dev/null -Rpass=nic-dataplane-sites %s 2>&1 | FileCheck %s
// RUN: %clang-nic -O0 -c -o /dev/null -Rpass=nic-dataplane-sites %s 2>&1 | FileCheck %s --check-prefix=O0
#include <stdlib.h>
#include <sys/socket.h>

static void push(int fd, const void *p, size_t n) { send(fd, p, n, 0); }
static char *identity(char *p) { return p; }

// CHECK-DAG: helpers.c:[[@LINE+2]]:46: remark: malloc -> nic_malloc_site {{.*}} reaches send arg 1 at {{.*}}helpers.c:8:{{[0-9]+}} in push
// O0-DAG: helpers.c:[[@LINE+1]]:46: remark: malloc -> nic_malloc_site
void via_helper(int fd, size_t n) { push(fd, malloc(n), n); }

// CHECK-DAG: helpers.c:[[@LINE+2]]:57: remark: malloc -> nic_malloc_site {{.*}} in via_identity
// O0-DAG: helpers.c:[[@LINE+1]]:57: remark: malloc -> nic_malloc_site
void via_identity(int fd, size_t n) { send(fd, identity(malloc(n)), n, 0); }

static char *pending;
// CHECK-DAG: helpers.c:[[@LINE+2]]:33: remark: malloc -> nic_malloc_site {{.*}} reaches send arg 1 at {{.*}}helpers.c:[[@LINE+3]]:{{[0-9]+}} in flush
// O0-DAG: helpers.c:[[@LINE+1]]:33: remark: malloc -> nic_malloc_site
void park(size_t n) { pending = malloc(n); }
void flush(int fd) { send(fd, pending, 16, 0); }

typedef void (*sender_fn)(int, const void *, size_t);
static sender_fn sender = push;
// CHECK-DAG: helpers.c:[[@LINE+2]]:49: remark: malloc -> nic_malloc_site {{.*}} in push
// O0-DAG: helpers.c:[[@LINE+1]]:49: remark: malloc -> nic_malloc_site
void via_pointer(int fd, size_t n) { sender(fd, malloc(n), n); }

// identity() is applied per call site (once SSA is built: not at -O0, where its result goes
// through a stack slot), so this malloc does not inherit via_identity's sink.
// CHECK-NOT: helpers.c:[[@LINE+1]]:{{.*}}remark
void not_sent(size_t n) { free(identity(malloc(n))); }
