// A rewrite inside a function whose definition every module using it has a copy of (template
// and inline functions: linkonce_odr in a comdat) is made in a local copy that this module's
// own functions call; the shared definition is left as every other module has it, else the
// linker would keep whichever copy came first. A function another module may replace (weak)
// and a shared function only called through its address cannot host a rewrite: both are
// reported instead.
// RUN: %clang-nic -x c++ -O1 -S -emit-llvm -o %t.ll %s
// RUN: FileCheck %s < %t.ll
// RUN: opt -passes=verify -disable-output %t.ll
// RUN: %clang-nic -x c++ -O1 -c -o /dev/null -Rpass=nic-dataplane-sites -Rpass-missed=nic-dataplane-sites %s 2>&1 | FileCheck %s --check-prefix=REMARK
#include <cstddef>
#include <sys/socket.h>

template <typename T> struct Buf {
  T *data;
  __attribute__((noinline)) explicit Buf(size_t n) : data(new T[n]) {}
};

// A shared caller of the shared constructor gets a copy too, which calls the copy.
inline __attribute__((noinline)) Buf<char> *make_buf(size_t n) { return new Buf<char>(n); }

// Calls through the address keep the shared definitions (and keep them in the output here).
Buf<char> *(*make_buf_ptr)(size_t) = make_buf;
// CHECK-LABEL: define linkonce_odr {{.*}}@_Z8make_bufm({{.*}} comdat
// CHECK: invoke void @_ZN3BufIcEC2Em(

// CHECK-LABEL: define {{.*}}void @_Z4sendim(
// CHECK: call {{.*}}@_ZN3BufIcEC2Em.nic_local(
// CHECK: ret void
void send(int fd, size_t n) {
  Buf<char> b(n);
  send(fd, b.data, n, 0);
}
// The shared definitions are as in every other module.
// CHECK-LABEL: define linkonce_odr {{.*}}@_ZN3BufIcEC2Em({{.*}} comdat
// CHECK: call {{.*}}@_Znam(

// CHECK-LABEL: define {{.*}}void @_Z11send_helperim(
// CHECK: call {{.*}}@_Z8make_bufm.nic_local(
void send_helper(int fd, size_t n) {
  Buf<char> *b = make_buf(n);
  send(fd, b->data, n, 0);
}

// Replaceable by another module's strong definition: left alone, and said so.
// CHECK-LABEL: define weak {{.*}}@_Z9weak_sendi(
// CHECK: call {{.*}}@_Znam(
__attribute__((weak)) void weak_send(int fd) { send(fd, new char[64], 64, 0); }

// Reached only through a vtable: a local copy would never run.
// CHECK-LABEL: define linkonce_odr {{.*}}@_ZN6Sender2goEi(
// CHECK: call {{.*}}@_Znam(
struct Sender {
  virtual void go(int fd) { send(fd, new char[32], 32, 0); }
};
Sender *make_sender() { return new Sender; }

// The local copies: internal, out of the comdat, rewritten, calling each other.
// CHECK-LABEL: define internal {{.*}}void @_ZN3BufIcEC2Em.nic_local(
// CHECK-NOT: comdat
// CHECK-SAME: {
// CHECK: call {{.*}}@nic_new_array_site(
// CHECK-LABEL: define internal {{.*}}@_Z8make_bufm.nic_local(
// CHECK-NOT: comdat
// CHECK-SAME: {
// CHECK: invoke {{.*}}@_ZN3BufIcEC2Em.nic_local(

// REMARK-DAG: shared-definitions.cpp:16:{{.*}} remark: _Znam -> nic_new_array_site (site {{[0-9]+}}): reaches send arg 1 {{.*}} (in _ZN3BufIcEC2Em.nic_local, this module's copy of a function other modules share: linkonce_odr, in a comdat)
// REMARK-DAG: shared-definitions.cpp:48:{{.*}} remark: _Znam reaches send arg 1 {{.*}} but it is in _Z9weak_sendi (weak), which another module may define differently
// REMARK-DAG: shared-definitions.cpp:54:{{.*}} remark: _Znam reaches send arg 1 {{.*}} but it is in _ZN6Sender2goEi (linkonce_odr, in a comdat), whose definition other modules share, and no function this module defines alone calls it directly
