#!/usr/bin/env bash
# Instructions executed by every allocator-suite program (bench/suite, as bench/suite.sh runs
# them) under each allocator, counted by valgrind: the whole process, every thread (one file per
# process holds them all) and every child (--trace-children=yes, one file per process, summed).
# Cachegrind without its cache model counts them about 2.7 times faster than callgrind, which
# builds the call graph; INSTR_TOOL=callgrind gives callgrind's files (inclusive counts for
# callgrind_annotate) for the same count. Wall and CPU times of one program under
# one allocator vary 2x between runs on a shared machine; instruction counts repeat, so they are
# what a per-program comparison can be judged on. They leave out cache misses, contention between
# cores and time in the kernel: read them next to suite.sh's times (suite_instructions_report.py
# says how).
#   bench/suite_instructions.sh [scale, default 1] [results_dir]
# SUITE_ONLY="cfrac larson" runs a subset (as suite.sh); INSTR_ALLOCS="mimalloc nicmalloc" a
# subset of preload.sh's allocators. Valgrind runs the threads of a program one at a time, so a
# program that waits on another thread (spins, hand-offs) executes a count that depends on
# valgrind's scheduling: programs that create threads run INSTR_REPS_MT times (default 2) and
# the report gives their spread, the others INSTR_REPS times (default 1).
# NICMALLOC_BUILD_DIR as for the other scripts. Writes results_dir/instructions.csv (one row per
# run), instructions.log (valgrind's and the programs' output), instructions.md (the report) and
# keeps valgrind's files in results_dir/<tool> (cg_annotate or callgrind_annotate reads them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
scale=${1:-1}
out=${2:-$root/results/suite-instructions}
[[ $scale =~ ^[0-9]+$ ]] || { echo "usage: $0 [scale] [results_dir]" >&2; exit 2; }
reps=${INSTR_REPS:-1}
reps_mt=${INSTR_REPS_MT:-2}
tool=${INSTR_TOOL:-cachegrind}
case $tool in
cachegrind) tool_args=(--tool=cachegrind --cache-sim=no) ;;
callgrind) tool_args=(--tool=callgrind) ;;
*) echo "suite_instructions: INSTR_TOOL is cachegrind or callgrind, not '$tool'" >&2; exit 2 ;;
esac
command -v valgrind >/dev/null ||
  { echo "suite_instructions: valgrind missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
command -v nm >/dev/null || { echo "suite_instructions: nm missing (binutils)" >&2; exit 1; }
. "$root/bench/preload.sh"
preload_allocs "NICMALLOC_DP_MIN_SIZE=4096"
allocs=()
for a in "${PRELOAD_ALLOCS[@]}"; do
  if [ -n "${INSTR_ALLOCS:-}" ] && [[ " $INSTR_ALLOCS " != *" ${a%%|*} "* ]]; then continue; fi
  allocs+=("$a")
done
[ ${#allocs[@]} -gt 0 ] ||
  { echo "suite_instructions: no allocator in '$INSTR_ALLOCS'" >&2; exit 2; }

. "$root/bench/suite_programs.sh"
suite_programs "$build"
programs=(${SUITE_PROGRAMS[@]+"${SUITE_PROGRAMS[@]}"})
[ ${#programs[@]} -gt 0 ] ||
  { echo "suite_instructions: no suite_* programs in $build/bench/suite" >&2; exit 1; }
mkdir -p "$out/$tool"
csv=$out/instructions.csv log=$out/instructions.log
echo "rep,program,allocator,threads,instructions,status" >"$csv"
: >"$log"
echo "suite_instructions: ${#programs[@]} programs (${programs[*]}), scale $scale," \
  "${#allocs[@]} allocators (log in $log)" >&2

failed=0 skipped=()
for p in "${programs[@]}"; do
  exe=$build/bench/suite/suite_$p
  # A program that links pthread_create starts threads (all suite programs that do, use it).
  threads=single n=$reps
  if nm -D --undefined-only "$exe" | grep -qw pthread_create; then threads=multi n=$reps_mt; fi
  for rep in $(seq "$n"); do
    for a in "${allocs[@]}"; do
      name=${a%%|*}
      files=$out/$tool/$p.$name.$rep
      rm -f "$files".*
      # The preload is set outside valgrind, so the launcher passes it to the program and no
      # helper process (env) is counted.
      if ! preload_run "$a" "$log" valgrind "${tool_args[@]}" --trace-children=yes \
        "--$tool-out-file=$files.%p" "$exe" "$scale"; then
        [[ " ${skipped[*]:-} " = *" $name "* ]] || skipped+=("$name")
        continue
      fi
      echo "$p/$name rep $rep: $RUN_OUT" >>"$log"
      # Every process's file has its total on a "summary:" line (all threads together), with
      # both tools. (printf: awk prints a sum over 2^31 as 2.7e+09 otherwise.)
      ir=$(cat "$files".* 2>/dev/null |
        awk '/^summary:/ { n++; s += $2 } END { if (n) printf "%.0f\n", s }')
      status=$RUN_STATUS
      if [ -z "$ir" ] || [ "$ir" -le 0 ]; then
        status=FAILED ir=0
        echo "$p/$name rep $rep: no count in $files.*" >>"$log"
      fi
      echo "$rep,$p,$name,$threads,$ir,$status" >>"$csv"
      [ "$status" = ok ] ||
        { failed=1; echo "suite_instructions: $p under $name FAILED (see $log)" >&2; }
    done
  done
  echo "suite_instructions: $p done" >&2
done
/usr/bin/python3 "$root/bench/suite_instructions_report.py" "$csv" --scale "$scale" \
  --skipped "${skipped[*]:-}" >"$out/instructions.md"
cat "$out/instructions.md"
exit "$failed"
