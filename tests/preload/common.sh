# Helpers shared by the preload tests and scripts/demo-memcached.sh. Source it; it sets nothing else.
# Servers only ever listen on, and clients only ever talk to, 127.0.0.1.

fail() { echo "FAIL: $*" >&2; exit 1; }

# ctest treats exit code 77 as "skipped" (SKIP_RETURN_CODE in CMakeLists.txt).
need() {
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null 2>&1 || { echo "SKIP: $p is not installed (scripts/install-deps.sh)"; exit 77; }
  done
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# A random port in 20000-39999 that nothing listens on. Another process may still take it before our
# server binds it; start_server notices that (the server exits) and tries a new port.
pick_port() {
  local p i
  for i in $(seq 50); do
    p=$((20000 + RANDOM % 20000))
    port_open "$p" || { echo "$p"; return 0; }
  done
  fail "no free port found"
}

# start_server LAUNCH READY LOG: sets $port, calls LAUNCH (must start the server in the background
# and set $server_pid), then waits up to 20 s until READY succeeds. If the server dies before it is
# ready because its port was taken meanwhile, it retries on another port; any other death fails.
start_server() {
  local launch=$1 ready=$2 log=$3 attempt i
  for attempt in 1 2 3; do
    port=$(pick_port)
    "$launch"
    for i in $(seq 200); do
      if ! kill -0 "$server_pid" 2>/dev/null; then
        if grep -qi 'in use' "$log"; then continue 2; fi
        cat "$log" >&2
        fail "server died during start-up (see its log above)"
      fi
      if "$ready"; then return 0; fi
      sleep 0.1
    done
    cat "$log" >&2
    fail "server did not become ready on port $port within 20 s"
  done
  fail "could not start the server on a free port after 3 attempts"
}

# memcached_ready: start_server's READY test for memcached: the server answering on $port is ours
# (its "STAT pid" is $server_pid), not another process that took the port.
memcached_ready() {
  printf 'stats\r\nquit\r\n' | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && cat >&3 && cat <&3" \
    2>/dev/null | grep "^STAT pid $server_pid"$'\r' >/dev/null
}

# redis_ready: start_server's READY test for redis-server: the server answering on $port is ours
# (its INFO process_id is $server_pid) and answers PING.
redis_ready() {
  timeout 2 redis-cli -p "$port" INFO server 2>/dev/null | grep "^process_id:$server_pid"$'\r' >/dev/null &&
    [ "$(timeout 2 redis-cli -p "$port" PING 2>/dev/null)" = PONG ]
}

# wait_exit PID SECS: waits for our child PID to exit and sets $exit_rc. A server that does not exit
# within SECS is killed with SIGKILL and the test fails (a hang on shutdown is a real bug).
wait_exit() {
  local pid=$1 secs=$2 i
  for i in $(seq $((secs * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    fail "pid $pid did not exit within ${secs} s of being asked to stop"
  fi
  exit_rc=0
  wait "$pid" || exit_rc=$?
  if [ "$exit_rc" -gt 128 ]; then
    echo "pid $pid died of signal $((exit_rc - 128)) ($(kill -l $((exit_rc - 128)) 2>/dev/null))" >&2
  fi
}

# check_report FILE: FILE holds the stderr of a program run with NICMALLOC_STATS=1 and
# NICMALLOC_DP_MIN_SIZE set; the exit report must be there with its control and dataplane figures,
# show that dataplane chunks were used, and count no invalid or double frees (a real program that
# frees correctly under glibc must not produce any).
check_report() {
  local f=$1 created
  grep -q '^nicmalloc report' "$f" || { cat "$f" >&2; fail "no 'nicmalloc report' in $f"; }
  grep -qi 'control' "$f" || { cat "$f" >&2; fail "report in $f has no control figures"; }
  grep -qi 'dataplane' "$f" || { cat "$f" >&2; fail "report in $f has no dataplane figures"; }
  # These two read the report's wording ("N created", "N invalid frees"); if it changes, update here.
  created=$(grep -o '[0-9][0-9]* created' "$f" | head -1 | cut -d' ' -f1)
  [ -n "$created" ] || { cat "$f" >&2; fail "report in $f has no 'N created' chunk count"; }
  [ "$created" -ge 1 ] || { cat "$f" >&2; fail "no dataplane chunk was created (NICMALLOC_DP_MIN_SIZE ignored?)"; }
  if grep -Eq '[1-9][0-9]* (invalid|double) frees' "$f"; then
    cat "$f" >&2
    fail "report in $f counts invalid or double frees"
  fi
}
