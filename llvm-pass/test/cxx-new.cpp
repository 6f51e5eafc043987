// operator new and new[] as plain calls and as invokes (inside a try) become nic_new_site and
// nic_new_array_site, each declared with its alloc-family; aligned new becomes
// nic_new_aligned_site (cxx-new-variants.cpp has the nothrow and aligned array ones).
// RUN: %clang-nic -x c++ -O0 -S -emit-llvm -o - %s | FileCheck %s
// RUN: %clang-nic -x c++ -O2 -c -o /dev/null -Rpass=nic-dataplane-sites -Rpass-missed=nic-dataplane-sites %s 2>&1 | FileCheck %s --check-prefix=REMARK
#include <cstddef>
#include <sys/socket.h>

struct Packet {
  char bytes[256];
};
struct alignas(64) Line {
  char bytes[64];
};
int may_throw();

// CHECK-LABEL: define {{.*}} @_Z10send_plainim(
// CHECK: call noalias noundef nonnull ptr @nic_new_site(i64 noundef 256, i32 noundef {{[0-9]+}}) [[NEW:#[0-9]+]]
// CHECK: call noalias noundef nonnull ptr @nic_new_array_site(i64 noundef %{{.*}}, i32 noundef {{[0-9]+}}) [[NEWARR:#[0-9]+]]
void send_plain(int fd, size_t n) {
  Packet *p = new Packet;
  send(fd, p, sizeof *p, 0);
  char *raw = new char[n];
  send(fd, raw, n, 0);
}

// CHECK-LABEL: define {{.*}} @_Z8send_tryi(
// CHECK: invoke noalias noundef nonnull ptr @nic_new_site(i64 noundef 256, i32 noundef {{[0-9]+}})
// CHECK-NEXT: to label %{{.*}} unwind label %{{.*}}
void send_try(int fd) {
  try {
    Packet *p = new Packet;
    may_throw();
    send(fd, p, sizeof *p, 0);
  } catch (...) {
  }
}

// CHECK-LABEL: define {{.*}} @_Z7controlv(
// CHECK: call noalias noundef nonnull ptr @_Znwm(
Packet *control() { return new Packet; }

// CHECK-LABEL: define {{.*}} @_Z12send_alignedi(
// CHECK: call noalias noundef nonnull align 64 ptr @nic_new_aligned_site(i64 noundef 64, i64 noundef 64, i32 noundef {{[0-9]+}}) [[NEW]]
void send_aligned(int fd) {
  Line *l = new Line;
  send(fd, l, sizeof *l, 0);
}

// CHECK: declare noalias noundef nonnull ptr @nic_new_site(i64 noundef, i32 noundef) [[DECL:#[0-9]+]]
// CHECK: declare noalias noundef nonnull ptr @nic_new_array_site(i64 noundef, i32 noundef) [[DECLARR:#[0-9]+]]
// CHECK-DAG: attributes [[NEW]] = { builtin allocsize(0) "alloc-family"="_Znwm" }
// CHECK-DAG: attributes [[NEWARR]] = { builtin allocsize(0) "alloc-family"="_Znam" }
// CHECK-DAG: attributes [[DECL]] = { {{.*}}allockind("alloc,uninitialized") allocsize(0) {{.*}}"alloc-family"="_Znwm"
// CHECK-DAG: attributes [[DECLARR]] = { {{.*}}allockind("alloc,uninitialized") allocsize(0) {{.*}}"alloc-family"="_Znam"

// REMARK-DAG: cxx-new.cpp:21:{{.*}} remark: _Znwm -> nic_new_site
// REMARK-DAG: cxx-new.cpp:23:{{.*}} remark: _Znam -> nic_new_array_site
// REMARK-DAG: cxx-new.cpp:32:{{.*}} remark: _Znwm -> nic_new_site
// REMARK-DAG: cxx-new.cpp:46:{{.*}} remark: _ZnwmSt11align_val_t -> nic_new_aligned_site
