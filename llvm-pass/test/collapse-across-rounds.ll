; Objects collapsed in one round of wrapper discovery stay collapsed in the next: %a is
; addressed at 70 offsets, so round 1 solves twice (the second time with %a collapsed from the
; start); @mk is a wrapper, so there is a round 2, and it starts with %a collapsed: one solve.
; RUN: env NICMALLOC_PASS_STATS=1 %opt-nic -disable-output %s 2>&1 | FileCheck %s
; CHECK: nic-dataplane-sites: round 1: {{.*}} (0 collapsed)
; CHECK-NEXT: nic-dataplane-sites: round 1, solve 2: {{.*}} (1 collapsed)
; CHECK-NEXT: nic-dataplane-sites: round 2: {{.*}} (1 collapsed)
; CHECK-NOT: nic-dataplane-sites: round

target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

define internal ptr @mk() {
  %b = call ptr @malloc(i64 64)
  ret ptr %b
}

define void @f(i32 %fd) {
  %a = call ptr @malloc(i64 4096)
  %p1 = getelementptr i8, ptr %a, i64 1
  %p2 = getelementptr i8, ptr %a, i64 2
  %p3 = getelementptr i8, ptr %a, i64 3
  %p4 = getelementptr i8, ptr %a, i64 4
  %p5 = getelementptr i8, ptr %a, i64 5
  %p6 = getelementptr i8, ptr %a, i64 6
  %p7 = getelementptr i8, ptr %a, i64 7
  %p8 = getelementptr i8, ptr %a, i64 8
  %p9 = getelementptr i8, ptr %a, i64 9
  %p10 = getelementptr i8, ptr %a, i64 10
  %p11 = getelementptr i8, ptr %a, i64 11
  %p12 = getelementptr i8, ptr %a, i64 12
  %p13 = getelementptr i8, ptr %a, i64 13
  %p14 = getelementptr i8, ptr %a, i64 14
  %p15 = getelementptr i8, ptr %a, i64 15
  %p16 = getelementptr i8, ptr %a, i64 16
  %p17 = getelementptr i8, ptr %a, i64 17
  %p18 = getelementptr i8, ptr %a, i64 18
  %p19 = getelementptr i8, ptr %a, i64 19
  %p20 = getelementptr i8, ptr %a, i64 20
  %p21 = getelementptr i8, ptr %a, i64 21
  %p22 = getelementptr i8, ptr %a, i64 22
  %p23 = getelementptr i8, ptr %a, i64 23
  %p24 = getelementptr i8, ptr %a, i64 24
  %p25 = getelementptr i8, ptr %a, i64 25
  %p26 = getelementptr i8, ptr %a, i64 26
  %p27 = getelementptr i8, ptr %a, i64 27
  %p28 = getelementptr i8, ptr %a, i64 28
  %p29 = getelementptr i8, ptr %a, i64 29
  %p30 = getelementptr i8, ptr %a, i64 30
  %p31 = getelementptr i8, ptr %a, i64 31
  %p32 = getelementptr i8, ptr %a, i64 32
  %p33 = getelementptr i8, ptr %a, i64 33
  %p34 = getelementptr i8, ptr %a, i64 34
  %p35 = getelementptr i8, ptr %a, i64 35
  %p36 = getelementptr i8, ptr %a, i64 36
  %p37 = getelementptr i8, ptr %a, i64 37
  %p38 = getelementptr i8, ptr %a, i64 38
  %p39 = getelementptr i8, ptr %a, i64 39
  %p40 = getelementptr i8, ptr %a, i64 40
  %p41 = getelementptr i8, ptr %a, i64 41
  %p42 = getelementptr i8, ptr %a, i64 42
  %p43 = getelementptr i8, ptr %a, i64 43
  %p44 = getelementptr i8, ptr %a, i64 44
  %p45 = getelementptr i8, ptr %a, i64 45
  %p46 = getelementptr i8, ptr %a, i64 46
  %p47 = getelementptr i8, ptr %a, i64 47
  %p48 = getelementptr i8, ptr %a, i64 48
  %p49 = getelementptr i8, ptr %a, i64 49
  %p50 = getelementptr i8, ptr %a, i64 50
  %p51 = getelementptr i8, ptr %a, i64 51
  %p52 = getelementptr i8, ptr %a, i64 52
  %p53 = getelementptr i8, ptr %a, i64 53
  %p54 = getelementptr i8, ptr %a, i64 54
  %p55 = getelementptr i8, ptr %a, i64 55
  %p56 = getelementptr i8, ptr %a, i64 56
  %p57 = getelementptr i8, ptr %a, i64 57
  %p58 = getelementptr i8, ptr %a, i64 58
  %p59 = getelementptr i8, ptr %a, i64 59
  %p60 = getelementptr i8, ptr %a, i64 60
  %p61 = getelementptr i8, ptr %a, i64 61
  %p62 = getelementptr i8, ptr %a, i64 62
  %p63 = getelementptr i8, ptr %a, i64 63
  %p64 = getelementptr i8, ptr %a, i64 64
  %p65 = getelementptr i8, ptr %a, i64 65
  %p66 = getelementptr i8, ptr %a, i64 66
  %p67 = getelementptr i8, ptr %a, i64 67
  %p68 = getelementptr i8, ptr %a, i64 68
  %p69 = getelementptr i8, ptr %a, i64 69
  %p70 = getelementptr i8, ptr %a, i64 70
  %b = call ptr @mk()
  store ptr %b, ptr %p8
  %x = load ptr, ptr %p8
  %r = call i64 @send(i32 %fd, ptr %x, i64 64, i32 0)
  ret void
}
declare ptr @malloc(i64)
declare i64 @send(i32, ptr, i64, i32)
