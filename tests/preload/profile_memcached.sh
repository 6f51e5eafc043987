#!/usr/bin/env bash
# Profile-guided sites on Debian's unmodified memcached (-m 256 -t 2) under LD_PRELOAD: a profile
# run (NICMALLOC_PROFILE) under a memcslap load (binary get load, then text set load), then a
# routed run (NICMALLOC_SITES = that profile) under the same load. Passes when the profile names
# a site that sent bytes, and in the routed run at least 95% of the bytes memcached sends come
# from dataplane memory while the dataplane pinned bytes stay under two thirds of its total heap
# (control committed + dataplane mapped; 44-58% measured, usually 51%: each worker thread fills
# mimalloc segments of its own, so the slab pages take three or four 32 MiB chunks). Prints both
# figures.
# memcached's items all live in 1 MiB slab pages from one allocation site, and the set load fills
# pages that are never read back. The routed run therefore uses NICMALLOC_SITES_HEADROOM=1 (route
# as many bytes as the profile saw reach the network; the default 2 routes every slab page here,
# 83% of the heap pinned), and 32 MiB chunks: a mimalloc segment (32 MiB) holds 31 slab pages, so
# a 64 MiB chunk pins up to 32 MiB more.
# Usage: profile_memcached.sh /path/to/libnicmalloc.so [workdir to keep the profile and logs]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
source "$here/profile_checks.sh"
lib=$(realpath "${1:?usage: profile_memcached.sh LIBNICMALLOC [WORKDIR]}")
[ -f "$lib" ] || fail "no library at $lib"
need memcached memcslap

tmp=${2:-$(mktemp -d)}
mkdir -p "$tmp"
server_pid=
trap '[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null; [ -n "${2:-}" ] || rm -rf "$tmp"' EXIT

mode_env=() # the settings of the current run
launch() {
  env LD_PRELOAD="$lib" NICMALLOC_STATS=1 NICMALLOC_CHUNK_SIZE=32M "${mode_env[@]}" \
    memcached -p "$port" -U 0 -l 127.0.0.1 -m 256 -t 2 -u "$(id -un)" 2>"$log" &
  server_pid=$!
}
slap() {
  local name=$1 min=$2 n
  shift 2
  timeout 60 memcslap --servers="127.0.0.1:$port" "$@" >"$tmp/$name.out" 2>&1 ||
    fail "memcslap $name failed: $(tail -3 "$tmp/$name.out")"
  n=$(sed -n "s/^Time to $name *\([0-9]*\) keys by.*/\1/p" "$tmp/$name.out")
  [ -n "$n" ] && [ "$n" -ge "$min" ] || fail "memcslap $name: ${n:-no} keys done, expected >= $min"
}
# run NAME SETTINGS...: memcached under the load, stopped with SIGTERM; its stderr in $tmp/NAME.err.
run() {
  local name=$1
  shift
  mode_env=("$@")
  log=$tmp/$name.err
  start_server launch memcached_ready "$log"
  slap get 72000 --concurrency=4 --execute-number=20000 --test=get --binary
  slap set 80000 --concurrency=4 --execute-number=20000 --test=set
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 20
  server_pid=
  [ "$exit_rc" -eq 0 ] || { cat "$log" >&2; fail "memcached ($name run) exited with status $exit_rc"; }
  grep -q '^nicmalloc report' "$log" || { cat "$log" >&2; fail "no report from the $name run"; }
}

run profile NICMALLOC_PROFILE="$tmp/memcached.profile"
profile=$tmp/memcached.profile
check_profile "$profile"

run routed NICMALLOC_SITES="$profile" NICMALLOC_SITES_HEADROOM=1
check_routed "$tmp/routed.err" memcached 95 2/3
