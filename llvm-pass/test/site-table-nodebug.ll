; Without debug info a site is told apart by its ordinal among the function's calls; the ids
; are in range and the file is the module's source file.
; RUN: rm -f %t.jsonl
; RUN: %opt-nic -nic-site-table=%t.jsonl -disable-output %s
; RUN: FileCheck %s < %t.jsonl
; CHECK: {"module":"nodebug.c","sites":[
; CHECK-SAME: {"callee":"malloc","column":0,"file":"nodebug.c","function":"two","id":{{[0-9]+}},"kind":"allocation","line":0,"ordinal":0,
; CHECK-SAME: {"callee":"malloc","column":0,"file":"nodebug.c","function":"two","id":{{[0-9]+}},"kind":"allocation","line":0,"ordinal":1,
source_filename = "nodebug.c"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

define void @two(i32 %fd) {
  %a = call ptr @malloc(i64 16)
  %b = call ptr @malloc(i64 32)
  %r1 = call i64 @send(i32 %fd, ptr %a, i64 16, i32 0)
  %r2 = call i64 @sendto(i32 %fd, ptr %b, i64 32, i32 0, ptr null, i32 0)
  ret void
}
declare ptr @malloc(i64)
declare i64 @send(i32, ptr, i64, i32)
declare i64 @sendto(i32, ptr, i64, i32, ptr, i32)
