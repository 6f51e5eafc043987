#!/usr/bin/env bash
# The zero-copy serialization experiments in one command (README.md): Table 1 (per-step cost),
# Figure 3 (copy-out vs zero-copy per transport), Figure 2 (echo server), SG entries vs latency,
# then report.md and PNG plots.
#   bench/serialize/run.sh [quick|full] [results_dir, default results/serialize-<mode>]
# quick: under 30 s, the ctest smoke run; full: the figures, about 8 minutes on 2 cores.
# NICMALLOC_BUILD_DIR: the build directory (default build), built with NICMALLOC_BUILD_BENCH=ON.
# Nothing here judges a timing: a step fails only when a program fails or a row is incomplete.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/rotate.sh"
mode=${1:-quick}
out=${2:-$root/results/serialize-$mode}
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
bin=$build/bench/serialize
sizes=64,128,256,512,1024,2048,4096,8192
counts=1,2,4,8,16,32
clients=1,2,4,8,16
case $mode in
quick)
  steps_flags=(--benchmark_repetitions=2 --benchmark_min_time=0.002)
  reps=1 tput_msgs=100 entry_msgs=100 echo_sizes=1024 echo_secs=0.1 echo_reps=2
  ;;
full)
  steps_flags=(--benchmark_repetitions=15 --benchmark_min_time=0.05)
  reps=5 tput_msgs=50000 entry_msgs=10000 echo_sizes=1024,4096 echo_secs=2 echo_reps=3
  ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
for f in ser_steps ser_net; do
  [ -x "$bin/$f" ] || {
    echo "serialize: $bin/$f missing; build with NICMALLOC_BUILD_BENCH=ON and the serializer" \
      "packages (bench/serialize/README.md)" >&2
    exit 1
  }
done
mkdir -p "$out"
rm -f "$out"/*.csv "$out"/*.json "$out"/*.log "$out"/*.md "$out"/*.png

# Every process: small chunks (as the tests use), and the transport's own settings.
export NICMALLOC_CHUNK_SIZE=64M
env_of() { # TRANSPORT [MODE] -> the environment of one run
  local t=$1 m=${2:-}
  case $t in
  sim) echo NICMALLOC_BACKEND=sim NICMALLOC_SIM_DELAYS=fixed:0 ;;
  uring) echo NICMALLOC_BACKEND=uring ;;
  dpdk) echo NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_VDEV=net_ring0 ;;
  esac
  # zero-copy: nothing is short enough to be copied; copy-out: everything is (the largest
  # payload is 8 KiB; the entry sweep's 1 KiB message in pieces).
  case $m in
  zero-copy) echo NICMALLOC_COPY_THRESHOLD=0 ;;
  copy-out) echo NICMALLOC_COPY_THRESHOLD=16K ;;
  esac
}

{
  echo "mode: $mode"
  "$root/bench/machine_info.sh" "$root"
  for p in libcapnp-dev libprotobuf-dev libflatbuffers-dev libbenchmark-dev libdpdk-dev liburing-dev; do
    echo "$p: $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo absent)"
  done
  echo "table 1: ser_steps ${steps_flags[*]} (NICMALLOC_BACKEND=sim; sg rows also on dpdk)"
  echo "figure 3: $reps rep(s) x $tput_msgs messages per size, window 32, sizes $sizes"
  echo "figure 2: echo sizes $echo_sizes, clients $clients, ${echo_secs} s per point (+10% warm-up)," \
    "$echo_reps rep(s), serializers interleaved in rotating order"
  echo "entries: $entry_msgs round trips per count, counts $counts"
  echo "settings: NICMALLOC_CHUNK_SIZE=64M; sim: NICMALLOC_SIM_DELAYS=fixed:0;" \
    "zero-copy: NICMALLOC_COPY_THRESHOLD=0; copy-out: NICMALLOC_COPY_THRESHOLD=16K"
} >"$out/machine.txt"

failed=0
n=0
steps=4
step() { # NAME FUNCTION: one experiment, its console output in NAME.log
  local name=$1 t0=$SECONDS status=ok
  n=$((n + 1))
  printf '[%d/%d] %-10s ... ' "$n" "$steps" "$name"
  "$2" >"$out/$name.log" 2>&1 || { status=FAILED; failed=1; }
  echo "$status ($((SECONDS - t0)) s)"
  echo "$name,$status,$((SECONDS - t0))" >>"$out/steps.csv"
}
echo "step,status,seconds" >"$out/steps.csv"

table1() {
  NICMALLOC_BACKEND=sim "$bin/ser_steps" "${steps_flags[@]}" \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out/steps_sim.json" --benchmark_out_format=json || return 1
  env $(env_of dpdk) "$bin/ser_steps" "${steps_flags[@]}" --benchmark_filter='/sg' \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out/steps_dpdk.json" --benchmark_out_format=json
}

# append_rep REP TMP CSV: TMP's rows appended to CSV with a first column "rep" (TMP's header
# line only when CSV is still empty).
append_rep() {
  awk -v r="$1" -F, 'NR == 1 { if (!h) print "rep," $0; next } { print r "," $0 }' \
    h="$([ -s "$3" ] && echo 1)" "$2" >>"$3"
}

# Reps interleave the modes and transports, in an order that rotates from one repetition to the
# next, so that a slow moment of a shared machine does not land on one of them only.
figure3() {
  local r t m tm rc=0
  for r in $(seq "$reps"); do
    for tm in $(rotated "$r" sim/zero-copy sim/copy-out uring/zero-copy uring/copy-out \
      dpdk/zero-copy dpdk/copy-out); do
      t=${tm%/*} m=${tm#*/}
      env $(env_of $t $m) "$bin/ser_net" throughput $t $m $sizes "$tput_msgs" >"$out/tput.tmp" ||
        rc=1
      append_rep "$r" "$out/tput.tmp" "$out/throughput.csv"
    done
  done
  rm -f "$out/tput.tmp"
  return $rc
}

# Each repetition runs every serializer once, in an order that rotates from one repetition to the
# next: the report takes medians and min-max over the repetitions.
figure2() {
  local r s rc=0
  for r in $(seq "$echo_reps"); do
    for s in $(rotated "$r" sg protobuf capnp flatbuffers); do
      NICMALLOC_BACKEND=uring "$bin/ser_net" echo $s $echo_sizes $clients "$echo_secs" \
        >"$out/echo.tmp" || rc=1
      append_rep "$r" "$out/echo.tmp" "$out/echo.csv"
    done
  done
  rm -f "$out/echo.tmp"
  return $rc
}

entries() {
  local t m rc=0 first=1
  for t in sim dpdk; do
    for m in zero-copy copy-out; do
      env $(env_of $t $m) "$bin/ser_net" entries $t $m $counts "$entry_msgs" >"$out/entries.tmp" ||
        rc=1
      if [ $first = 1 ]; then cat "$out/entries.tmp"; else tail -n +2 "$out/entries.tmp"; fi \
        >>"$out/entries.csv"
      first=0
    done
  done
  rm -f "$out/entries.tmp"
  return $rc
}

cd "$root" || exit 1
echo "serialize: $mode mode, results in $out" >&2
step table1 table1
step figure3 figure3
step figure2 figure2
step entries entries

printf 'report     ... '
if /usr/bin/python3 "$root/bench/serialize/report.py" "$out" "$mode"; then
  echo "$out/report.md"
else
  echo "FAILED"
  failed=1
fi
exit "$failed"
