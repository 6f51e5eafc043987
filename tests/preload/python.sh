#!/usr/bin/env bash
# Debian's python3 runs workload.py under LD_PRELOAD=libnicmalloc.so: once plain, once with the exit
# report and every malloc of >= 4 KiB sent to the dataplane. Its output must be exactly the known
# result both times. Usage: python.sh /path/to/libnicmalloc.so
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
lib=$(realpath "${1:?usage: python.sh LIBNICMALLOC}")
[ -f "$lib" ] || fail "no library at $lib"
py=/usr/bin/python3
[ -x "$py" ] || { echo "SKIP: $py is not installed"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What workload.py prints with any correct malloc (checked against glibc's).
expected='table 50000 35d458b23d248911
blob 524288 6f881594cf93e4dc
threads 113cc20d7453079e 6b37b4add04b6162
true 0
echo hello
fork 0'

# run NAME ENV...: runs the workload under the library with the extra environment; -I keeps the
# user's site-packages and PYTHON* variables out. timeout runs outside the library: it would print
# a report of its own.
run() {
  local name=$1 rc=0
  shift
  timeout 50 env LD_PRELOAD="$lib" NICMALLOC_CHUNK_SIZE=64M "$@" \
    "$py" -I "$here/workload.py" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    cat "$tmp/$name.out" "$tmp/$name.err" >&2
    fail "$name: python exited with status $rc"
  fi
  if [ "$(cat "$tmp/$name.out")" != "$expected" ]; then
    diff <(echo "$expected") "$tmp/$name.out" >&2 || true
    fail "$name: output differs from the expected result (diff above: < expected, > got)"
  fi
  echo "ok: $name"
}

run plain

run stats NICMALLOC_STATS=1 NICMALLOC_DP_MIN_SIZE=4096
check_report "$tmp/stats.err"
# Exactly one: Python's own (workload.py keeps NICMALLOC_STATS from its children).
n=$(grep -c '^nicmalloc report' "$tmp/stats.err")
[ "$n" -eq 1 ] || { cat "$tmp/stats.err" >&2; fail "stats: expected 1 report on stderr, got $n"; }
echo "nicmalloc report (python, dataplane >= 4096 B):"
sed -n '/^nicmalloc report/,$p' "$tmp/stats.err"
