; Inputs that used to break the pass (found by a stress pass over real and odd code): the
; output must verify, and each construct is rewritten or left alone as described.
; RUN: %opt-nic -nic-sink-file=%inputs/tab.sinks -S %s | FileCheck %s
; RUN: %opt-nic -nic-sink-file=%inputs/tab.sinks -passes=nic-dataplane-sites,verify -disable-output %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

%struct.S = type { i64, ptr }

declare ptr @malloc(i64)
declare i64 @send(i32, ptr, i64, i32)
declare void @tab_send(i32, ptr)

; musttail cannot survive the extra argument: in the wrapper's clone (checked at the end) the
; call becomes a plain tail call; the original keeps its own.
; CHECK-LABEL: define ptr @tail_alloc(
; CHECK: %p = musttail call ptr @malloc(i64 %n)
define ptr @tail_alloc(i64 %n) {
  %p = musttail call ptr @malloc(i64 %n)
  ret ptr %p
}
define void @send_tail(i32 %fd) {
  %b = call ptr @tail_alloc(i64 64)
  %r = call i64 @send(i32 %fd, ptr %b, i64 64, i32 0)
  ret void
}

; malloc called through a cast (an unprototyped declaration in C): left as it is.
; CHECK-LABEL: define void @cast_call(
; CHECK: %p = call ptr @malloc(i32 64)
define void @cast_call(i32 %fd) {
  %p = call ptr @malloc(i32 64)
  %r = call i64 @send(i32 %fd, ptr %p, i64 64, i32 0)
  ret void
}

; A wrapper with computed goto is not cloned (its blockaddress would point into the original):
; its allocations are rewritten where they are, with ids of their own.
; CHECK-LABEL: define ptr @goto_wrap(
; CHECK: %p = call ptr @nic_malloc_site(i64 %n, i32 noundef {{[0-9]+}})
; CHECK: %q = call ptr @nic_malloc_site(i64 %n, i32 noundef {{[0-9]+}})
; CHECK-LABEL: define void @goto_caller(
; CHECK: %b = call ptr @goto_wrap(i64 64, i32 1)
@targets = internal constant [2 x ptr] [ptr blockaddress(@goto_wrap, %a), ptr blockaddress(@goto_wrap, %b)]
define ptr @goto_wrap(i64 %n, i32 %k) {
entry:
  %slot = getelementptr [2 x ptr], ptr @targets, i64 0, i32 %k
  %dest = load ptr, ptr %slot
  indirectbr ptr %dest, [label %a, label %b]
a:
  %p = call ptr @malloc(i64 %n)
  ret ptr %p
b:
  %q = call ptr @malloc(i64 %n)
  ret ptr %q
}
define void @goto_caller(i32 %fd) {
  %b = call ptr @goto_wrap(i64 64, i32 1)
  %r = call i64 @send(i32 %fd, ptr %b, i64 64, i32 0)
  ret void
}

; A vector GEP with a vector struct index does not crash the field computation.
; CHECK-LABEL: define void @vector_gep(
; CHECK: %o = call ptr @nic_malloc_site(i64 32, i32 noundef
define void @vector_gep(i32 %fd, <2 x ptr> %v) {
  %o = call ptr @malloc(i64 32)
  %f = getelementptr %struct.S, <2 x ptr> %v, <2 x i64> zeroinitializer, <2 x i32> <i32 1, i32 1>
  %r = call i64 @send(i32 %fd, ptr %o, i64 32, i32 0)
  ret void
}

; A sink file line may separate the name and its spec with a tab.
; CHECK-LABEL: define void @tab_sink(
; CHECK: %t = call ptr @nic_malloc_site(i64 16, i32 noundef
define void @tab_sink(i32 %fd) {
  %t = call ptr @malloc(i64 16)
  call void @tab_send(i32 %fd, ptr %t)
  ret void
}

; CHECK-NOT: @goto_wrap.nic_site
; CHECK-LABEL: define internal ptr @tail_alloc.nic_site(
; CHECK-NEXT: %p = tail call ptr @nic_malloc_site(i64 %n, i32 noundef %nic.site_id)
