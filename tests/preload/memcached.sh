#!/usr/bin/env bash
# memcached under LD_PRELOAD=libnicmalloc.so, every malloc of >= 1 KiB on the dataplane, loaded by
# memcslap (binary get load, then text set load), then checked byte for byte (mc_check.py), stopped
# with SIGTERM. Passes only if memcslap did all its work, every value came back intact, memcached
# exited with status 0 and printed the nicmalloc report. Usage: memcached.sh /path/to/libnicmalloc.so
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
lib=$(realpath "${1:?usage: memcached.sh LIBNICMALLOC}")
[ -f "$lib" ] || fail "no library at $lib"
need memcached memcslap
py=/usr/bin/python3

tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

launch() {
  # memcached refuses to run as root without -u. Its stderr gets the report at exit.
  LD_PRELOAD="$lib" NICMALLOC_STATS=1 NICMALLOC_DP_MIN_SIZE=1024 NICMALLOC_CHUNK_SIZE=64M \
    memcached -p "$port" -U 0 -l 127.0.0.1 -m 64 -t 2 -u "$(id -un)" 2>"$tmp/memcached.err" &
  server_pid=$!
}
start_server launch memcached_ready "$tmp/memcached.err"
echo "memcached (pid $server_pid) listening on 127.0.0.1:$port"

# slap NAME EXPECTED_MIN ARGS...: runs memcslap; it exits 0 even when the server is gone, so its
# "Time to <op> N keys" count must be at least EXPECTED_MIN.
slap() {
  local name=$1 min=$2 rc=0 n
  shift 2
  timeout 60 memcslap --servers="127.0.0.1:$port" "$@" >"$tmp/$name.out" 2>&1 || rc=$?
  cat "$tmp/$name.out"
  if ! kill -0 "$server_pid" 2>/dev/null; then
    wait_exit "$server_pid" 1
    cat "$tmp/memcached.err" >&2
    fail "memcached died during memcslap $name (status $exit_rc)"
  fi
  [ "$rc" -eq 0 ] || fail "memcslap $name exited with status $rc"
  n=$(sed -n "s/^Time to $name *\([0-9]*\) keys by.*/\1/p" "$tmp/$name.out")
  [ -n "$n" ] && [ "$n" -ge "$min" ] || fail "memcslap $name: ${n:-no} keys done, expected >= $min"
}
# Get load: memcslap first stores 20000 values of up to 4 KiB, then 4 threads read 20000 each. The 64 MB
# cache evicts a few (about 2% under glibc), hence "at least 90%".
slap get 72000 --concurrency=4 --execute-number=20000 --test=get --binary
# Set load: 4 threads store 20000 values each; every set must succeed.
slap set 80000 --concurrency=4 --execute-number=20000 --test=set

timeout 60 "$py" -I "$here/mc_check.py" "$port" || fail "memcached returned wrong values (above)"

kill -TERM "$server_pid"
wait_exit "$server_pid" 20
server_pid=
if [ "$exit_rc" -ne 0 ]; then
  cat "$tmp/memcached.err" >&2
  fail "memcached exited with status $exit_rc after SIGTERM"
fi
check_report "$tmp/memcached.err"
sed -n '/^nicmalloc report/,$p' "$tmp/memcached.err"
echo "ok: memcached"
