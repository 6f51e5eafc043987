; When the points-to solver runs out of budget the module is left unchanged (an incomplete
; solution could miss a flow), a warning says so, and the site table marks the module.
; RUN: rm -f %t.jsonl
; RUN: %opt-nic -nic-analysis-budget=1 -nic-site-table=%t.jsonl -S %s 2>%t.err | FileCheck %s
; RUN: FileCheck %s --check-prefix=WARN < %t.err
; RUN: FileCheck %s --check-prefix=TABLE < %t.jsonl
; CHECK: call ptr @malloc(i64 64)
; CHECK-NOT: nic_malloc_site
; WARN: warning: nicmalloc dataplane sites: the points-to analysis of {{.*}}budget.ll exceeded its budget
; TABLE: {"incomplete":"points-to budget exhausted","module":"{{.*}}budget.ll","sites":[]}

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

define void @f(i32 %fd) {
  %a = call ptr @malloc(i64 64)
  %b = getelementptr i8, ptr %a, i64 8
  %r = call i64 @send(i32 %fd, ptr %b, i64 8, i32 0)
  ret void
}
declare ptr @malloc(i64)
declare i64 @send(i32, ptr, i64, i32)
