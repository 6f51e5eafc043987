#!/bin/sh
# What every program that preloads libnicmalloc.so maps: each library it needs costs resident
# pages in every process (the dynamic linker touches its tables), so the list is kept to what the
# allocator itself uses (libunwind is loaded only by the features that walk stacks:
# alloc/routing/unwind.c). Fails when the library needs one not listed here.
#   needed_libs.sh LIBRARY
set -u
lib=$1
allowed='libc.so.6 ld-linux-x86-64.so.2 libmimalloc.so.2 liburing.so.2'
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || { echo "FAIL: no NEEDED entries read from $lib"; exit 1; }
failed=0
for n in $needed; do
  case " $allowed " in
  *" $n "*) echo "ok: $n" ;;
  *) echo "FAIL: $lib needs $n, which every preloading process would map"; failed=1 ;;
  esac
done
exit $failed
