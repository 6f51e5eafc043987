#!/bin/bash
# fork of a process whose dataplane blocks are registered with io_uring, against the sim and
# none registered, interleaved in an order that rotates from round to round (bench/fork_cost.c
# "register"). io_uring pins the steps in the
# kernel, which copies a pinned page for the child at fork instead of sharing it.
#   bench/fork_registered.sh BUILD_DIR [rounds] [forks] [mib]
set -euo pipefail
build=${1:?build directory}
rounds=${2:-3} forks=${3:-9} mib=${4:-256}
. "$(dirname "$0")/rotate.sh"
uptime
for r in $(seq 1 "$rounds"); do
  for backend in $(rotated "$r" uring sim none); do
    mode=register
    [ $backend = none ] && mode=plain
    line=$(NICMALLOC_BACKEND=${backend/none/sim} NICMALLOC_CHUNK_SIZE=1G \
      "$build/bench/fork_cost" "$forks" "$mib" $mode) ||
      { echo "fork_registered: $backend round $r failed" >&2; exit 1; }
    echo "round $r $backend: $(tr '\n' ' ' <<<"$line")"
  done
done
