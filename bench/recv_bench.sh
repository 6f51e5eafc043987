#!/usr/bin/env bash
# Receive throughput and per-message cost, copying into malloc'd memory against reading in place
# (bench/recv_bench.c), on io_uring loopback UDP and TCP and on DPDK net_ring: one process per
# transport (the backend is process-wide), the modes interleaved inside it.
#   bench/recv_bench.sh [quick|full] [results_dir]
# quick: 64 B, 4 KiB and 64 KiB, 2 repetitions, small runs (a smoke run); full: 64 B to 64 KiB,
# 5 repetitions. RECV_REPS, RECV_SIZES, RECV_BYTES, RECV_MAX_MESSAGES override. Writes
# results_dir/recv.md (the three tables) and results_dir/recv_<transport>.csv (every run).
# Without DPDK the ring table says it was skipped; a program that fails fails the script.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
mode=${1:-quick}
out=${2:-$root/results/$mode}
case $mode in
quick) reps=2 sizes=64,4K,64K bytes=2M max=4000 ;;
full) reps=5 sizes=64,256,1K,4K,16K,64K bytes=32M max=50000 ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
bin=$build/bench/recv_bench
[ -x "$bin" ] || { echo "recv_bench: $bin not built" >&2; exit 1; }
mkdir -p "$out"
flags=(--reps "${RECV_REPS:-$reps}" --sizes "${RECV_SIZES:-$sizes}" --bytes "${RECV_BYTES:-$bytes}"
  --max-messages "${RECV_MAX_MESSAGES:-$max}")
md=$out/recv.md status=0
{
  echo "bench/recv_bench.sh $mode: ${flags[*]}"
  echo
} >"$md"
for t in udp tcp ring; do
  if [ "$t" = ring ]; then
    env=(NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_VDEV=net_ring0)
  else
    env=(NICMALLOC_BACKEND=uring)
  fi
  echo "recv_bench: $t (${env[*]})" >&2
  rc=0
  env "${env[@]}" NICMALLOC_CHUNK_SIZE=64M "$bin" "$t" "${flags[@]}" --csv "$out/recv_$t.csv" \
    >"$out/recv_$t.txt" 2>"$out/recv_$t.log" || rc=$?
  cat "$out/recv_$t.txt" >>"$md"
  if [ "$rc" = 77 ]; then
    echo "recv_bench $t: skipped: $(grep -m1 SKIPPED "$out/recv_$t.log")" >>"$md"
  elif [ "$rc" != 0 ]; then
    echo "recv_bench $t: FAILED (status $rc): $(grep -m1 -i fail "$out/recv_$t.log")" >>"$md"
    status=1
  fi
  echo >>"$md"
done
cat "$md"
exit $status
