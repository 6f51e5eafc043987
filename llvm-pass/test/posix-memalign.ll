; posix_memalign returns its block through the out argument: the object is followed from the
; store into *out, through the iovec, to writev on a socket.
; RUN: %opt-nic -S %s | FileCheck %s

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

%struct.iovec = type { ptr, i64 }

; CHECK-LABEL: define i32 @aligned_send(
; CHECK: %rc = call i32 @nic_posix_memalign_site(ptr %out, i64 4096, i64 %n, i32 noundef [[ID:[0-9]+]])
; CHECK: %rc2 = call i32 @posix_memalign(ptr %out2, i64 64, i64 %n)
define i32 @aligned_send(i64 %n) {
  %out = alloca ptr
  %out2 = alloca ptr
  %s = call i32 @socket(i32 2, i32 1, i32 0)
  %rc = call i32 @posix_memalign(ptr %out, i64 4096, i64 %n)
  %rc2 = call i32 @posix_memalign(ptr %out2, i64 64, i64 %n)
  %buf = load ptr, ptr %out
  %iov = alloca [2 x %struct.iovec]
  %second = getelementptr inbounds [2 x %struct.iovec], ptr %iov, i64 0, i64 1, i32 0
  store ptr %buf, ptr %second
  %w = call i64 @writev(i32 %s, ptr %iov, i32 2)
  ret i32 %rc
}
; CHECK: declare i32 @nic_posix_memalign_site(ptr, i64, i64, i32 noundef)

declare i32 @posix_memalign(ptr, i64, i64)
declare i32 @socket(i32, i32, i32)
declare i64 @writev(i32, ptr, i32)
