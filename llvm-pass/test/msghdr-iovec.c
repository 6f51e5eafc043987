// sendmsg follows msghdr -> msg_iov -> iovec[].iov_base; writev follows iovec[].iov_base, and
// only on a socket. The msghdr, the iovec array and the length fields are not data, even when
// they share a heap object with the iovecs.
// RUN: %clang-nic -O0 -S -emit-llvm -o - %s | FileCheck %s
// RUN: %clang-nic -O2 -c -o /dev/null -Rpass=nic-dataplane-sites %s 2>&1 | FileCheck %s --check-prefix=O2
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>

struct reply {
  struct iovec iov[3];
  struct msghdr msg;
};

// CHECK-LABEL: define {{.*}} @send_reply(
// CHECK: call {{.*}} @malloc(i64 noundef 104)
// CHECK: call {{.*}} @nic_malloc_site(i64 noundef 32, i32 noundef
// CHECK: call {{.*}} @nic_calloc_site(i64 noundef 1, i64 noundef %{{.*}}, i32 noundef
// CHECK: call {{.*}} @nic_malloc_site(i64 noundef %{{.*}}, i32 noundef
// O2-DAG: msghdr-iovec.c:[[@LINE+7]]:{{.*}} malloc -> nic_malloc_site {{.*}} reaches sendmsg arg 1
// O2-DAG: msghdr-iovec.c:[[@LINE+8]]:{{.*}} calloc -> nic_calloc_site {{.*}} reaches sendmsg arg 1
// O2-DAG: msghdr-iovec.c:[[@LINE+8]]:{{.*}} malloc -> nic_malloc_site {{.*}} reaches sendmsg arg 1
void send_reply(int fd, size_t n) {
  struct reply *r = malloc(sizeof *r);
  r->msg.msg_iov = r->iov;
  r->msg.msg_iovlen = 3;
  char *header = malloc(32);
  r->iov[0].iov_base = header;
  r->iov[1].iov_base = calloc(1, n);
  r->iov[2].iov_base = malloc(n);
  sendmsg(fd, &r->msg, 0);
}

// CHECK-LABEL: define {{.*}} @vector_write(
// CHECK: call {{.*}} @nic_malloc_site(i64 noundef %{{.*}}, i32 noundef
// CHECK: call {{.*}} @malloc(i64 noundef %{{.*}})
void vector_write(int listener, size_t n) {
  int conn = accept(listener, 0, 0);
  struct iovec to_peer[1] = {{malloc(n), n}};
  writev(conn, to_peer, 1);
  struct iovec to_stdout[1] = {{malloc(n), n}};
  writev(1, to_stdout, 1);
}

// A batch: sendmmsg's mmsghdr array starts with each message's msghdr.
// CHECK-LABEL: define {{.*}} @batch(
// CHECK: call {{.*}} @nic_malloc_site(
void batch(int fd, size_t n) {
  struct iovec iov = {malloc(n), n};
  struct mmsghdr msgs[4] = {0};
  msgs[2].msg_hdr.msg_iov = &iov;
  msgs[2].msg_hdr.msg_iovlen = 1;
  sendmmsg(fd, msgs, 4, 0);
}
