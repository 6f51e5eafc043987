#!/usr/bin/env bash
# Fragmentation benchmark: every pool x allocator through frag_churn, then the report
# (summary.md, summary.csv, one PNG per pool). See README.md.
#   bench/frag/run_frag.sh [quick|full] [results_dir]
# quick: 256 MiB live, 2 rounds, nicmalloc chunks of 1 GiB (the default) and 32 MiB (CI smoke run,
#        a few minutes).
# full:  1 GiB live, 3 rounds, nicmalloc chunks of 1 GiB and 64 MiB, plus an oldest-first shrink.
# The first chunk size is the one held to the targets and shrunk oldest-first.
# NICMALLOC_BUILD_DIR: build directory, relative to the repository (default build); it must have
# been built with NICMALLOC_BUILD_BENCH=ON. FRAG_SIZES: the value-size table (bench/value_sizes.sh;
# without it and without the shared folder beside the repository: exit 77). FRAG_LIVE and
# FRAG_ROUNDS override the mode's live target and rounds; FRAG_FIFO=1 adds the oldest-first
# shrink in quick mode too. FRAG_NIC_VARIANTS: more dataplane runs at the first chunk size,
# each LABEL:VAR=VALUE,VAR=VALUE (space separated), labelled nic-dp-CHUNK-LABEL and also run
# oldest-first when that runs, e.g. "4k:NICMALLOC_PAGE_KIND=4k
# lazy:NICMALLOC_PAGE_KIND=4k,MIMALLOC_EAGER_COMMIT=0". Builds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mode=${1:-quick}
out=${2:-$root/results/frag-$mode}
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
nic_bin=$build/bench/frag/frag_churn
peer_bin=$build/bench/frag/frag_churn_malloc
libnic=$build/alloc/libnicmalloc.so
libdir=/usr/lib/x86_64-linux-gnu

case $mode in
quick) live=256M rounds=2 chunks=(1G 32M) fifo=0 ;;
full) live=1G rounds=3 chunks=(1G 64M) fifo=1 ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
live=${FRAG_LIVE:-$live}
rounds=${FRAG_ROUNDS:-$rounds}
fifo=${FRAG_FIFO:-$fifo}
read -r -a variants <<<"${FRAG_NIC_VARIANTS:-}"
. "$root/bench/value_sizes.sh"
value_sizes "$root" run_frag # sets sizes, or exits: 77 when the repository has no shared folder
for f in "$nic_bin" "$peer_bin" "$libnic"; do
  [ -e "$f" ] || { echo "run_frag: $f missing (build with -DNICMALLOC_BUILD_BENCH=ON)" >&2; exit 1; }
done
mkdir -p "$out"
rm -f "$out"/summary.csv "$out"/series-*.csv "$out"/*.png "$out"/runs.log

# Short release delay: the measurement waits for the reaper, it does not need to be patient.
export NICMALLOC_RELEASE_DELAY_MS=100 NICMALLOC_MAX_CHUNKS=48
pools=(wildcard app replicated regional)

{
  echo "mode: $mode"
  "$root/bench/machine_info.sh" "$root"
  echo "libnicmalloc: $libnic ($(date -u -r "$libnic" +%FT%TZ))"
  echo "settings: live target $live, $rounds rounds, shrink 90% (random$([ "$fifo" = 1 ] && echo ", and oldest-first for nic-dp-${chunks[0]}")), seed 42, key 30 B, nicmalloc chunks ${chunks[*]}, NICMALLOC_RELEASE_DELAY_MS=$NICMALLOC_RELEASE_DELAY_MS NICMALLOC_MAX_CHUNKS=$NICMALLOC_MAX_CHUNKS NICMALLOC_PAGE_KIND=${NICMALLOC_PAGE_KIND:-auto} NICMALLOC_PIN_STEP=${NICMALLOC_PIN_STEP:-default}${variants:+, variants: ${variants[*]}}"
  echo "sizes: $sizes"
} >"$out/machine.txt"

step=0 failed=0
# run LABEL SHRINK POOL COMMAND...: one frag_churn run, with the options common to all appended.
run() {
  local label=$1 shrink=$2 pool=$3
  shift 3
  step=$((step + 1))
  local t0=$SECONDS
  printf 'run_frag: [%2d] %-10s %-14s %-6s ' "$step" "$pool" "$label" "$shrink"
  if "$@" --label "$label" --shrink "$shrink" --pool "$pool" --sizes "$sizes" --live "$live" \
    --rounds "$rounds" --out "$out/series-$pool-$label-$shrink.csv" \
    --summary "$out/summary.csv" >>"$out/runs.log" 2>&1; then
    echo "$((SECONDS - t0)) s: $(tail -1 "$out/summary.csv" | cut -d, -f12,22 |
      awk -F, '{printf "peak mem/live %.3f, returned %.1f%%", $1, $2}')"
  else
    echo "FAILED (see $out/runs.log)"
    failed=1
  fi
}

peers=("glibc::libc.so" "mimalloc:$libdir/libmimalloc.so.2:libmimalloc"
  "jemalloc:$libdir/libjemalloc.so.2:libjemalloc"
  "tcmalloc:$libdir/libtcmalloc_minimal.so.4:libtcmalloc" "nic-control:$libnic:libnicmalloc")
for pool in "${pools[@]}"; do
  for c in "${chunks[@]}"; do
    run "nic-dp-$c" random "$pool" env NICMALLOC_CHUNK_SIZE="$c" "$nic_bin" --api nic
  done
  for v in "${variants[@]}"; do
    IFS=, read -r -a vars <<<"${v#*:}"
    run "nic-dp-${chunks[0]}-${v%%:*}" random "$pool" env NICMALLOC_CHUNK_SIZE="${chunks[0]}" \
      "${vars[@]}" "$nic_bin" --api nic
  done
  for p in "${peers[@]}"; do
    IFS=: read -r name lib expect <<<"$p"
    if [ -n "$lib" ] && [ ! -e "$lib" ]; then
      echo "run_frag: $name skipped: $lib not installed" && continue
    fi
    run "$name" random "$pool" env ${lib:+LD_PRELOAD=$lib} "$peer_bin" --api malloc \
      --expect-lib "$expect"
  done
  run memcached-1.25 random "$pool" "$peer_bin" --api slab --slab-factor 1.25
  run memcached-1.07 random "$pool" "$peer_bin" --api slab --slab-factor 1.07
  run memcached-1.07u random "$pool" "$peer_bin" --api slab --slab-factor 1.07 --slab-uncapped 1
done
# Oldest-first shrink: can whole chunks empty when deletions follow allocation order? Only for
# the dataplane heap at the finest chunk size, to keep full mode within its time.
if [ "$fifo" = 1 ]; then
  for pool in "${pools[@]}"; do
    run "nic-dp-${chunks[0]}" fifo "$pool" env NICMALLOC_CHUNK_SIZE="${chunks[0]}" "$nic_bin" \
      --api nic
    for v in "${variants[@]}"; do
      IFS=, read -r -a vars <<<"${v#*:}"
      run "nic-dp-${chunks[0]}-${v%%:*}" fifo "$pool" env NICMALLOC_CHUNK_SIZE="${chunks[0]}" \
        "${vars[@]}" "$nic_bin" --api nic
    done
  done
fi

if /usr/bin/python3 "$(dirname "$0")/frag_report.py" "$out"; then
  echo "run_frag: report in $out/summary.md"
else
  echo "run_frag: report failed (is python3-matplotlib installed? apt-get install python3-matplotlib)" >&2
  exit 1
fi
exit "$failed" # a crashed run fails CI; the figures themselves are never judged here
