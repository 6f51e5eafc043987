#!/usr/bin/env bash
# redis-server under LD_PRELOAD=libnicmalloc.so, every malloc of >= 1 KiB on the dataplane, loaded by
# redis-benchmark (SET/GET/LPUSH/LPOP of 2 KiB values over 10000 keys), then a byte-exact SET/GET of
# a known 4 KiB and a 1 MiB value, then SHUTDOWN NOSAVE. Passes only if every benchmark ran without
# errors, the values came back intact, redis exited with status 0 and printed the nicmalloc report.
# Debian's redis calls jemalloc's mallctl for INFO memory: those figures are wrong under a preloaded
# malloc, which is expected and not checked. Usage: redis.sh /path/to/libnicmalloc.so
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
lib=$(realpath "${1:?usage: redis.sh LIBNICMALLOC}")
[ -f "$lib" ] || fail "no library at $lib"
need redis-server redis-cli redis-benchmark

tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

launch() {
  # Redis logs to stdout; the report goes to stderr. --dir keeps any file it writes in $tmp.
  LD_PRELOAD="$lib" NICMALLOC_STATS=1 NICMALLOC_DP_MIN_SIZE=1024 NICMALLOC_CHUNK_SIZE=64M \
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$tmp" >"$tmp/redis.log" 2>"$tmp/redis.err" &
  server_pid=$!
}
start_server launch redis_ready "$tmp/redis.log"
echo "redis-server (pid $server_pid) listening on 127.0.0.1:$port"
cli() { timeout 20 redis-cli -h 127.0.0.1 -p "$port" "$@"; }

rc=0
timeout 90 redis-benchmark -h 127.0.0.1 -p "$port" -q -n 20000 -c 8 -r 10000 -d 2048 \
  -t set,get,lpush,lpop >"$tmp/bench.out" 2>&1 || rc=$?
tr '\r' '\n' <"$tmp/bench.out" | grep 'requests per second' || true
if ! kill -0 "$server_pid" 2>/dev/null; then
  wait_exit "$server_pid" 1
  cat "$tmp/redis.log" "$tmp/redis.err" >&2
  fail "redis-server died during redis-benchmark (status $exit_rc)"
fi
[ "$rc" -eq 0 ] || fail "redis-benchmark exited with status $rc"
! grep -qi 'error' "$tmp/bench.out" || fail "redis-benchmark reported errors"
for t in SET GET LPUSH LPOP; do
  tr '\r' '\n' <"$tmp/bench.out" | grep -q "^$t: .*requests per second" || fail "no $t result"
done

# Known values, byte for byte: 4 KiB (the dataplane threshold is 1 KiB) and 1 MiB (grown by realloc
# while Redis reads it from the socket). redis-cli -x takes the value from stdin unchanged.
head -c 3072 /dev/urandom | base64 -w0 >"$tmp/v4k"     # 4096 bytes of text
head -c 786432 /dev/urandom | base64 -w0 >"$tmp/v1m"   # 1 MiB of text
for v in v4k v1m; do
  [ "$(cli -x SET "nicmalloc:$v" <"$tmp/$v")" = OK ] || fail "SET nicmalloc:$v failed"
  cli --raw GET "nicmalloc:$v" >"$tmp/$v.got"          # the value and a newline
  cmp <(cat "$tmp/$v"; echo) "$tmp/$v.got" || fail "GET nicmalloc:$v returned a different value"
done
echo "known values: 4 KiB and 1 MiB read back intact; keys in db: $(cli DBSIZE)"

cli SHUTDOWN NOSAVE >/dev/null 2>&1 || true  # the server closes the connection; its exit status counts
wait_exit "$server_pid" 20
server_pid=
if [ "$exit_rc" -ne 0 ]; then
  cat "$tmp/redis.log" "$tmp/redis.err" >&2
  fail "redis-server exited with status $exit_rc after SHUTDOWN NOSAVE"
fi
check_report "$tmp/redis.err"
sed -n '/^nicmalloc report/,$p' "$tmp/redis.err"
echo "ok: redis"
