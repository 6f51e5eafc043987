#!/bin/sh
# README.md's settings table must be the one generated from alloc/base/settings_table.h.
#   settings_readme.sh TOOL README [--write]
# TOOL is nicmalloc-settings; --write puts the generated table into README instead of comparing.
set -eu
tool=$1 readme=$2 mode=${3:-}
begin='<!-- settings table: generated from alloc/base/settings_table.h, do not edit -->'
end='<!-- end of settings table -->'
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nic_settings_readme.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$tool" --markdown >"$tmp/generated"
if ! grep -qxF "$begin" "$readme" || ! grep -qxF "$end" "$readme"; then
  echo "$readme has no settings table between the lines" >&2
  echo "  $begin" >&2
  echo "  $end" >&2
  exit 1
fi
# The README as it should be: its text with the generated table between the markers.
awk -v begin="$begin" -v end="$end" -v table="$tmp/generated" '
  $0 == begin { print; while ((getline line < table) > 0) print line; skip = 1; next }
  $0 == end { skip = 0 }
  !skip { print }' "$readme" >"$tmp/expected"
if [ "$mode" = --write ]; then
  cp "$tmp/expected" "$readme"
  exit 0
fi
if ! diff -u "$readme" "$tmp/expected" >"$tmp/diff"; then
  cat "$tmp/diff"
  echo "README.md's settings table differs from settings_table.h (above: - README, + generated)."
  echo "Regenerate it with: $0 $tool $readme --write"
  exit 1
fi
echo "README.md's settings table matches settings_table.h"
