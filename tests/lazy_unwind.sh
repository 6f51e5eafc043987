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
exit $failed
