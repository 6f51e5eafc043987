#!/usr/bin/env bash
# Runs bench/malloc_compare (glibc, mimalloc, nicmalloc control and dataplane in one process) and
# prints median ns per malloc/free pair with the repetitions' min-max, each allocator's ratio to
# mimalloc, and the geometric mean ratios of nicmalloc's two paths to mimalloc, over the rows
# every allocator of the run has a result for (a row one of them lacks is named, not averaged
# over for the others alone).
#   bench/compare_malloc.sh [results_dir] [extra benchmark flags, e.g. --benchmark_filter=BM_pair]
# NICMALLOC_BUILD_DIR is the build directory, relative to the repository like run.sh's (default
# build). Writes results_dir/malloc_compare.json and results_dir/malloc_compare.txt (the table).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
out=${1:-results}
shift || true
bin=$build/bench/malloc_compare
[ -x "$bin" ] || { echo "compare_malloc: $bin not built" >&2; exit 1; }
mkdir -p "$out"
json=$out/malloc_compare.json
rm -f "$json"

export NICMALLOC_CHUNK_SIZE=256M
rc=0
echo "compare_malloc: running $bin (console output in $out/malloc_compare.log)" >&2
# Aggregates alone on the console; the JSON keeps every repetition for the min-max.
"$bin" --benchmark_repetitions=5 --benchmark_display_aggregates_only=true \
  --benchmark_enable_random_interleaving=true --benchmark_out_format=json \
  --benchmark_out="$json" "$@" >"$out/malloc_compare.log" 2>&1 || rc=$?
# nicmalloc's own messages, each kind counted once (addresses folded).
grep -a '^nicmalloc:' "$out/malloc_compare.log" | sed 's/0x[0-9a-f]*/0x?/g' | sort | uniq -c |
  sort -rn | head -5 >&2 || true
[ -s "$json" ] || { echo "compare_malloc: no results (status $rc)" >&2; exit 1; }

/usr/bin/python3 "$root/bench/report.py" --compare "$json" | tee "$out/malloc_compare.txt"
[ "$rc" = 0 ] || echo "compare_malloc: benchmark status $rc, see $out/malloc_compare.log" >&2
exit "$rc"
