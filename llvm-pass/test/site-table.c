// The site table: one JSON line per module, with id, file:line:column, function, what replaced
// what, and the path that reached the sink. A module compiled again (an incremental rebuild)
// replaces its line instead of adding one, so its ids are not listed twice and an edit that
// moves a site leaves no stale file:line behind.
// RUN: rm -f %t.jsonl
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.jsonl %clang-nic -O1 -c -o %t.o %s
// RUN: FileCheck %s < %t.jsonl
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.jsonl %clang-nic -O1 -DSECOND -c -o %t2.o %s
// RUN: FileCheck %s --check-prefix=AGAIN < %t.jsonl
// RUN: rm -f %t.moved.jsonl && cp %s %t.c
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.moved.jsonl %clang-nic -O1 -c -o %t3.o %t.c
// RUN: sed -i '1i // one line more: every site moves down by one' %t.c
// RUN: env NICMALLOC_SITE_TABLE_OUT=%t.moved.jsonl %clang-nic -O1 -c -o %t3.o %t.c
// RUN: FileCheck %s --check-prefix=MOVED < %t.moved.jsonl
// The id in the table is the one compiled into the call.
// RUN: %clang-nic -O0 -S -emit-llvm -o - %s | FileCheck %s --check-prefix=IR
// The option form needs the plugin loaded before options are parsed (-fplugin):
// RUN: %clang-nic -fplugin=%plugin -O0 -c -o /dev/null %s -mllvm -nic-site-table=%t.O0.jsonl
// RUN: FileCheck %s --check-prefix=OPT < %t.O0.jsonl
// OPT: "function":"reply"
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>

void reply(int fd, size_t n) {
  struct iovec iov = {malloc(n), n};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  sendmsg(fd, &msg, 0);
}
#ifdef SECOND
void other(int fd) { send(fd, calloc(4, 16), 64, 0); }
#endif

// CHECK: {"module":"{{.*}}site-table.c","sites":[{
// CHECK-SAME: "callee":"malloc","column":23,"file":"{{.*}}site-table.c","function":"reply","id":[[ID:[0-9]+]],"kind":"allocation","line":26,
// CHECK-SAME: "path":["malloc() at {{.*}}site-table.c:26:23 in reply","stored at +0 of stack 'iov' in reply","stored at +16 of stack 'msg' in reply","argument 1 of sendmsg arg 1 at {{.*}}site-table.c:28:3 in reply"],
// CHECK-SAME: "replacement":"nic_malloc_site","sink":"sendmsg arg 1 at {{.*}}site-table.c:28:3 in reply","sink_spec":"1:16,0"}]}
// CHECK-NOT: {"module"
// AGAIN: {"module":"{{.*}}site-table.c","sites":[{"callee":"malloc",{{.*}}"line":26,
// AGAIN-SAME: {"callee":"calloc",{{.*}}"function":"other",{{.*}}"line":31,{{.*}}"replacement":"nic_calloc_site"
// AGAIN-NOT: {"module"
// MOVED-NOT: "line":26,
// MOVED: {"module":"{{.*}}site-table.c.tmp.c","sites":[{"callee":"malloc",{{.*}}"line":27,
// MOVED-NOT: {"module"
// IR: call {{.*}} @nic_malloc_site(i64 noundef %{{.*}}, i32 noundef [[ID:[0-9]+]])
