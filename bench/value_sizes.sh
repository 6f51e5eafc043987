# shellcheck shell=bash
# The value-size table of the mr-miss, frag and pin-step runs (the Facebook memcached pools,
# bench/value_sizes.h reads it), for the scripts that need it. Sourced, not run:
#   . bench/value_sizes.sh; value_sizes ROOT WHO
# sets sizes to FRAG_SIZES when given, else to shared/workloads/fb-memcache-value-sizes.csv in
# the project's shared folder, checked out beside the repository (ROOT/../shared). The table is
# not copied into the repository: a clone alone (no shared folder beside it) has none, and the
# caller exits 77 with a SKIPPED line, which the ctest tests take as a skip. A FRAG_SIZES that
# cannot be read, or a shared folder without the table, is an error (exit 1).
value_sizes() {
  local root=$1 who=$2 shared
  shared=$(cd "$root/.." && pwd)/shared
  if [ -n "${FRAG_SIZES:-}" ]; then
    sizes=$FRAG_SIZES
    [ -r "$sizes" ] || { echo "$who: FRAG_SIZES=$sizes cannot be read" >&2; exit 1; }
    return 0
  fi
  sizes=$shared/workloads/fb-memcache-value-sizes.csv
  if [ ! -e "$shared" ]; then
    echo "$who: SKIPPED: no value-size table: the project's shared folder ($shared) is not" \
      "beside the repository; FRAG_SIZES=<a value-size CSV> runs it with one" >&2
    exit 77
  fi
  [ -r "$sizes" ] || {
    echo "$who: value-size table $sizes not found in the shared folder (or set FRAG_SIZES)" >&2
    exit 1
  }
}
