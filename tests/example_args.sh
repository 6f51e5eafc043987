#!/usr/bin/env bash
# Runs an example with command lines it must refuse or judge, and checks how each ends.
#   example_args.sh PROGRAM 'STATUS ARGS...' ...
# STATUS 2: refused, with a usage line; 1: the check ran and said FAILED; 0: it ran and passed.
# Read loosely, a word after the first flag became a count of 0 and a check over nothing
# passed, so a run that should show the check can fail did not.
set -u
prog=$1
shift
name=$(basename "$prog")
bad=0
for run in "$@"; do
  read -r want args <<<"$run"
  # shellcheck disable=SC2086 # the arguments are split at spaces
  out=$("$prog" $args 2>&1)
  got=$?
  said=ok
  case $want in
  2) grep -q '^usage: ' <<<"$out" || said="refused without its usage line" ;;
  1) grep -q 'check FAILED' <<<"$out" || said="failed without saying the check FAILED" ;;
  esac
  if [ "$got" != "$want" ] || [ "$said" != ok ]; then
    echo "FAIL: $name $args: exit $got, expected $want$([ "$said" = ok ] || echo "; $said")"
    tail -n 3 <<<"$out" | sed 's/^/  /'
    bad=1
  else
    echo "ok: $name $args: exit $got"
  fi
done
exit $bad
