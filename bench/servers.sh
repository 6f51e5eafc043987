#!/usr/bin/env bash
# Real servers under LD_PRELOAD: memcached loaded by memcaslap and redis-server loaded by
# redis-benchmark, on 127.0.0.1 only, each under glibc, Debian's mimalloc, nicmalloc (control heap)
# and nicmalloc with NICMALLOC_DP_MIN_SIZE=1024 (values on the dataplane, as the preload tests run
# it). Each load is bounded by an operation count. Allocators interleave within each repetition,
# their order rotating from one repetition to the next.
#   bench/servers.sh [quick|full] [results_dir]
# Records ops/s and the server's peak RSS (VmHWM, read just before it is stopped) in
# results_dir/servers.csv; the report takes medians and ratios to mimalloc. Under nicmalloc the
# server prints its statistics at exit (NICMALLOC_STATS=json: an unmodified server has no other
# way to give them), from which the peaks of dataplane live and pinned bytes are recorded too
# (dataplane_live_peak, dataplane_pinned_peak; the report shows pinned / live, target <= 1.3).
# SERVERS_REPS overrides the repetitions (quick 2, full 3). Uses tests/preload/common.sh.
# An allocator whose library is not installed gets a row saying so (the report names it); a run
# whose server's malloc did not come from the allocator's library (ld.so's LD_DEBUG=bindings
# tells, bench/preload.sh) FAILED.
# With two CPUs or more, the server runs on CPU 0 and the load generator on CPU 1 (taskset), so
# that they do not take turns on one core; SERVERS_PIN=0 turns that off.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/preload/common.sh"
. "$root/bench/preload.sh"
. "$root/bench/rotate.sh"
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
mode=${1:-quick}
out=${2:-$root/results/$mode}
case $mode in
quick) reps=2 mc_ops=60000 redis_n=10000 redis_tests=set,get ;;
full) reps=3 mc_ops=600000 redis_n=100000 redis_tests=set,get,lpush,lpop ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
reps=${SERVERS_REPS:-$reps}
server_cpu=() client_cpu=()
if [ "${SERVERS_PIN:-1}" != 0 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  server_cpu=(taskset -c 0) client_cpu=(taskset -c 1)
fi
libnic=$build/alloc/libnicmalloc.so libdir=/usr/lib/x86_64-linux-gnu
dp1k="NICMALLOC_DP_MIN_SIZE=1024 NICMALLOC_CHUNK_SIZE=256M"
# name|LD_PRELOAD|extra environment|file name the server's malloc must come from. glibc is
# preloaded too: Debian's redis-server links libjemalloc, whose malloc wins over glibc's unless
# libc comes first in the lookup order.
allocs=("glibc|$libdir/libc.so.6||libc.so" "mimalloc|$libdir/libmimalloc.so.2||libmimalloc"
  "nicmalloc|$libnic|NICMALLOC_STATS=json|libnicmalloc"
  "nicmalloc-dp1k|$libnic|NICMALLOC_STATS=json $dp1k|libnicmalloc")
mkdir -p "$out"
csv=$out/servers.csv log=$out/servers.log
echo "rep,server,allocator,test,ops_per_sec,vmhwm_kib,live_peak_kib,pinned_peak_kib,status" >"$csv"
: >"$log"
servers=()
command -v memcached >/dev/null && command -v memcaslap >/dev/null && servers+=(memcached)
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null && servers+=(redis)
[ ${#servers[@]} -gt 0 ] || { echo "servers: neither memcached+memcaslap nor redis installed" >&2; exit 1; }
echo "servers: ${servers[*]}, $reps repetitions (memcaslap -x $mc_ops; redis-benchmark -n" \
  "$redis_n -t $redis_tests; log in $log)${server_cpu:+; server on CPU 0, load on CPU 1}" >&2

# The launch/ready pairs start_server (common.sh) calls; $lib and $extra name the allocator.
# ld.so writes its symbol bindings to $tmp/ld.<pid>: which object the server's malloc came from.
launch_memcached() {
  "${server_cpu[@]}" env ${lib:+LD_PRELOAD=$lib} LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/ld" \
    $extra memcached -p "$port" -U 0 -l 127.0.0.1 \
    -m 1024 -t 2 -u "$(id -un)" >"$tmp/server.log" 2>&1 &
  server_pid=$!
}
launch_redis() {
  "${server_cpu[@]}" env ${lib:+LD_PRELOAD=$lib} LD_DEBUG=bindings LD_DEBUG_OUTPUT="$tmp/ld" \
    $extra redis-server --port "$port" \
    --bind 127.0.0.1 --save "" --appendonly no --daemonize no --dir "$tmp" >"$tmp/server.log" 2>&1 &
  server_pid=$!
}
ready_memcached() { memcached_ready; } # common.sh; the name start_server is given below
ready_redis() {
  timeout 2 redis-cli -p "$port" INFO server 2>/dev/null | grep -q "^process_id:$server_pid"$'\r'
}

# The peaks of dataplane live and pinned bytes in KiB from the JSON line NICMALLOC_STATS=json
# printed at exit ("- -" when there is none: not under nicmalloc).
stats_peaks() { # LOG
  /usr/bin/python3 -c '
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1], errors="replace") if l.startswith("{\"version\"")]
print("- -" if not objs else "%d %d" % (objs[-1]["dataplane_live_peak"] // 1024,
                                         objs[-1]["dataplane_pinned_peak"] // 1024))' "$1"
}

# measure SERVER: one server under one allocator, in a subshell so that common.sh's fail() ends
# only this measurement; prints "test ops_per_sec" lines, "hwm KIB", "peaks LIVE PINNED", then
# "from malloc from OBJECT" (ld_malloc_from: the object the server's malloc calls were bound to).
measure() (
  server=$1
  tmp=$(mktemp -d) server_pid=
  trap '[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
  start_server "launch_$server" "ready_$server" "$tmp/server.log" >&2
  if [ "$server" = memcached ]; then
    # 90% get / 10% set (memaslap's default mix), 2 threads x 16 connections.
    timeout 300 "${client_cpu[@]}" memcaslap -s "127.0.0.1:$port" -T 2 -c 32 -x "$mc_ops" \
      >"$tmp/load.out" 2>&1 ||
      fail "memcaslap exited with status $?"
    tps=$(grep -o 'TPS: [0-9]*' "$tmp/load.out" | tail -1 | cut -d' ' -f2)
    [ -n "$tps" ] || { cat "$tmp/load.out" >&2; fail "memcaslap printed no TPS"; }
    echo "mixed $tps"
  else
    timeout 300 "${client_cpu[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -q -n "$redis_n" -c 16 \
      -r 10000 -d 256 -t "$redis_tests" >"$tmp/load.out" 2>&1 ||
      fail "redis-benchmark exited with status $?"
    rows=$(tr '\r' '\n' <"$tmp/load.out" |
      sed -n 's/^\([A-Z]*\): \([0-9.]*\) requests per second.*/\1 \2/p' | sort -u -k1,1)
    # One row per test of -t and no other: a test that printed none would be missing unsaid.
    want=$(tr ',' '\n' <<<"${redis_tests^^}" | sort)
    if [ "$(cut -d' ' -f1 <<<"$rows")" != "$want" ]; then
      cat "$tmp/load.out" >&2
      fail "redis-benchmark gave rows for $(echo $(cut -d' ' -f1 <<<"$rows")), not for" \
        "$(echo $want) (-t $redis_tests)"
    fi
    echo "$rows"
  fi
  kill -0 "$server_pid" 2>/dev/null || fail "server died under load"
  echo "hwm $(awk '/^VmHWM/ {print $2}' "/proc/$server_pid/status")"
  kill -TERM "$server_pid"
  wait_exit "$server_pid" 20
  pid=$server_pid server_pid=
  [ "$exit_rc" = 0 ] || fail "server exited with status $exit_rc"
  echo "peaks $(stats_peaks "$tmp/server.log")"
  echo "from $(ld_malloc_from "$tmp/ld.$pid" "${server/redis/redis-server}")"
)

failed=0
for rep in $(seq "$reps"); do
  mapfile -t order < <(rotated "$rep" "${allocs[@]}")
  for server in "${servers[@]}"; do
    for a in "${order[@]}"; do
      IFS='|' read -r name lib extra expect <<<"$a"
      if preload_missing "$a"; then
        if [ "$rep" = 1 ]; then
          echo "servers: $name skipped for $server: $lib not installed" >&2
          echo "-,$server,$name,-,,,,,not installed" >>"$csv"
        fi
        continue
      fi
      if ! res=$(measure "$server" 2>>"$log"); then
        echo "$rep,$server,$name,-,,,,,FAILED" >>"$csv"
        echo "servers: $server under $name FAILED (see $log)" >&2
        failed=1
        continue
      fi
      echo "$server/$name rep $rep: $(echo $res)" >>"$log"
      from=$(sed -n 's/^from //p' <<<"$res")
      if ! malloc_from_ok "$expect" "$from"; then
        echo "$name: $server's malloc not from *$expect*: $from" >>"$log"
        echo "$rep,$server,$name,-,,,,,FAILED" >>"$csv"
        echo "servers: $server under $name FAILED: $from, not $expect (see $log)" >&2
        failed=1
        continue
      fi
      hwm=$(awk '$1 == "hwm" {print $2}' <<<"$res")
      peaks=$(awk '$1 == "peaks" {print ($2 == "-" ? "" : $2) "," ($3 == "-" ? "" : $3)}' <<<"$res")
      awk -v p="$rep,$server,$name," -v h="$hwm,$peaks" '$1 != "hwm" && $1 != "peaks" &&
        $1 != "from" { print p $1 "," $2 "," h ",ok" }' <<<"$res" >>"$csv"
    done
  done
  echo "servers: repetition $rep/$reps done" >&2
done
/usr/bin/python3 "$root/bench/report.py" --servers "$csv" | tee "$out/servers.md"
exit "$failed"
