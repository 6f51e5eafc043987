# Sourced by bench/peers.sh, bench/suite.sh and bench/servers.sh: the allocators compared under
# LD_PRELOAD, one measured run of a program under one of them, and the checks that the allocator
# is installed and that the program's malloc came from it.
#
# preload_allocs DP4K_ENV: sets PRELOAD_ALLOCS to "name|LD_PRELOAD|extra environment|file name
# malloc must come from" entries: glibc, Debian's mimalloc, jemalloc, tcmalloc, nicmalloc (control
# heap) and nicmalloc-dp4k (DP4K_ENV, which sets NICMALLOC_DP_MIN_SIZE=4096 and what else the
# caller wants). Needs $build (the build directory).
preload_allocs() {
  local libdir=/usr/lib/x86_64-linux-gnu libnic=$build/alloc/libnicmalloc.so
  PRELOAD_ALLOCS=("glibc||-|libc.so"
    "mimalloc|$libdir/libmimalloc.so.2|-|libmimalloc"
    "jemalloc|$libdir/libjemalloc.so.2|-|libjemalloc"
    "tcmalloc|$libdir/libtcmalloc_minimal.so.4|-|libtcmalloc"
    "nicmalloc|$libnic|-|libnicmalloc"
    "nicmalloc-dp4k|$libnic|$1|libnicmalloc")
}

# preload_missing ENTRY: true when ENTRY (a PRELOAD_ALLOCS entry, or any "name|library|..." one)
# names a library that is not there: the allocator is not installed and nothing may run under it
# (ld.so ignores a preload it cannot load, and the program would run on another malloc).
preload_missing() {
  local name lib rest
  IFS='|' read -r name lib rest <<<"$1"
  [ -n "$lib" ] && [ ! -e "$lib" ]
}

# malloc_from_ok EXPECT TEXT: true when TEXT says "malloc from <a file whose name has EXPECT>":
# the program's own result line (the workloads and suite programs print it), or ld_malloc_from's.
malloc_from_ok() {
  grep -q "malloc from .*$1" <<<"$2"
}

# ld_malloc_from FILE PROGRAM: "malloc from <object>" for the object PROGRAM's own malloc calls
# were bound to, from ld.so's LD_DEBUG=bindings output of its process in FILE (LD_DEBUG_OUTPUT=
# PREFIX writes PREFIX.<pid>): what a program that cannot say it itself (a server) ran on; a
# library it links may bring its own malloc (Debian's redis-server links libjemalloc), which
# then wins over glibc's. "malloc from nothing" when FILE has no such binding.
ld_malloc_from() {
  local obj
  obj=$(sed -n "s/.*binding file \(.*\/\)\{0,1\}$2 \[[0-9]*\] to \([^ ]*\) \[[0-9]*\]: normal symbol \`malloc'.*/\2/p" \
    "$1" 2>/dev/null | head -1)
  echo "malloc from ${obj:-nothing}"
}

# stats_field NAME FILE: the value of NAME in KiB from the last JSON stats line in FILE, or "-".
stats_field() {
  local v
  v=$(grep '^{"version"' "$2" 2>/dev/null | tail -1 | grep -o "\"$1\": *[0-9]*" | grep -o '[0-9]*$')
  [ -n "$v" ] && echo $((v / 1024)) || echo -
}

# preload_scratch: sets PRELOAD_SCRATCH to a folder of this process's own for a run's time, stdout
# and stderr files (a results folder two scripts may share would mix them), made at the first
# run and removed when the script exits (its EXIT trap: preload_run's callers set none).
preload_scratch() {
  if [ -z "${PRELOAD_SCRATCH:-}" ]; then
    PRELOAD_SCRATCH=$(mktemp -d)
    trap 'rm -rf "$PRELOAD_SCRATCH"' EXIT
  fi
}

# preload_run ENTRY LOG COMMAND...: runs COMMAND under the allocator ENTRY (one of
# PRELOAD_ALLOCS) and sets RUN_SECS (wall seconds from bash's microsecond clock; GNU time's %e
# has 10 ms steps), RUN_RSS (peak RSS in KiB from GNU time, through its own file so that stdout
# stays the program's result line), RUN_CPU (user + system seconds, GNU time, 10 ms steps: less
# sensitive than wall time to other load on the machine), RUN_OUT (that line) and RUN_STATUS: ok, FAILED (non-zero
# exit), or FAILED when the line does not say "ok: ... malloc from <the expected library>" (the
# preload did not take effect). RUN_LIVE_PEAK and RUN_PINNED_PEAK: the peaks of dataplane live
# and pinned KiB from the JSON line nicmalloc prints at exit when the entry's environment has
# NICMALLOC_STATS=json ("-" without one). Stderr goes to LOG. Returns 1 when the allocator is not
# installed (nothing run).
preload_run() {
  local entry=$1 log=$2 name lib extra expect rc=0 t0 scratch
  shift 2
  preload_missing "$entry" && return 1
  preload_scratch
  scratch=$PRELOAD_SCRATCH
  IFS='|' read -r name lib extra expect <<<"$entry"
  [ "$extra" = - ] && extra=
  t0=$EPOCHREALTIME
  # GNU time outside the preload: only the program runs under the allocator (and prints its stats).
  /usr/bin/time -o "$scratch/.time" -f '%M %U %S' env ${lib:+LD_PRELOAD=$lib} $extra \
    "$@" >"$scratch/.stdout" 2>"$scratch/.stderr" || rc=$?
  RUN_SECS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.4f", b - a}')
  read -r RUN_RSS RUN_CPU < <(tail -1 "$scratch/.time" | awk '{printf "%s %.2f", $1, $2 + $3}')
  RUN_OUT=$(cat "$scratch/.stdout")
  RUN_LIVE_PEAK=$(stats_field dataplane_live_peak "$scratch/.stderr")
  RUN_PINNED_PEAK=$(stats_field dataplane_pinned_peak "$scratch/.stderr")
  cat "$scratch/.stderr" >>"$log"
  RUN_STATUS=ok
  if [ "$rc" != 0 ]; then
    RUN_STATUS=FAILED
  elif [[ $RUN_OUT != *"ok: "* ]] || ! malloc_from_ok "$expect" "${RUN_OUT#*ok: }"; then
    RUN_STATUS=FAILED
    echo "$name: malloc not from *$expect*: $RUN_OUT" >>"$log"
  fi
  rm -f "$scratch"/{.time,.stdout,.stderr}
  return 0
}
