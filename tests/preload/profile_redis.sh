#!/usr/bin/env bash
# Profile-guided sites on Debian's unmodified redis-server (7.0) under LD_PRELOAD: a profile run
# (NICMALLOC_PROFILE) under a redis-benchmark load (SET/GET/LPUSH of 1 KiB values, 20 clients,
# then LRANGE_100), with a BGSAVE (a forked child) during it, then a routed run (NICMALLOC_SITES =
# that profile) under the same load. Passes when the profile names a site that sent bytes, the
# BGSAVE succeeded, and in the routed run at least 97% of the bytes redis sends come from
# dataplane memory while the dataplane pinned bytes stay under 60% of its total heap (measured:
# 100.0%, 32 MiB pinned of a 192 MiB heap). Prints both figures.
# Redis sends from three sites: each client's 16 KiB reply buffer (createClient), the reply list
# blocks of large replies (LRANGE), and the ~1 KiB reply buffer that serverCron's
# clientsCronResizeOutputBuffer shrinks a GET client's buffer to after a second or so. That last
# one sends half the GET bytes from a few 1 KiB blocks, which the default NICMALLOC_PROFILE_SAMPLE
# (64K) samples with probability 1.6% each and so usually misses (routed share then 92%): the
# profile run uses NICMALLOC_PROFILE_SAMPLE=512 (see README).
# Usage: profile_redis.sh /path/to/libnicmalloc.so [workdir to keep the profile and logs]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
source "$here/profile_checks.sh"
lib=$(realpath "${1:?usage: profile_redis.sh LIBNICMALLOC [WORKDIR]}")
[ -f "$lib" ] || fail "no library at $lib"
need redis-server redis-cli redis-benchmark

tmp=${2:-$(mktemp -d)}
mkdir -p "$tmp"
server_pid=
trap '[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null; [ -n "${2:-}" ] || rm -rf "$tmp"' EXIT

mode_env=() # the settings of the current run
launch() {
  env LD_PRELOAD="$lib" NICMALLOC_STATS=1 NICMALLOC_CHUNK_SIZE=32M "${mode_env[@]}" \
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$tmp" >"$tmp/$name.log" 2>"$log" &
  server_pid=$!
}
bench() {
  local rc=0
  timeout 120 redis-benchmark -h 127.0.0.1 -p "$port" -q "$@" >"$tmp/$name.bench" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || fail "redis-benchmark ($name run) exited with status $rc: $(tail -3 "$tmp/$name.bench")"
  ! grep -qi 'error' "$tmp/$name.bench" || fail "redis-benchmark ($name run) reported errors"
}
# run NAME SETTINGS...: redis under the load, stopped with SHUTDOWN NOSAVE; its stderr in $tmp/NAME.err.
run() {
  name=$1 # global: launch and bench name their files by it
  shift
  mode_env=("$@")
  log=$tmp/$name.err
  start_server launch redis_ready "$log"
  bench -n 100000 -c 20 -r 10000 -d 1024 -t set,get,lpush
  [ "$name" = profile ] && { timeout 10 redis-cli -p "$port" BGSAVE >/dev/null || fail "BGSAVE refused"; }
  bench -n 5000 -c 50 -d 1024 -t lrange_100
  if [ "$name" = profile ]; then # the forked child has had the whole LRANGE load to finish
    local i
    for i in $(seq 100); do
      timeout 2 redis-cli -p "$port" INFO persistence | grep -q '^rdb_bgsave_in_progress:0' && break
      sleep 0.2
    done
    timeout 2 redis-cli -p "$port" INFO persistence | grep -q '^rdb_last_bgsave_status:ok' ||
      fail "BGSAVE under NICMALLOC_PROFILE did not succeed"
  fi
  tr '\r' '\n' <"$tmp/$name.bench" | grep 'requests per second' || true
  timeout 20 redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait_exit "$server_pid" 20
  server_pid=
  [ "$exit_rc" -eq 0 ] || { cat "$log" >&2; fail "redis-server ($name run) exited with status $exit_rc"; }
  grep -q '^nicmalloc report' "$log" || { cat "$log" >&2; fail "no report from the $name run"; }
}

profile=$tmp/redis.profile
run profile NICMALLOC_PROFILE="$profile" NICMALLOC_PROFILE_SAMPLE=512
check_profile "$profile"

run routed NICMALLOC_SITES="$profile"
check_routed "$tmp/routed.err" redis 97 3/5
