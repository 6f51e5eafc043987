; Field sensitivity: a message struct holds a payload pointer (+8, sent through a msghdr's iovec)
; and a log pointer (+16, never sent). Only the payload's allocation becomes dataplane, even
; though both live in the same heap object, and the struct itself (the msghdr holder) does not.
; RUN: %opt-nic -S %s | FileCheck %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

%struct.msg = type { i64, ptr, ptr }
%struct.iovec = type { ptr, i64 }
%struct.msghdr = type { ptr, i32, ptr, i64, ptr, i64, i32 }

; CHECK-LABEL: define ptr @make(
; CHECK: %m = call ptr @malloc(i64 24)
; CHECK: %payload = call ptr @nic_malloc_site(i64 %n, i32 noundef
; CHECK: %log = call ptr @malloc(i64 256)
define ptr @make(i64 %n) {
  %m = call ptr @malloc(i64 24)
  %payload = call ptr @malloc(i64 %n)
  %log = call ptr @malloc(i64 256)
  %f1 = getelementptr inbounds %struct.msg, ptr %m, i32 0, i32 1
  store ptr %payload, ptr %f1
  %f2 = getelementptr inbounds %struct.msg, ptr %m, i32 0, i32 2
  store ptr %log, ptr %f2
  ret ptr %m
}

; CHECK-LABEL: define void @transmit(
define void @transmit(i32 %fd, ptr %m) {
  %iov = alloca %struct.iovec
  %hdr = alloca %struct.msghdr
  %f1 = getelementptr inbounds %struct.msg, ptr %m, i32 0, i32 1
  %payload = load ptr, ptr %f1
  %base = getelementptr inbounds %struct.iovec, ptr %iov, i32 0, i32 0
  store ptr %payload, ptr %base
  %iovp = getelementptr inbounds %struct.msghdr, ptr %hdr, i32 0, i32 2
  store ptr %iov, ptr %iovp
  %r = call i64 @sendmsg(i32 %fd, ptr %hdr, i32 0)
  ret void
}

define void @main_path(i32 %fd, i64 %n) {
  %m = call ptr @make(i64 %n)
  call void @transmit(i32 %fd, ptr %m)
  ret void
}

declare ptr @malloc(i64)
declare i64 @sendmsg(i32, ptr, i32)
