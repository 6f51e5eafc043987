#!/bin/bash
# fork with dataplane memory on hugetlb steps against 4 KiB ones, interleaved in an order that
# rotates from round to round (bench/fork_cost.c).
# Needs root to grow the 2 MiB hugetlb pool for the hugetlb runs; it is put back on every exit.
#   bench/fork_cost.sh BUILD_DIR [rounds] [forks] [mib]
set -euo pipefail
build=${1:?build directory}
rounds=${2:-5} forks=${3:-21} mib=${4:-64}
. "$(dirname "$0")/rotate.sh"
pool=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
old=$(cat $pool)
trap 'echo "$old" > $pool' EXIT
trap 'exit 130' INT TERM # through the EXIT trap, which puts the pool back
uptime
for r in $(seq 1 "$rounds"); do
  for kind in $(rotated "$r" 2m 4k); do
    if [ $kind = 2m ]; then
      want=$((old + mib / 2 + 16))
      echo "$want" > $pool
      got=$(cat $pool)
      [ "$got" -ge "$want" ] || echo "fork_cost: the 2 MiB pool grew to $got pages of $want asked" >&2
    fi
    line=$(NICMALLOC_PAGE_KIND=$kind NICMALLOC_PIN_STEP=32M NICMALLOC_CHUNK_SIZE=1G \
      "$build/bench/fork_cost" "$forks" "$mib") || { echo "fork_cost: $kind round $r failed" >&2; exit 1; }
    echo "round $r kind $kind: $(tr '\n' ' ' <<<"$line")"
    echo "$old" > $pool
  done
done
