#!/bin/sh
# libunwind (and liblzma, which it needs) is mapped only by a process that turns on a feature
# walking or naming stacks; any other process that preloads libnicmalloc.so maps neither, nor
# libm. The maps are those of a program run with the library preloaded.
#   lazy_unwind.sh LIBRARY
set -u
lib=$1
dir=$(mktemp -d "${TMPDIR:-/tmp}/nic_lazy_unwind.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
failed=0

maps() { env "$@" LD_PRELOAD="$lib" cat /proc/self/maps; }

# Prints the libraries among libunwind, liblzma and libm that the run mapped.
mapped() { maps "$@" | grep -o -E '/(libunwind|liblzma|libm)[.-][^/]*$' | sort -u | tr '\n' ' '; }

got=$(mapped)
if [ -n "$got" ]; then
  echo "FAIL: with no profile, sites or fence detect the process mapped: $got"
  failed=1
else
  echo "ok: nothing asked for stacks, none of libunwind, liblzma, libm mapped"
fi

for feature in "NICMALLOC_PROFILE=$dir/profile" "NICMALLOC_FENCE=detect NICMALLOC_FENCE_DETECT_SAMPLE=0"; do
  # shellcheck disable=SC2086 # the feature is one or two assignments
  got=$(mapped $feature)
  case "$got" in
  */libunwind.so*) echo "ok: $feature: $got" ;;
  *) echo "FAIL: $feature did not load libunwind (mapped: '$got')"; failed=1 ;;
  esac
done

# Where libunwind cannot be loaded the feature says so once and the program runs on. Shown in a
# private mount namespace with the library's file replaced by an empty one (root only).
unw=$(maps "NICMALLOC_PROFILE=$dir/profile" | grep -o -E '/[^ ]*/libunwind\.so[^ ]*$' | head -1)
if [ -n "$unw" ] && unshare -m --propagation private true 2>/dev/null; then
  out=$(unshare -m --propagation private sh -c '
    mount --bind /dev/null "$1" || exit 3
    seq 1 100000 | env NICMALLOC_PROFILE="$2/unloaded" LD_PRELOAD="$3" sort -n | tail -n 1
  ' sh "$unw" "$dir" "$lib" 2>"$dir/err")
  rc=$?
  warnings=$(grep -c 'cannot load libunwind.so.8' "$dir/err")
  if [ "$rc" = 0 ] && [ "$out" = 100000 ] && [ "$warnings" = 1 ] && [ -s "$dir/unloaded" ]; then
    echo "ok: without libunwind a profiled run says so once, sorts right and writes its profile"
  else
    echo "FAIL: without libunwind: exit $rc, output '$out', $warnings warning(s), stderr:"
    cat "$dir/err"
    failed=1
  fi
else
  echo "skipped: no private mount namespace here to hide libunwind in"
fi
exit $failed
