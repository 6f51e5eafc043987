# shellcheck shell=bash
# Sourced by the scripts that interleave what they compare (allocators, page kinds, backends,
# steps) within each repetition: the order rotates from one repetition to the next, so that no
# one of them always runs first (a cold machine, a warm cache) or right after the same other one.
#   mapfile -t order < <(rotated REP ITEM...)
# prints the items one per line, starting from item number (REP - 1) modulo their count.
rotated() {
  local rep=$1 i k
  shift
  for ((i = 0; i < $#; i++)); do
    k=$(((i + rep - 1) % $# + 1))
    printf '%s\n' "${!k}"
  done
}
