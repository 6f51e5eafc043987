#!/usr/bin/env bash
# The floor under issue #2's control-path target: what any interposer over Debian's shared
# mimalloc costs before it does anything of its own (forward), and with the least check a free
# that refuses double frees needs (keyed). Builds two small files with cc (nothing of nicmalloc),
# then prints callgrind instructions per 64-byte pair and interleaved wall-time medians. The
# "malloc" row is the process's malloc/free: mimalloc's own, or with LIBNICMALLOC set, nicmalloc's
# control path (preloaded), measured in the same run as the others.
#   [LIBNICMALLOC=build/alloc/libnicmalloc.so] bench/floor/run.sh [results_dir] [pairs, default
#   20000000] [repetitions, default 9]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-results/floor}
pairs=${2:-20000000}
reps=${3:-9}
mkdir -p "$out"
cc -O2 -fPIC -shared -fno-plt -o "$out/libfloor_wrap.so" "$here/floor_wrap.c" -lmimalloc
cc -O2 -o "$out/floor_driver" "$here/floor_driver.c" -L"$out" -lfloor_wrap -lmimalloc \
  -Wl,-rpath,"$(cd "$out" && pwd)"
preload=${LIBNICMALLOC:+$(realpath "$LIBNICMALLOC")}
echo "malloc/free: ${preload:-the one of libmimalloc (set LIBNICMALLOC to preload nicmalloc)}"
echo "instructions per 64-byte malloc/free pair (callgrind, loop included):"
for loop in mimalloc forward keyed malloc; do
  env ${preload:+LD_PRELOAD=$preload} valgrind --tool=callgrind --toggle-collect="loop_$loop" \
    --callgrind-out-file="$out/cg.$loop" "$out/floor_driver" 100000 1 >/dev/null 2>"$out/cg.$loop.log"
  total=$("$here/../callgrind_total.sh" "$out/cg.$loop")
  awk -v l="$loop" -v t="$total" 'BEGIN { printf "  %-9s %6.1f\n", l, t / 100000 }'
done
echo "wall time, median of $reps interleaved runs of $pairs pairs:"
env ${preload:+LD_PRELOAD=$preload} "$out/floor_driver" "$pairs" "$reps" | sed 's/^/  /'
