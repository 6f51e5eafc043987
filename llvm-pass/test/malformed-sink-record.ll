; Only what NIC_SINK emits, { function pointer, pointer to a C string }, is a record: any other
; shape in .nic_sinks is a clear compile error, checked before a field it may lack is read. Two
; records may share one spec string: both are read, and the records and the string are deleted.
; RUN: split-file %s %t
; RUN: not %opt-nic -disable-output %t/one-field.ll 2>&1 | FileCheck %s --check-prefix=ONE
; RUN: not %opt-nic -disable-output %t/integer-spec.ll 2>&1 | FileCheck %s --check-prefix=INT
; RUN: not %opt-nic -disable-output %t/three-fields.ll 2>&1 | FileCheck %s --check-prefix=THREE
; RUN: not %opt-nic -disable-output %t/not-a-string.ll 2>&1 | FileCheck %s --check-prefix=NOSTR
; RUN: %opt-nic -S %t/shared-spec.ll | FileCheck %s --check-prefix=SHARED
; ONE: error: nicmalloc dataplane sites: malformed NIC_SINK record rec (expected { function, C string })
; INT: error: nicmalloc dataplane sites: malformed NIC_SINK record rec (expected { function, C string })
; THREE: error: nicmalloc dataplane sites: malformed NIC_SINK record rec (expected { function, C string })
; NOSTR: error: nicmalloc dataplane sites: malformed NIC_SINK record rec (expected { function, C string })
; SHARED-NOT: nic_sinks
; SHARED-NOT: @spec
; SHARED: call ptr @nic_malloc_site(i64 10, i32 noundef
; SHARED: call ptr @nic_malloc_site(i64 20, i32 noundef

;--- one-field.ll
declare void @mysink(ptr)
@rec = internal constant { ptr } { ptr @mysink }, section ".nic_sinks"
@llvm.used = appending global [1 x ptr] [ptr @rec], section "llvm.metadata"

;--- integer-spec.ll
declare void @mysink(ptr)
@rec = internal constant { ptr, i64 } { ptr @mysink, i64 5 }, section ".nic_sinks"
@llvm.used = appending global [1 x ptr] [ptr @rec], section "llvm.metadata"

;--- three-fields.ll
declare void @mysink(ptr)
@spec = private constant [2 x i8] c"0\00"
@rec = internal constant { ptr, ptr, ptr } { ptr @mysink, ptr @spec, ptr @spec }, section ".nic_sinks"
@llvm.used = appending global [1 x ptr] [ptr @rec], section "llvm.metadata"

;--- not-a-string.ll
declare void @mysink(ptr)
@spec = private constant i32 48
@rec = internal constant { ptr, ptr } { ptr @mysink, ptr @spec }, section ".nic_sinks"
@llvm.used = appending global [1 x ptr] [ptr @rec], section "llvm.metadata"

;--- shared-spec.ll
declare ptr @malloc(i64)
declare void @sink_a(ptr)
declare void @sink_b(ptr)
@spec = private constant [2 x i8] c"0\00"
@rec_a = internal constant { ptr, ptr } { ptr @sink_a, ptr @spec }, section ".nic_sinks"
@rec_b = internal constant { ptr, ptr } { ptr @sink_b, ptr @spec }, section ".nic_sinks"
@llvm.used = appending global [2 x ptr] [ptr @rec_a, ptr @rec_b], section "llvm.metadata"
define void @f() {
  %a = call ptr @malloc(i64 10)
  call void @sink_a(ptr %a)
  %b = call ptr @malloc(i64 20)
  call void @sink_b(ptr %b)
  ret void
}
