#!/usr/bin/env bash
# Instructions per malloc/free pair (64 bytes unless told) for glibc, mimalloc and nicmalloc's control and
# dataplane paths, counted by callgrind over the driver's loop_<allocator> function only (the count
# includes the loop itself and the one-byte touch, a few instructions per pair).
#   bench/callgrind_hotpaths.sh [results_dir] [pairs, default 100000] [bytes, default 64]
# NICMALLOC_BUILD_DIR is the build directory, relative to the repository like run.sh's (default
# build). The callgrind files and logs go to results_dir.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
out=${1:-results}
pairs=${2:-100000}
bytes=${3:-64}
driver=$build/bench/hotpath_driver
[ -x "$driver" ] || { echo "callgrind_hotpaths: $driver not built" >&2; exit 1; }
mkdir -p "$out"
export NICMALLOC_CHUNK_SIZE=${NICMALLOC_CHUNK_SIZE:-64M}

printf '%-14s %12s %10s\n' allocator instructions per_pair
for a in glibc mimalloc nic_control nic_dataplane; do
  file=$out/callgrind.$a.out
  if ! valgrind --tool=callgrind --toggle-collect="loop_$a" --callgrind-out-file="$file" \
    "$driver" "$a" "$pairs" "$bytes" >"$out/callgrind.$a.log" 2>&1; then
    echo "callgrind_hotpaths: $a failed, see $out/callgrind.$a.log" >&2
    exit 1
  fi
  total=$("$(dirname "$0")/callgrind_total.sh" "$file")
  awk -v a="$a" -v n="$pairs" -v t="$total" 'BEGIN { printf "%-14s %12d %10.1f\n", a, t, t / n }'
done
