; A malloc'ed buffer handed straight to send() becomes a dataplane site; the declaration of
; nic_malloc_site keeps malloc's allocator attributes so free() still pairs with it.
; RUN: %opt-nic -S %s | FileCheck %s
; RUN: %opt-nic -disable-output -pass-remarks=nic-dataplane-sites %s 2>&1 | FileCheck %s --check-prefix=REMARK

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

; CHECK-LABEL: define void @reply(
; CHECK: %buf = call noalias ptr @nic_malloc_site(i64 noundef %n, i32 noundef [[ID:[0-9]+]])
; CHECK-NOT: @malloc(
; CHECK: call i64 @send(i32 %fd, ptr %p
define void @reply(i32 %fd, i64 %n) {
  %buf = call noalias ptr @malloc(i64 noundef %n)
  %p = getelementptr inbounds i8, ptr %buf, i64 8
  %r = call i64 @send(i32 %fd, ptr %p, i64 %n, i32 0)
  call void @free(ptr %buf)
  ret void
}

; Through a select and a phi.
; CHECK-LABEL: define void @merge(
; CHECK: %a = call ptr @nic_malloc_site(i64 64, i32 noundef
; CHECK: %b = call ptr @nic_malloc_site(i64 128, i32 noundef
define void @merge(i32 %fd, i1 %c) {
entry:
  %a = call ptr @malloc(i64 64)
  %b = call ptr @malloc(i64 128)
  br i1 %c, label %x, label %y
x:
  br label %join
y:
  br label %join
join:
  %p = phi ptr [ %a, %x ], [ %b, %y ]
  %q = select i1 %c, ptr %p, ptr null
  %r = call i64 @send(i32 %fd, ptr %q, i64 64, i32 0)
  ret void
}

; CHECK: declare noalias ptr @nic_malloc_site(i64 noundef, i32 noundef) [[ATTRS:#[0-9]+]]
; CHECK: attributes [[ATTRS]] = { {{.*}}allockind("alloc,uninitialized") allocsize(0) {{.*}}"alloc-family"="malloc"
; REMARK: remark: <unknown>:0:0: malloc -> nic_malloc_site (site {{[0-9]+}}): reaches send arg 1 in reply

declare noalias ptr @malloc(i64 noundef) #0
declare void @free(ptr allocptr nocapture noundef) #1
declare i64 @send(i32, ptr, i64, i32)

attributes #0 = { nounwind allockind("alloc,uninitialized") allocsize(0) memory(inaccessiblemem: readwrite) "alloc-family"="malloc" }
attributes #1 = { nounwind allockind("free") memory(argmem: readwrite, inaccessiblemem: readwrite) "alloc-family"="malloc" }
