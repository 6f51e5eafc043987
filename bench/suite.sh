#!/usr/bin/env bash
# The allocator suite (#20): every program bench/suite/<name>.c built as suite_<name> (cfrac,
# espresso, barnes, larson, mstress, xmalloc-test, ... written for this repository after the
# classic benchmarks' descriptions; nothing is fetched) under glibc, Debian's mimalloc, jemalloc,
# tcmalloc, nicmalloc (control heap) and nicmalloc with NICMALLOC_DP_MIN_SIZE=4096, measured from
# outside with GNU time: wall seconds, peak RSS and CPU seconds. Programs are found by glob in the build, so a
# new one is picked up without editing this script. Within each repetition every program runs
# under every allocator in turn (the allocator order rotates between repetitions), so machine
# noise hits them alike; the report takes medians, spread, ratios to mimalloc and geometric
# means, and states the issue's targets.
#   bench/suite.sh [quick|full] [results_dir]
# quick: scale 1, 1 repetition (a smoke run: 96 runs of the 16 programs, under 60 s of CPU);
# full: scale 2, 5 repetitions (about 8 min of CPU). SUITE_SCALE, SUITE_REPS override; SUITE_ONLY="cfrac barnes" runs a subset.
# NICMALLOC_BUILD_DIR as for the other scripts. Writes results_dir/suite.csv (one row per run),
# suite.log (every result line) and suite.md (the report).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
mode=${1:-quick}
out=${2:-$root/results/suite-$mode}
case $mode in
quick) scale=1 reps=1 ;;
full) scale=2 reps=5 ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
scale=${SUITE_SCALE:-$scale}
reps=${SUITE_REPS:-$reps}
. "$root/bench/preload.sh"
. "$root/bench/rotate.sh"
# The stats line at exit gives the peaks of dataplane live and pinned bytes (suite.csv, suite.md).
preload_allocs "NICMALLOC_DP_MIN_SIZE=4096 NICMALLOC_STATS=json"
allocs=("${PRELOAD_ALLOCS[@]}")

. "$root/bench/suite_programs.sh"
suite_programs "$build"
programs=(${SUITE_PROGRAMS[@]+"${SUITE_PROGRAMS[@]}"})
[ ${#programs[@]} -gt 0 ] || { echo "suite: no suite_* programs in $build/bench/suite" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "suite: GNU time missing (apt-get install time)" >&2; exit 1; }
mkdir -p "$out"
csv=$out/suite.csv log=$out/suite.log
echo "rep,program,allocator,seconds,cpu_seconds,max_rss_kib,status,live_peak_kib,pinned_peak_kib" >"$csv"
: >"$log"
load_before=$(uptime)
echo "suite: ${#programs[@]} programs (${programs[*]}), scale $scale, $reps repetitions," \
  "${#allocs[@]} allocators (log in $log)" >&2

failed=0 skipped=()
for rep in $(seq "$reps"); do
  mapfile -t order < <(rotated "$rep" "${allocs[@]}")
  for p in "${programs[@]}"; do
    for a in "${order[@]}"; do
      name=${a%%|*}
      if ! preload_run "$a" "$log" "$build/bench/suite/suite_$p" "$scale"; then
        [ "$rep" = 1 ] && [ "$p" = "${programs[0]}" ] && skipped+=("$name")
        continue
      fi
      echo "$p/$name rep $rep: $RUN_OUT" >>"$log"
      echo "$rep,$p,$name,$RUN_SECS,$RUN_CPU,$RUN_RSS,$RUN_STATUS,$RUN_LIVE_PEAK,$RUN_PINNED_PEAK" >>"$csv"
      [ "$RUN_STATUS" = ok ] || { failed=1; echo "suite: $p under $name FAILED (see $log)" >&2; }
    done
  done
  echo "suite: repetition $rep/$reps done" >&2
done
load_after=$(uptime)
/usr/bin/python3 "$root/bench/suite_report.py" "$csv" --mode "$mode" --scale "$scale" \
  --reps "$reps" --load-before "$load_before" --load-after "$load_after" \
  --skipped "${skipped[*]:-}" >"$out/suite.md"
cat "$out/suite.md"
exit "$failed"
