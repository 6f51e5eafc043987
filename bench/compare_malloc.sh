#!/usr/bin/env bash
# Runs bench/malloc_compare (glibc, mimalloc, nicmalloc control and dataplane in one process) and
# prints median ns per malloc/free pair, each allocator's ratio to mimalloc, and the geometric mean
# ratios of nicmalloc's two paths to mimalloc.
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
"$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true --benchmark_out_format=json \
  --benchmark_out="$json" "$@" >"$out/malloc_compare.log" 2>&1 || rc=$?
# nicmalloc's own messages, each kind counted once (addresses folded).
grep -a '^nicmalloc:' "$out/malloc_compare.log" | sed 's/0x[0-9a-f]*/0x?/g' | sort | uniq -c |
  sort -rn | head -5 >&2 || true
[ -s "$json" ] || { echo "compare_malloc: no results (status $rc)" >&2; exit 1; }

/usr/bin/python3 - "$json" <<'EOF' | tee "$out/malloc_compare.txt"
import json, math, sys

ALLOCS = ["glibc", "mimalloc", "nic_control", "nic_dataplane"]
UNIT = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
rows = {}  # (pattern, threads, size) -> {allocator: median ns per pair}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    parts = b["run_name"].split("/")
    threads = next(int(p[8:]) for p in parts if p.startswith("threads:"))
    ns = b["real_time"] * UNIT[b["time_unit"]] / b.get("batch", 1)
    rows.setdefault((parts[0][3:], threads, int(parts[2])), {})[parts[1]] = ns

def cell(v, fmt):
    return format(v, fmt) if v is not None else "-"

print("median ns per malloc/free pair (real time; with 2 threads: wall time / pairs of both)")
head = "%-6s %3s %6s | %8s %8s %8s %8s | %8s %8s %8s"
print(head % ("test", "thr", "size", "glibc", "mimalloc", "nic_ctl", "nic_dp",
              "glibc/mi", "ctl/mi", "dp/mi"))
ratios = {a: {} for a in ALLOCS}
for key in sorted(rows, key=lambda k: (k[0] != "pair", k[1], k[2])):
    r = rows[key]
    mi = r.get("mimalloc")
    rel = {a: r[a] / mi if mi and a in r else None for a in ALLOCS}
    for a in ALLOCS:
        if rel[a] is not None:
            ratios[a].setdefault((key[0], key[1]), []).append(rel[a])
    print(head % (key + tuple(cell(r.get(a), ".1f") for a in ALLOCS) +
                  tuple(cell(rel[a], ".3f") for a in ("glibc", "nic_control", "nic_dataplane"))))

def gmean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None

print("\ngeometric mean ratio to mimalloc (targets: control <= 1.05, dataplane <= 1.15)")
groups = sorted({g for a in ALLOCS for g in ratios[a]}, key=lambda g: (g[0] != "pair", g[1]))
print("%-16s %8s %8s %8s" % ("", "glibc", "control", "dataplane"))
for label, sel in [("%s threads:%d" % g, [g]) for g in groups] + [("all", groups)]:
    vals = [gmean([x for g in sel for x in ratios[a].get(g, [])])
            for a in ("glibc", "nic_control", "nic_dataplane")]
    print("%-16s %8s %8s %8s" % ((label,) + tuple(cell(v, ".3f") for v in vals)))
EOF
[ "$rc" = 0 ] || echo "compare_malloc: benchmark status $rc, see $out/malloc_compare.log" >&2
exit "$rc"
