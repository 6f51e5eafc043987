// nothrow new and new[], aligned new[] and aligned nothrow new reaching send become the matching
// site functions (the array ones for new[]): the operator's own arguments plus the id, the
// alloc-family on the call (delete vs delete[]) and allocalign on the alignment. A nothrow new
// that reaches no sink is left alone.
// RUN: %clang-nic -x c++ -O0 -S -emit-llvm -o - %s | FileCheck %s
#include <cstddef>
#include <new>
#include <sys/socket.h>

struct Small {
  char bytes[64];
};
struct alignas(128) Wide {
  char bytes[256];
};

// CHECK-LABEL: define {{.*}} @_Z12send_nothrowim(
// CHECK: call noalias noundef ptr @nic_new_nothrow_site(i64 noundef 64, ptr noundef nonnull align 1 dereferenceable(1) @_ZSt7nothrow, i32 noundef {{[0-9]+}}) [[NT:#[0-9]+]]
// CHECK: call noalias noundef ptr @nic_new_array_nothrow_site(i64 noundef %{{.*}}, ptr noundef nonnull align 1 dereferenceable(1) @_ZSt7nothrow, i32 noundef {{[0-9]+}}) [[NTARR:#[0-9]+]]
void send_nothrow(int fd, size_t n) {
  Small *p = new (std::nothrow) Small;
  if (p) send(fd, p, sizeof *p, 0);
  char *q = new (std::nothrow) char[n];
  if (q) send(fd, q, n, 0);
}

// CHECK-LABEL: define {{.*}} @_Z18send_aligned_arrayi(
// CHECK: call noalias noundef nonnull align 128 ptr @nic_new_array_aligned_site(i64 noundef 1024, i64 noundef 128, i32 noundef {{[0-9]+}}) [[ALARR:#[0-9]+]]
void send_aligned_array(int fd) {
  Wide *w = new Wide[4];
  send(fd, w, 4 * sizeof *w, 0);
}

// CHECK-LABEL: define {{.*}} @_Z20send_aligned_nothrowi(
// CHECK: call noalias noundef align 128 ptr @nic_new_aligned_nothrow_site(i64 noundef 256, i64 noundef 128, ptr noundef nonnull align 1 dereferenceable(1) @_ZSt7nothrow, i32 noundef {{[0-9]+}}) [[NT]]
void send_aligned_nothrow(int fd) {
  Wide *w = new (std::nothrow) Wide;
  if (w) send(fd, w, sizeof *w, 0);
}

// CHECK-LABEL: define {{.*}} @_Z26send_aligned_nothrow_arrayi(
// CHECK: call noalias noundef align 128 ptr @nic_new_array_aligned_nothrow_site(i64 noundef 512, i64 noundef 128, ptr noundef nonnull align 1 dereferenceable(1) @_ZSt7nothrow, i32 noundef {{[0-9]+}}) [[NTARR]]
void send_aligned_nothrow_array(int fd) {
  Wide *w = new (std::nothrow) Wide[2];
  if (w) send(fd, w, 2 * sizeof *w, 0);
}

// CHECK-LABEL: define {{.*}} @_Z15nothrow_controlv(
// CHECK-NOT: nic_new
// CHECK: call noalias noundef ptr @_ZnamRKSt9nothrow_t(i64 noundef 32,
// CHECK-NOT: nic_new
// CHECK: ret ptr
char *nothrow_control() { return new (std::nothrow) char[32]; }

// CHECK: declare noalias noundef ptr @nic_new_aligned_nothrow_site(i64 noundef, i64 allocalign noundef, ptr noundef nonnull align 1 dereferenceable(1), i32 noundef) [[ALNTDECL:#[0-9]+]]
// CHECK: declare noalias noundef ptr @nic_new_array_aligned_nothrow_site(i64 noundef, i64 allocalign noundef, ptr noundef nonnull align 1 dereferenceable(1), i32 noundef) [[ALNTARRDECL:#[0-9]+]]
// CHECK-DAG: attributes [[NT]] = { builtin nounwind allocsize(0) "alloc-family"="_Znwm" }
// CHECK-DAG: attributes [[NTARR]] = { builtin nounwind allocsize(0) "alloc-family"="_Znam" }
// CHECK-DAG: attributes [[ALARR]] = { builtin allocsize(0) "alloc-family"="_Znam" }
// CHECK-DAG: attributes [[ALNTDECL]] = { {{.*}}allockind("alloc,uninitialized,aligned") allocsize(0) {{.*}}"alloc-family"="_Znwm"
// CHECK-DAG: attributes [[ALNTARRDECL]] = { {{.*}}allockind("alloc,uninitialized,aligned") allocsize(0) {{.*}}"alloc-family"="_Znam"
