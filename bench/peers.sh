#!/usr/bin/env bash
# Allocator peers under LD_PRELOAD: every workload in bench/workloads under glibc, Debian's
# mimalloc, jemalloc, tcmalloc and nicmalloc (control heap, and with NICMALLOC_DP_MIN_SIZE=4096 so
# blocks of 4 KiB and more take the dataplane path), measured from outside with GNU time (wall
# seconds, peak RSS). Allocators are interleaved within each repetition, so machine noise hits
# them alike; the report takes medians and ratios to mimalloc.
#   bench/peers.sh [quick|full] [results_dir]
# quick: workload scale 1 (~0.1-0.5 s each), 3 repetitions; full: scale 5, 5 repetitions.
# PEERS_SCALE and PEERS_REPS override. NICMALLOC_BUILD_DIR as for the other scripts.
# Writes results_dir/peers.csv (one row per run) and results_dir/peers.md (the table).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
mode=${1:-quick}
out=${2:-$root/results/$mode}
case $mode in
quick) scale=1 reps=3 ;;
full) scale=5 reps=5 ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
scale=${PEERS_SCALE:-$scale}
reps=${PEERS_REPS:-$reps}
libdir=/usr/lib/x86_64-linux-gnu
libnic=$build/alloc/libnicmalloc.so
workloads=(churn prodcons threads_mixed large realloc_grow)
# name|LD_PRELOAD|extra environment|file name malloc must come from
allocs=("glibc||-|libc.so"
  "mimalloc|$libdir/libmimalloc.so.2|-|libmimalloc"
  "jemalloc|$libdir/libjemalloc.so.2|-|libjemalloc"
  "tcmalloc|$libdir/libtcmalloc_minimal.so.4|-|libtcmalloc"
  "nicmalloc|$libnic|-|libnicmalloc"
  "nicmalloc-dp4k|$libnic|NICMALLOC_DP_MIN_SIZE=4096 NICMALLOC_CHUNK_SIZE=256M|libnicmalloc")
for w in "${workloads[@]}"; do
  [ -x "$build/bench/workloads/wl_$w" ] || { echo "peers: wl_$w not built in $build" >&2; exit 1; }
done
[ -x /usr/bin/time ] || { echo "peers: GNU time missing (apt-get install time)" >&2; exit 1; }
mkdir -p "$out"
csv=$out/peers.csv log=$out/peers.log
echo "rep,workload,allocator,seconds,max_rss_kib,status" >"$csv"
: >"$log"
echo "peers: scale $scale, $reps repetitions, $(( ${#workloads[@]} * ${#allocs[@]} )) runs each" \
  "(log in $log)" >&2

failed=0
for rep in $(seq "$reps"); do
  for w in "${workloads[@]}"; do
    for a in "${allocs[@]}"; do
      IFS='|' read -r name lib extra expect <<<"$a"
      if [ -n "$lib" ] && [ ! -e "$lib" ]; then
        [ "$rep" = 1 ] && echo "peers: $name skipped: $lib not installed" >&2
        continue
      fi
      [ "$extra" = - ] && extra=
      status=ok rc=0
      # Wall time from bash's microsecond clock (GNU time's %e has 10 ms steps); peak RSS (%M,
      # KiB) from GNU time, into its own file so that stdout stays the workload's result line.
      t0=$EPOCHREALTIME
      env ${lib:+LD_PRELOAD=$lib} $extra /usr/bin/time -o "$out/.time" -f '%M' \
        "$build/bench/workloads/wl_$w" "$scale" >"$out/.stdout" 2>>"$log" || rc=$?
      secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.4f", b - a}')
      rss=$(tail -1 "$out/.time")
      echo "$w/$name rep $rep: $(cat "$out/.stdout")" >>"$log"
      if [ "$rc" != 0 ]; then
        status=FAILED
      elif ! grep -q "ok: .*malloc from .*$expect" "$out/.stdout"; then
        status=FAILED # the preload did not take effect, or the program printed no result
        echo "peers: $w/$name: malloc not from *$expect*" >>"$log"
      fi
      echo "$rep,$w,$name,$secs,$rss,$status" >>"$csv"
      [ "$status" = ok ] || { failed=1; echo "peers: $w under $name FAILED (see $log)" >&2; }
    done
  done
  echo "peers: repetition $rep/$reps done" >&2
done
rm -f "$out/.time" "$out/.stdout"
/usr/bin/python3 "$root/bench/report.py" --peers "$csv" | tee "$out/peers.md"
exit "$failed"
