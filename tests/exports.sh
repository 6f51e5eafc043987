#!/bin/sh
# The export maps are the one list of what each library exports (alloc/base/export.h). For each
#   --lib LIBRARY --map MAP --objects OBJECT...
# group, fails when the library exports a name the map does not list, when the map lists a name
# the library does not export, or when an object marks a definition NIC_EXPORT (default
# visibility) that the map leaves out, which the version script would hide without a word.
set -u
failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nic-exports-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAIL: $*"
  failed=1
}

check() { # lib map objects...
  lib=$1 map=$2
  shift 2
  [ -r "$lib" ] || { fail "$lib: not found"; return; }
  [ -r "$map" ] || { fail "$map: not found"; return; }
  name=$(basename "$lib")
  nm -D --defined-only "$lib" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u \
    >"$tmp/exported"
  # The names between "global:" and "local:", comments taken out.
  sed -e 's|/\*.*\*/||g' "$map" | tr -s ' \t;' '\n' |
    awk '/^global:$/ { on = 1; next } /^local:$/ { on = 0 } on && /^[A-Za-z_][A-Za-z_0-9]*$/' |
    sort >"$tmp/listed"
  sort -u "$tmp/listed" | cmp -s - "$tmp/listed" ||
    fail "$map lists a name twice: $(uniq -d "$tmp/listed" | tr '\n' ' ')"
  for obj in "$@"; do
    readelf -sW "$obj" | awk '($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT" &&
                              $7 != "UND" && ($4 == "FUNC" || $4 == "OBJECT") { print $8 }'
  done | sort -u >"$tmp/marked"
  [ -s "$tmp/exported" ] || fail "$name exports nothing (not a shared library?)"
  [ -s "$tmp/marked" ] || fail "no NIC_EXPORT definition found in the objects of $name"
  for n in $(comm -23 "$tmp/exported" "$tmp/listed"); do
    fail "$name exports $n, which $map does not list"
  done
  for n in $(comm -13 "$tmp/exported" "$tmp/listed"); do
    fail "$map lists $n, which $name does not export"
  done
  for n in $(comm -23 "$tmp/marked" "$tmp/listed"); do
    fail "$n is marked NIC_EXPORT but $map does not list it, so $name hides it"
  done
  echo "$name: $(wc -l <"$tmp/exported") exported names, as $(basename "$map") lists them"
}

lib= map= objs=
flush() {
  if [ -n "$lib" ]; then
    # shellcheck disable=SC2086 # object paths carry no spaces (CMake build tree)
    check "$lib" "$map" $objs
  fi
  lib= map= objs=
}
while [ $# -gt 0 ]; do
  case $1 in
  --lib) flush; lib=$2; shift 2 ;;
  --map) map=$2; shift 2 ;;
  --objects) shift ;;
  *) objs="$objs $1"; shift ;;
  esac
done
flush
[ "$failed" = 0 ] && echo "exports: every library exports what its map lists"
exit "$failed"
