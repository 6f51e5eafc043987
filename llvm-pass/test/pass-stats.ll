; NICMALLOC_PASS_STATS=1 says where the solver's work comes from: the edges made by each kind
; of constraint and the pointees they carried, collapsed objects, and cycles of plain copies.
; The cycle (%p and %q copy each other) is merged into one node before the solver goes round it.
; RUN: env NICMALLOC_PASS_STATS=1 %opt-nic -disable-output %s 2>&1 | FileCheck %s
; CHECK: nic-dataplane-sites: round 1: nodes {{[0-9]+}} (1 merged in {{[0-9]+}} passes), edges {{[0-9]+}}, objects 4 (0 collapsed)
; CHECK-SAME: edges/pointees carried by origin: build {{[0-9]+}}/{{[0-9]+}} load 1/{{[0-9]+}} store 1/{{[0-9]+}} call 0/0 memcpy 1/{{[0-9]+}} wrapper 0/0
; CHECK-SAME: copy cycles 0 over 0 nodes (largest 0)

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

define internal void @f(i32 %fd, i1 %c) {
entry:
  %a = call ptr @malloc(i64 64)
  %s = alloca ptr
  %t = alloca ptr
  store ptr %a, ptr %s
  call void @llvm.memcpy.p0.p0.i64(ptr %t, ptr %s, i64 8, i1 false)
  br label %loop
loop:
  %p = phi ptr [ %a, %entry ], [ %q, %loop ]
  %q = phi ptr [ %a, %entry ], [ %p, %loop ]
  br i1 %c, label %loop, label %exit
exit:
  %x = load ptr, ptr %t
  %r = call i64 @send(i32 %fd, ptr %x, i64 64, i32 0)
  ret void
}
declare ptr @malloc(i64)
declare i64 @send(i32, ptr, i64, i32)
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)
