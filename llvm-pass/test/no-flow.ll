; Allocations that never reach a sink stay plain malloc: a log written to stderr (write() on a
; descriptor that is not a socket), a buffer given to an unknown function, a buffer whose
; neighbour field (not the sent one) is stored, and a sent stack buffer (nothing to rewrite).
; RUN: %opt-nic -S %s | FileCheck %s
; RUN: %opt-nic -S %s | FileCheck %s --check-prefix=DECL

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

; CHECK-LABEL: define void @log_line(
; CHECK: call ptr @malloc(i64 %n)
define void @log_line(i64 %n) {
  %buf = call ptr @malloc(i64 %n)
  %w = call i64 @write(i32 2, ptr %buf, i64 %n)
  call void @free(ptr %buf)
  ret void
}

; CHECK-LABEL: define void @to_unknown(
; CHECK: call ptr @malloc(i64 %n)
define void @to_unknown(i64 %n) {
  %buf = call ptr @malloc(i64 %n)
  call void @consume(ptr %buf)
  ret void
}

; CHECK-LABEL: define void @stack_only(
; CHECK: call ptr @malloc(i64 %n)
define void @stack_only(i32 %fd, i64 %n) {
  %tmp = alloca [64 x i8]
  %unrelated = call ptr @malloc(i64 %n)
  %r = call i64 @send(i32 %fd, ptr %tmp, i64 64, i32 0)
  call void @free(ptr %unrelated)
  ret void
}

; DECL-NOT: nic_malloc_site

declare ptr @malloc(i64)
declare void @free(ptr)
declare void @consume(ptr)
declare i64 @write(i32, ptr, i64)
declare i64 @send(i32, ptr, i64, i32)
