#!/usr/bin/env bash
# The pin step's two sides, one row per NICMALLOC_PIN_STEP (bench/README.md, "Pin step"):
#   (a) the first dataplane allocation of a fresh process: wall and CPU time, RSS and VmLck it
#       adds (first_alloc --child, the steps interleaved round by round, in an order that
#       rotates from round to round);
#   (b) peak pinned/live and returned after a random 90% shrink, per value-size pool
#       (frag/frag_churn --api nic, as run_frag.sh runs it), with NICMALLOC_DP_POPULATE=commit:
#       frag_churn registers nothing, and under the default (register) a step is locked only as
#       its pages are touched until its first registration, so the step would make no
#       difference; commit pins each step whole, as a program that hands its memory to the NIC
#       has it pinned;
#   (c) modeled NIC translation misses per million entries on the cx5 preset at 16K entries,
#       the step registrations the sends reached, and entries per send (a buffer across a
#       step's end is one entry per step) (mr_miss --scheme arena).
#   bench/step_sweep.sh [quick|full] [results_dir]
# quick: every step, 3 first-allocation rounds, 32 MiB live on two pools, 16 MiB / 20k sends
#        (a ctest checks the table is filled); full: 15 rounds, 256 MiB live on every pool,
#        256 MiB / 1M sends. STEP_SWEEP_STEPS overrides the steps, FRAG_SIZES the size table
#        (bench/value_sizes.sh: without it and without the project's shared folder beside the
#        repository, nothing runs and the exit status is 77, a skip).
# NICMALLOC_BUILD_DIR: build directory (default build), built with NICMALLOC_BUILD_BENCH=ON.
# Writes step_sweep.md and step_sweep.csv (and the raw runs) to results_dir. Builds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-quick}
out=${2:-$root/results/step-sweep-$mode}
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
read -r -a steps <<<"${STEP_SWEEP_STEPS:-2M 4M 8M 16M 32M 64M}"

case $mode in
quick) rounds=3 live=32M frag_rounds=1 pools=(wildcard regional) mr=(--live-mib 16 --sends 20000) ;;
full) rounds=15 live=256M frag_rounds=2 pools=(wildcard app replicated regional) mr=() ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
. "$root/bench/value_sizes.sh"
. "$root/bench/rotate.sh"
value_sizes "$root" step_sweep # sets sizes, or exits: 77 when the repository has no shared folder
first=$build/bench/first_alloc frag=$build/bench/frag/frag_churn mr_miss=$build/bench/mr_miss
for f in "$first" "$frag" "$mr_miss"; do
  [ -e "$f" ] || { echo "step_sweep: $f missing (build with -DNICMALLOC_BUILD_BENCH=ON)" >&2; exit 1; }
done
mkdir -p "$out/mr"
rm -f "$out"/first_alloc.csv "$out"/frag_summary.csv "$out"/frag-*.csv "$out"/mr/*.md \
  "$out"/frag.log "$out"/mr.log
# The defaults every row shares: 1 GiB chunks, the release delay run_frag.sh uses.
export NICMALLOC_CHUNK_SIZE=${NICMALLOC_CHUNK_SIZE:-1G} NICMALLOC_RELEASE_DELAY_MS=100
{
  echo "mode: $mode, steps ${steps[*]}, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "first allocation: $rounds rounds, each step a fresh process per round, 64-byte request"
  echo "frag: live $live, $frag_rounds rounds, random 90% shrink, pools ${pools[*]}, NICMALLOC_DP_POPULATE=commit"
  echo "mr_miss: arena scheme, ${mr[*]:-256 MiB live, 1M sends}, cx5 preset at 16384 entries"
  echo "chunk $NICMALLOC_CHUNK_SIZE, page kind ${NICMALLOC_PAGE_KIND:-auto}"
} >"$out/settings.txt"

echo "step,round,ctl_ms,dp_ms,ctl_rss_kib,dp_rss_kib,dp_vmlck_kib,dp_pinned_kib,dp_cpu_ms,pin_step_kib" >"$out/first_alloc.csv"
for r in $(seq "$rounds"); do
  for s in $(rotated "$r" "${steps[@]}"); do
    line=$(NICMALLOC_PIN_STEP=$s "$first" --child 64) || { echo "step_sweep: first_alloc failed at $s" >&2; exit 1; }
    echo "$s,$r,${line// /,}" >>"$out/first_alloc.csv"
  done
done
echo "step_sweep: first allocation done ($rounds rounds)"

for s in "${steps[@]}"; do
  for pool in "${pools[@]}"; do
    NICMALLOC_PIN_STEP=$s NICMALLOC_DP_POPULATE=commit "$frag" --api nic --label "step-$s" --shrink random --pool "$pool" \
      --sizes "$sizes" --live "$live" --rounds "$frag_rounds" --out "$out/frag-$pool-$s.csv" \
      --summary "$out/frag_summary.csv" >>"$out/frag.log" 2>&1 ||
      { echo "step_sweep: frag_churn failed at $s $pool (see $out/frag.log)" >&2; exit 1; }
  done
  mkdir -p "$out/mr/$s"
  NICMALLOC_PIN_STEP=$s "$mr_miss" "$sizes" "${mr[@]}" --scheme arena --out "$out/mr/$s" \
    >"$out/mr/$s.md" 2>>"$out/mr.log" ||
    { echo "step_sweep: mr_miss failed at $s (see $out/mr.log)" >&2; exit 1; }
  echo "step_sweep: $s done"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/settings.txt"
/usr/bin/python3 "$root/bench/step_sweep_report.py" "$out" "${steps[@]}"
