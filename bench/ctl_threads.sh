#!/usr/bin/env bash
# The control heap with many threads (bench/workloads/ctl_threads.c: thread churn, Larson's
# pattern, cross-thread frees, passive and active false sharing, thread-local churn) under
# glibc, Debian's mimalloc, jemalloc, tcmalloc and nicmalloc (LD_PRELOAD, no NICMALLOC_*
# setting). Allocators are interleaved within each repetition, their order rotating from one
# repetition to the next; the table gives medians with
# min-max, the ratio to mimalloc and to the best of the four others, and the load average before
# and after (the machine is shared: read the spread).
#   bench/ctl_threads.sh [quick|full] [results_dir]
# quick: 3 repetitions of small runs; full: 7 of larger ones. CTL_REPS overrides; CTL_MODES
# replaces the list of runs ("mode threads numbers;..."). With CTL_CALLGRIND=1 it counts
# instructions per run instead (callgrind serialises the threads: instructions, not contention).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
mode=${1:-quick}
out=${2:-$root/results/$mode}
prog=$build/bench/workloads/wl_ctl_threads
[ -x "$prog" ] || { echo "ctl_threads: $prog not built" >&2; exit 1; }
case $mode in
quick) reps=3 modes="larson 2 4 50000;local 2 300000;xfree 2 5000;scratch 2 1000 200000;thrash 2 1000 200000;spawn 4 200 100" ;;
full) reps=7 modes="larson 2 10 200000;larson 8 4 100000;local 2 1000000;local 8 250000;xfree 2 20000;xfree 8 5000;scratch 2 1000 1000000;thrash 2 1000 1000000;spawn 4 500 100" ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
reps=${CTL_REPS:-$reps}
modes=${CTL_MODES:-$modes}
. "$root/bench/rotate.sh"
libdir=/usr/lib/x86_64-linux-gnu
allocs=("glibc|" "mimalloc|$libdir/libmimalloc.so.2" "jemalloc|$libdir/libjemalloc.so.2"
  "tcmalloc|$libdir/libtcmalloc_minimal.so.4" "nicmalloc|$build/alloc/libnicmalloc.so")
mkdir -p "$out"
csv=$out/ctl_threads.csv
echo "rep,run,allocator,value" >"$csv"
IFS=';' read -r -a runs <<<"$modes"
# An allocator that is not installed runs nowhere; the table says so rather than leave it out
# unseen (the best of the others is then the best of those that ran).
missing=()
for a in "${allocs[@]}"; do
  IFS='|' read -r name lib <<<"$a"
  [ -z "$lib" ] || [ -e "$lib" ] || missing+=("$name ($lib)")
done
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for rep in $(seq "$reps"); do
  mapfile -t order < <(rotated "$rep" "${allocs[@]}")
  for run in "${runs[@]}"; do
    for a in "${order[@]}"; do
      IFS='|' read -r name lib <<<"$a"
      [ -z "$lib" ] || [ -e "$lib" ] || continue
      if [ "${CTL_CALLGRIND:-0}" = 1 ]; then
        env ${lib:+LD_PRELOAD=$lib} valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
          "$prog" $run >/dev/null 2>"$out/cg.log" || { echo "ctl_threads: $name $run failed" >&2; exit 1; }
        value=$("$(dirname "$0")/callgrind_total.sh" "$out/cg.out")
      else
        line=$(env ${lib:+LD_PRELOAD=$lib} "$prog" $run) || { echo "ctl_threads: $name $run failed" >&2; exit 1; }
        value=$(awk '{ print $3 }' <<<"$line")
      fi
      echo "$rep,$run,$name,$value" >>"$csv"
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$csv" "$load_before" "$load_after" "${CTL_CALLGRIND:-0}" "${missing[*]:-}" <<'EOF' | tee "$out/ctl_threads.md"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
runs, names, values = [], [], {}
for r in rows:
    runs += [r["run"]] if r["run"] not in runs else []
    names += [r["allocator"]] if r["allocator"] not in names else []
    values.setdefault((r["run"], r["allocator"]), []).append(float(r["value"]))
unit = "instructions" if sys.argv[4] == "1" else "seconds, median [min-max]"
print(f"load average before {sys.argv[2]}, after {sys.argv[3]}; {unit}\n")
if sys.argv[5]:
    print(f"not installed, not run (nor among the others compared): {sys.argv[5]}\n")
print("| run | " + " | ".join(names) + " | nic/mimalloc | nic/best other |")
print("|---" * (len(names) + 3) + "|")
for run in runs:
    med = {n: statistics.median(values[(run, n)]) for n in names if (run, n) in values}
    cells = [f"{med[n]:.4g} [{min(values[(run, n)]):.4g}-{max(values[(run, n)]):.4g}]"
             if n in med else "-" for n in names]
    others = [v for n, v in med.items() if n != "nicmalloc"]
    def to(v):  # "-" where a side has no run (an allocator missing or failed)
        return f"{med['nicmalloc'] / v:.2f}" if "nicmalloc" in med and v else "-"
    print(f"| {run} | " + " | ".join(cells) +
          f" | {to(med.get('mimalloc'))} | {to(min(others) if others else None)} |")
EOF
