#!/usr/bin/env bash
# Allocator peers under LD_PRELOAD: every workload in bench/workloads under glibc, Debian's
# mimalloc, jemalloc, tcmalloc and nicmalloc (control heap, and with NICMALLOC_DP_MIN_SIZE=4096 so
# blocks of 4 KiB and more take the dataplane path), measured from outside with GNU time (wall
# seconds, peak RSS). Allocators are interleaved within each repetition, their order rotating from
# one repetition to the next, so machine noise hits them alike; the report takes medians and
# ratios to mimalloc.
#   bench/peers.sh [quick|full] [results_dir]
# quick: workload scale 1 (~0.1-0.5 s each), 3 repetitions; full: scale 5, 5 repetitions.
# PEERS_SCALE and PEERS_REPS override. NICMALLOC_BUILD_DIR as for the other scripts.
# Writes results_dir/peers.csv (one row per run, and one per allocator not installed) and
# results_dir/peers.md (the table, which names the allocators not installed).
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
workloads=(churn prodcons threads_mixed large realloc_grow)
. "$root/bench/preload.sh"
. "$root/bench/rotate.sh"
preload_allocs "NICMALLOC_DP_MIN_SIZE=4096 NICMALLOC_CHUNK_SIZE=256M"
allocs=("${PRELOAD_ALLOCS[@]}")
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
  mapfile -t order < <(rotated "$rep" "${allocs[@]}")
  for w in "${workloads[@]}"; do
    for a in "${order[@]}"; do
      name=${a%%|*}
      # An allocator not installed gets one row saying so, which the report names.
      if preload_missing "$a"; then
        if [ "$rep" = 1 ] && [ "$w" = "${workloads[0]}" ]; then
          echo "peers: $name skipped: not installed" >&2
          echo "-,-,$name,,,not installed" >>"$csv"
        fi
        continue
      fi
      preload_run "$a" "$log" "$build/bench/workloads/wl_$w" "$scale" || continue
      secs=$RUN_SECS rss=$RUN_RSS status=$RUN_STATUS
      echo "$w/$name rep $rep: $RUN_OUT" >>"$log"
      echo "$rep,$w,$name,$secs,$rss,$status" >>"$csv"
      [ "$status" = ok ] || { failed=1; echo "peers: $w under $name FAILED (see $log)" >&2; }
    done
  done
  echo "peers: repetition $rep/$reps done" >&2
done
/usr/bin/python3 "$root/bench/report.py" --peers "$csv" | tee "$out/peers.md"
exit "$failed"
