#!/usr/bin/env bash
# Prints the instructions a callgrind run collected (its "summary:" line), or fails saying why
# when there are none: --toggle-collect names a function that never ran (renamed, or inlined
# away), and a repeatable 0 would pass for a figure.
#   bench/callgrind_total.sh CALLGRIND_OUT_FILE
set -euo pipefail
file=${1:?callgrind output file}
total=$(awk '/^summary:/ { print $2 }' "$file")
if [ -z "$total" ] || [ "$total" = 0 ]; then
  echo "callgrind_total: $file collected no instructions (the --toggle-collect function never ran?)" >&2
  exit 1
fi
echo "$total"
