#!/usr/bin/env bash
# nicmalloc's main job, shown on a real program: an unmodified memcached runs under
# LD_PRELOAD=libnicmalloc.so with every malloc of >= 1 KiB (its slab pages, connection buffers and
# large items) in pinned dataplane memory, serves a short memcslap load, and at exit prints the
# nicmalloc report and the peak of pinned against live dataplane bytes.
# Usage: scripts/demo-memcached.sh BUILD_DIR   (run.sh demo calls it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/tests/preload/common.sh"
build=$(realpath "${1:?usage: demo-memcached.sh BUILD_DIR}")
lib=$build/alloc/libnicmalloc.so
[ -f "$lib" ] || fail "no $lib: build first (./run.sh demo does)"
for p in memcached memcslap; do
  command -v "$p" >/dev/null || fail "$p is not installed (scripts/install-deps.sh)"
done

tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT

launch() {
  LD_PRELOAD="$lib" NICMALLOC_STATS=1 NICMALLOC_DP_MIN_SIZE=1024 NICMALLOC_CHUNK_SIZE=256M \
    memcached -p "$port" -U 0 -l 127.0.0.1 -m 64 -t 2 -u "$(id -un)" 2>"$tmp/memcached.err" &
  server_pid=$!
}
mc_stats() {  # the named figures from memcached's "stats"
  printf 'stats\r\nquit\r\n' | timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && cat >&3 && cat <&3" |
    tr -d '\r' | awk -v want=" $* " 'index(want, " " $2 " ") { printf "  %-16s %s\n", $2, $3 }'
}
section() { printf '\n== %s ==\n' "$*"; }

start_server launch memcached_ready "$tmp/memcached.err"
section "memcached $(memcached -V | cut -d' ' -f2) under nicmalloc"
echo "  pid $server_pid on 127.0.0.1:$port, -m 64 -t 2"
echo "  LD_PRELOAD=$lib"
echo "  NICMALLOC_DP_MIN_SIZE=1024 (mallocs >= 1 KiB go to pinned dataplane chunks of 256 MiB)"

# Two bounded loads: 4 threads x 20000 gets of up to 4 KiB values (binary protocol), then 4 threads
# x 20000 sets (text protocol). Each takes a few seconds on two cores.
for t in get set; do
  section "memcslap --test=$t (4 threads x 20000)"
  args=(--servers="127.0.0.1:$port" --concurrency=4 --execute-number=20000 --test="$t")
  [ "$t" = get ] && args+=(--binary)
  rc=0
  timeout 30 memcslap "${args[@]}" >"$tmp/$t.out" 2>&1 || rc=$?
  grep -E '^Time to|^-' "$tmp/$t.out" | grep -v '^Time to start' || true
  kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/memcached.err" >&2; fail "memcached died"; }
  [ "$rc" -eq 0 ] || { cat "$tmp/$t.out"; fail "memcslap --test=$t exited with status $rc"; }
  # "Time to get 78661 keys by 4 threads: 1.256 seconds." -> keys per second
  awk -v t="$t" '$1 == "Time" && $3 == t && $6 == "by" && $NF == "seconds." && $(NF-1) > 0 {
    printf "=> %s: %d keys in %.3f s = %.0f ops/s\n", t, $4, $(NF-1), $4 / $(NF-1); ok = $4 > 0 }
    END { exit !ok }' "$tmp/$t.out" || fail "memcslap --test=$t did no $t"
done

section "memcached stats"
mc_stats curr_items bytes total_items evictions get_hits get_misses cmd_set

kill -TERM "$server_pid"
wait_exit "$server_pid" 20
server_pid=
[ "$exit_rc" -eq 0 ] || { cat "$tmp/memcached.err" >&2; fail "memcached exited with status $exit_rc"; }
# The library's own messages (e.g. which page kind backs the chunks), then its report.
if grep -q '^nicmalloc:' "$tmp/memcached.err"; then
  section "nicmalloc messages"
  grep '^nicmalloc:' "$tmp/memcached.err"
fi
section "nicmalloc report (memcached's stderr at exit)"
grep -q '^nicmalloc report' "$tmp/memcached.err" || { cat "$tmp/memcached.err"; fail "no nicmalloc report"; }
sed -n '/^nicmalloc report/,$p' "$tmp/memcached.err"
# Pinned memory against what the program had live at its busiest ("  peaks  live X MiB, pinned Y
# MiB": the reaper samples both; pinned is exact, live a lower bound, see README's statistics).
section "pinned against live dataplane bytes at the peak"
awk '$1 == "peaks" && $2 == "live" && $5 == "pinned" { live = $3; pinned = $6; found = 1 }
  END {
    if (!found) exit 1
    printf "  live %.1f MiB, pinned %.1f MiB: pinned / live = %s (target <= 1.3)\n", live, pinned,
      (live > 0 ? sprintf("%.2f", pinned / live) : "-")
  }' "$tmp/memcached.err" || fail "no peaks line in the nicmalloc report"
