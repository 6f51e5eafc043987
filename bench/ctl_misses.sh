#!/usr/bin/env bash
# Where the control heap's cache misses come from (#20): callgrind's cache model (--cache-sim=yes,
# one D1 and one last-level cache; valgrind runs one thread at a time, so sharing between cores is
# not modeled) over bench/workloads/wl_ctl_threads under Debian's mimalloc and nicmalloc
# (LD_PRELOAD), interleaved in an order that rotates from one repetition to the next, REPS times
# each. Prints, per allocator, the instructions and the
# last-level read and write misses of every run (median [min-max]), then, from nicmalloc's first
# run, the misses charged to nicmalloc's own lines (libnicmalloc) and the whole-run totals by
# library, read and write apart. Read and write misses are reported together on purpose: a load
# of a line mimalloc is about to store into turns mimalloc's write miss into nicmalloc's read miss
# without fetching any line more.
#   bench/ctl_misses.sh [results_dir] [reps, default 3]
# CTL_MISS_RUN is the workload's arguments (default "larson 2 4 50000"); CTL_MISS_CACHES the
# cache geometry (default D1 48 KiB 12-way, LL 4 MiB 16-way: valgrind cannot read this
# machine's). NICMALLOC_BUILD_DIR as for the other scripts.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
out=${1:-$root/results/ctl_misses}
reps=${2:-3}
prog=$build/bench/workloads/wl_ctl_threads
[ -x "$prog" ] || { echo "ctl_misses: $prog not built" >&2; exit 1; }
run=${CTL_MISS_RUN:-larson 2 4 50000}
caches=${CTL_MISS_CACHES:---I1=32768,8,64 --D1=49152,12,64 --LL=4194304,16,64}
allocs=("mimalloc|/usr/lib/x86_64-linux-gnu/libmimalloc.so.2" "nicmalloc|$build/alloc/libnicmalloc.so")
. "$root/bench/rotate.sh"
mkdir -p "$out"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
files=()
for rep in $(seq "$reps"); do
  mapfile -t order < <(rotated "$rep" "${allocs[@]}")
  for a in "${order[@]}"; do
    IFS='|' read -r name lib <<<"$a"
    [ -e "$lib" ] || { echo "ctl_misses: $lib missing" >&2; exit 1; }
    f=$out/cg.$name.$rep.out
    # shellcheck disable=SC2086 # $caches and $run are word lists
    LD_PRELOAD=$lib valgrind --tool=callgrind --cache-sim=yes --dump-instr=yes $caches \
      --callgrind-out-file="$f" "$prog" $run >/dev/null 2>"$out/cg.$name.$rep.log" ||
      { echo "ctl_misses: $name failed, see $out/cg.$name.$rep.log" >&2; exit 1; }
    files+=("$name=$f")
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 "$root/bench/ctl_misses_report.py" --run "$run" --load "$load_before" "$load_after" \
  "${files[@]}" | tee "$out/ctl_misses.md"
