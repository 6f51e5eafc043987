; A sink file adds sinks with their argument and pointer path; -nic-default-sinks=false drops
; the built-in list; a malformed sink file is a compile error.
; RUN: %opt-nic -nic-sink-file=%inputs/custom.sinks -S %s | FileCheck %s
; RUN: env NICMALLOC_SINK_FILE=%inputs/custom.sinks %opt-nic -S %s | FileCheck %s
; RUN: %opt-nic -nic-sink-file=%inputs/custom.sinks -nic-default-sinks=false -S %s | FileCheck %s --check-prefix=NODEFAULT
; RUN: not %opt-nic -nic-sink-file=%inputs/bad.sinks -disable-output %s 2>&1 | FileCheck %s --check-prefix=BAD
; BAD: error: nicmalloc dataplane sites: {{.*}}bad.sinks: bad sink spec 'banana': argument must be an index or *

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

%struct.desc = type { i32, ptr }
%struct.frag = type { ptr, i32 }

; CHECK-LABEL: define void @post(
; CHECK: %frags = call ptr @malloc(i64 64)
; CHECK: %data = call ptr @nic_malloc_site(i64 %n, i32 noundef
; CHECK: %other = call ptr @nic_malloc_site(i64 %n, i32 noundef
; CHECK: %sent = call ptr @nic_malloc_site(i64 %n, i32 noundef
; NODEFAULT: %sent = call ptr @malloc(i64 %n)
define void @post(ptr %ring, i64 %n, i32 %fd) {
  %d = alloca %struct.desc
  %frags = call ptr @malloc(i64 64)
  %data = call ptr @malloc(i64 %n)
  %third = getelementptr inbounds %struct.frag, ptr %frags, i64 3, i32 0
  store ptr %data, ptr %third
  %fp = getelementptr inbounds %struct.desc, ptr %d, i32 0, i32 1
  store ptr %frags, ptr %fp
  call void @tx_post(ptr %ring, ptr %d, i32 0)
  %other = call ptr @malloc(i64 %n)
  call void @dma_copy(ptr %other, i64 %n)
  %sent = call ptr @malloc(i64 %n)
  %r = call i64 @send(i32 %fd, ptr %sent, i64 %n, i32 0)
  ret void
}

declare ptr @malloc(i64)
declare void @tx_post(ptr, ptr, i32)
declare void @dma_copy(ptr, i64)
declare i64 @send(i32, ptr, i64, i32)
