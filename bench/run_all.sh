#!/usr/bin/env bash
# Every benchmark suite in one run, then one report (report.md + PNGs). See bench/README.md.
#   bench/run_all.sh [quick|full] [results_dir, default results/<mode>]
# quick: a CI smoke run of about two minutes (small sizes, few repetitions); full: the figures.
# NICMALLOC_BUILD_DIR: the build directory (default build), built beforehand with the benchmarks.
# FRAG_SIZES: the value-size table (bench/value_sizes.sh: without it and without the project's
# shared folder beside the repository, nothing runs and the exit status is 77, a skip).
# Nothing here judges a timing: a step fails only when a program fails or gives no result.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-quick}
out=${2:-$root/results/$mode}
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
export NICMALLOC_BUILD_DIR=$build
case $mode in
quick)
  cmp_flags=(--benchmark_filter='BM_pair/.*/(64|4096)/.*threads:1' --benchmark_min_time=0.02
    --benchmark_repetitions=3)
  cg_pairs=20000 mr_flags=(--live-mib 32 --sends 100000) fa_runs=15
  # Frag's own quick mode is 256 MiB live; a smaller cache keeps this run near two minutes.
  export FRAG_LIVE=${FRAG_LIVE:-64M} FRAG_ROUNDS=${FRAG_ROUNDS:-1}
  ;;
full)
  cmp_flags=() cg_pairs=100000 mr_flags=(--live-mib 256 --sends 1000000) fa_runs=51
  # Frag's own full mode (1 GiB live) takes 20-25 min alone; half of it keeps this run near 30.
  export FRAG_LIVE=${FRAG_LIVE:-512M}
  ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
. "$root/bench/value_sizes.sh"
value_sizes "$root" run_all # sets sizes, or exits: 77 when the repository has no shared folder
for f in bench/malloc_compare bench/hotpath_driver bench/mr_miss bench/first_alloc bench/workloads/wl_churn \
  bench/workloads/hotpath_translate bench/recv_bench alloc/libnicmalloc.so; do
  [ -e "$build/$f" ] || { echo "run_all: $build/$f missing; build first (bench/README.md)" >&2; exit 1; }
done
mkdir -p "$out"
rm -rf "${out:?}"/{compare,callgrind,first_alloc,mr,frag,step_sweep} "$out"/*.csv "$out"/*.md "$out"/*.png "$out"/recv_*

{
  echo "mode: $mode"
  "$root/bench/machine_info.sh" "$root"
  echo "compare_malloc flags: ${cmp_flags[*]:-(defaults: 5 repetitions, all sizes)}"
  echo "callgrind: $cg_pairs pairs/calls per loop"
  echo "first-alloc: $fa_runs fresh processes, 64-byte request, default settings"
  echo "mr_miss: ${mr_flags[*]}, sizes $sizes"
  echo "frag: run_frag.sh $mode${FRAG_LIVE:+, FRAG_LIVE=$FRAG_LIVE}${FRAG_ROUNDS:+ FRAG_ROUNDS=$FRAG_ROUNDS}"
  echo "peers: bench/peers.sh $mode (quick: scale 1, 3 reps; full: scale 5, 5 reps)${PEERS_REPS:+ PEERS_REPS=$PEERS_REPS}${PEERS_SCALE:+ PEERS_SCALE=$PEERS_SCALE}"
  echo "servers: bench/servers.sh $mode (quick: 2 reps; full: 3 reps)${SERVERS_REPS:+ SERVERS_REPS=$SERVERS_REPS}"
  echo "pin-step: bench/step_sweep.sh $mode (quick: 3 rounds, 32 MiB live on 2 pools; full: 15 rounds, 256 MiB on 4)"
  echo "recv: bench/recv_bench.sh $mode (quick: 3 sizes, 2 reps; full: 6 sizes, 5 reps)${RECV_REPS:+ RECV_REPS=$RECV_REPS}"
} >"$out/machine.txt"

# The NIC-side hot paths under callgrind, as callgrind_hotpaths.sh does for malloc/free.
callgrind_nic() {
  local dir=$1 drv=$build/bench/workloads/hotpath_translate p
  printf '%-16s %12s %10s\n' path instructions per_call
  for p in translate_dp translate_ctl sga_add_arena sga_add_cached; do
    NICMALLOC_BACKEND=sim NICMALLOC_CHUNK_SIZE=64M valgrind --tool=callgrind \
      --toggle-collect="loop_$p" --callgrind-out-file="$dir/callgrind.$p.out" \
      "$drv" "$p" "$cg_pairs" >"$dir/callgrind.$p.log" 2>&1 || return 1
    total=$(bench/callgrind_total.sh "$dir/callgrind.$p.out") || return 1
    awk -v a="$p" -v n="$cg_pairs" -v t="$total" 'BEGIN { printf "%-16s %12d %10.1f\n", a, t, t / n }'
  done
}

steps=10 n=0 failed=0
echo "step,status,seconds,output" >"$out/steps.csv"
# step NAME OUTPUT COMMAND...: runs one suite with its console output in OUTPUT.log.
step() {
  local name=$1 rel=$2 t0=$SECONDS status=ok
  shift 2
  n=$((n + 1))
  printf '[%d/%d] %-11s ... ' "$n" "$steps" "$name"
  mkdir -p "$(dirname "$out/$rel")"
  "$@" >"$out/$rel" 2>"$out/$rel.log" || { status=FAILED; failed=1; }
  echo "$status ($((SECONDS - t0)) s) -> ${out#$root/}/$rel"
  echo "$name,$status,$((SECONDS - t0)),$rel" >>"$out/steps.csv"
}

cd "$root" || exit 1
echo "run_all: $mode mode, results in $out" >&2
step compare compare/malloc_compare.txt bench/compare_malloc.sh "$out/compare" "${cmp_flags[@]}"
step callgrind callgrind/callgrind.txt bench/callgrind_hotpaths.sh "$out/callgrind" "$cg_pairs"
step nic-paths callgrind/callgrind_nic.txt callgrind_nic "$out/callgrind"
step mr-miss mr/mr_miss.md "$build/bench/mr_miss" "$sizes" "${mr_flags[@]}" --out "$out/mr"
step frag frag/run_frag.txt bench/frag/run_frag.sh "$mode" "$out/frag"
step peers peers.txt bench/peers.sh "$mode" "$out"
step servers servers.txt bench/servers.sh "$mode" "$out"
step recv recv.txt bench/recv_bench.sh "$mode" "$out"
step first-alloc first_alloc/first_alloc.txt "$build/bench/first_alloc" "$fa_runs" 64
step pin-step step_sweep/step_sweep.txt env FRAG_SIZES="$sizes" bench/step_sweep.sh "$mode" \
  "$out/step_sweep"

printf 'report     ... '
if /usr/bin/python3 bench/report.py "$out" "$mode"; then
  echo "$out/report.md"
else
  echo "FAILED"
  failed=1
fi
exit "$failed"
