# Checks shared by the profile-guided server tests (profile_memcached.sh, profile_redis.sh);
# sourced after common.sh.

# check_profile FILE: a nicmalloc profile that names at least one site that sent bytes; prints
# the top ones.
check_profile() {
  local profile=$1 sending
  [ -s "$profile" ] || fail "no profile written"
  head -1 "$profile" | grep -q '^# nicmalloc profile 1$' || fail "profile has no header"
  sending=$(awk '$1 == "site" && $2 > 0' "$profile" | wc -l)
  [ "$sending" -ge 1 ] || { cat "$profile" >&2; fail "the profile names no site that sent bytes"; }
  echo "profile: $(grep -c '^site' "$profile") sites, $sending sent bytes; the top ones:"
  awk '$1 == "site" && n++ < 3' "$profile" # not head: pipefail and SIGPIPE
}

# check_routed LOG SERVER MIN_SHARE MAX_PINNED: the routed run's report (stderr in LOG) must show
# at least MIN_SHARE percent of the bytes SERVER sent coming from dataplane memory, and dataplane
# pinned bytes of at most MAX_PINNED (a fraction, "2/3") of the heap: control committed plus
# dataplane mapped. Prints both figures.
check_routed() {
  local log=$1 server=$2 min_share=$3 max_pinned=$4 sent dp pinned mapped committed
  sed -n '/^nicmalloc report/,$p' "$log"
  # "sent N bytes, D from dataplane memory" and "dataplane live .., pinned P MiB, mapped M MiB".
  read -r sent dp < <(sed -n 's/^ *sent *\([0-9]*\) bytes, \([0-9]*\) from dataplane.*/\1 \2/p' "$log")
  read -r pinned mapped < <(sed -n 's/^ *dataplane *live.*pinned \([0-9.]*\) MiB, mapped \([0-9.]*\) MiB.*/\1 \2/p' "$log")
  committed=$(sed -n 's/^ *control heap *\([0-9.]*\) MiB committed.*/\1/p' "$log")
  [ -n "$sent" ] && [ -n "$pinned" ] && [ -n "$committed" ] || fail "cannot read the routed report"
  [ "$sent" -gt 0 ] || fail "$server sent nothing through the interposed calls"
  awk -v s="$sent" -v d="$dp" -v p="$pinned" -v m="$mapped" -v c="$committed" \
    -v min="$min_share" -v max="$max_pinned" 'BEGIN {
    share = 100 * d / s; heap = c + m; split(max, f, "/")
    printf "routed run: %.1f%% of %d sent bytes from dataplane memory; dataplane pinned %.1f MiB of a %.1f MiB heap (%.1f MiB control committed + %.1f MiB dataplane mapped), %.0f%%\n", share, s, p, heap, c, m, 100 * p / heap
    exit !(share >= min && p * f[2] <= f[1] * heap) }' ||
    fail "routed run below ${min_share}% dataplane share, or pinned over $max_pinned of the heap"
  echo "ok: profile-guided $server"
}
