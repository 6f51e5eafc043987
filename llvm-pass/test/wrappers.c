// An allocation wrapper used on a sink path and on a control path: only the sink path gets
// dataplane memory. Each dataplane call site calls a clone of the wrapper that takes the site
// id; wrappers of wrappers are cloned down to the malloc. A wrapper that builds an object with a
// separate data buffer hands the data's allocation over through the fields it stored.
// RUN: %clang-nic -O0 -S -emit-llvm -o - %s | FileCheck %s
// RUN: %clang-nic -O2 -S -emit-llvm -o - %s | FileCheck %s --check-prefix=O2
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) abort();
  return p;
}
static void *buf_alloc(size_t n) { return xmalloc(n + 16); }

// CHECK-LABEL: define {{.*}} @send_path(
// CHECK: call ptr @buf_alloc.nic_site(i64 noundef %{{.*}}, i32 noundef [[SITE:[0-9]+]])
// O2-LABEL: define {{.*}} @send_path(
// O2: call {{.*}} @nic_malloc_site(i64 noundef %{{.*}}, i32 noundef [[SITE:[0-9]+]])
void send_path(int fd, size_t n) {
  char *b = buf_alloc(n);
  send(fd, b, n, 0);
}

// CHECK-LABEL: define {{.*}} @control_path(
// CHECK: call ptr @xmalloc(i64
// O2-LABEL: define {{.*}} @control_path(
// O2: call {{.*}} @{{malloc|calloc}}(
void consume(char *c);
void control_path(size_t n) {
  char *c = xmalloc(n);
  memset(c, 0, n);
  consume(c);
}

// A second dataplane caller: same clone, its own site id.
// CHECK-LABEL: define {{.*}} @other_send(
// CHECK: call ptr @xmalloc.nic_site(i64 noundef 64, i32 noundef
void other_send(int fd) { send(fd, xmalloc(64), 64, 0); }

struct pkt {
  size_t len;
  char *data;
};
static struct pkt *pkt_new(size_t n) {
  struct pkt *p = malloc(sizeof *p);
  p->len = n;
  p->data = malloc(n);
  return p;
}
// The packet header stays control memory; its data buffer becomes a site.
// CHECK-LABEL: define {{.*}} @send_pkt(
// CHECK: call ptr @pkt_new(
void send_pkt(int fd, size_t n) {
  struct pkt *p = pkt_new(n);
  send(fd, p->data, p->len, 0);
}
// CHECK-LABEL: define internal ptr @pkt_new(
// CHECK: call {{.*}} @malloc(i64 noundef 16)
// CHECK: call {{.*}} @nic_malloc_site(


// A wrapper that also keeps its block in a registry is not cloned per call site (the registry's
// copy would not see what callers store): its malloc itself becomes the site.
static void *registry[16];
static void *tracked_alloc(size_t n) {
  void *p = malloc(n);
  registry[n % 16] = p;
  return p;
}
// CHECK-LABEL: define {{.*}} @send_tracked(
// CHECK: call ptr @tracked_alloc(i64 noundef 32)
// CHECK-LABEL: define internal ptr @tracked_alloc(
// CHECK: call {{.*}} @nic_malloc_site(
void send_tracked(int fd) { send(fd, tracked_alloc(32), 32, 0); }

// The clones come last in the module.
// CHECK-LABEL: define internal ptr @buf_alloc.nic_site(i64 noundef %n, i32 %nic.site_id)
// CHECK: call ptr @xmalloc.nic_site(i64 noundef %{{.*}}, i32 noundef %nic.site_id)
// CHECK-LABEL: define internal ptr @xmalloc.nic_site(i64 noundef %n, i32 %nic.site_id)
// CHECK: call {{.*}} @nic_malloc_site(i64 noundef %{{.*}}, i32 noundef %nic.site_id)
