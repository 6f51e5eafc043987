#!/usr/bin/env bash
# The backend plugins are found in the directory of libnicmalloc.so's real file, whatever path
# the loader took to it, though the program changes its directory before the backend opens
# (plugin_dir_probe.c): a relative LD_LIBRARY_PATH, a relative LD_PRELOAD, a symbolic link in a
# directory without the plugins. A copy of the library with no plugin beside it names the
# plugin it could not load. A plugin of another version's backend layout beside it is not
# opened, and said why. Usage: plugin_dir.sh PROBE LIBDIR OLD_PLUGIN (LIBDIR: where
# libnicmalloc.so.0 and libnicmalloc-dpdk.so were built; OLD_PLUGIN: tests/regcache/old_plugin.c).
set -uo pipefail
probe=$1
libdir=$2
old_plugin=$3
work=$(mktemp -d "$(dirname "$libdir")/plugin-dir-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
export NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_VDEV=net_null0 NICMALLOC_CHUNK_SIZE=64M
failed=0
expect() { # WHAT WANT GOT
  if [ "$3" = "$2" ]; then echo "ok: $1"; else
    echo "FAIL: $1: '$3', expected '$2'"
    failed=1
  fi
}

got=$(LD_LIBRARY_PATH=$libdir "$probe" 2>"$work/err")
expect "absolute LD_LIBRARY_PATH" "dpdk endpoint: made" "$got"
parent=$(dirname "$libdir")
lib=$(basename "$libdir")
got=$(cd "$parent" && LD_LIBRARY_PATH=$lib "$probe" 2>"$work/err")
expect "relative LD_LIBRARY_PATH" "dpdk endpoint: made" "$got"
got=$(cd "$parent" && LD_PRELOAD=$lib/libnicmalloc.so.0 "$probe" 2>"$work/err")
expect "relative LD_PRELOAD" "dpdk endpoint: made" "$got"
mkdir "$work/link"
ln -s "$libdir/libnicmalloc.so.0" "$work/link/libnicmalloc.so.0"
got=$(LD_LIBRARY_PATH=$work/link "$probe" 2>"$work/err")
expect "symbolic link elsewhere" "dpdk endpoint: made" "$got"

mkdir "$work/lonely"
cp "$libdir/libnicmalloc.so.0" "$work/lonely/"
got=$(LD_LIBRARY_PATH=$work/lonely "$probe" 2>"$work/err")
expect "a copy without plugins" "dpdk endpoint: none" "$got"
if grep -q "$work/lonely/libnicmalloc-dpdk.so" "$work/err"; then
  echo "ok: the warning names the plugin it could not load"
else
  echo "FAIL: no message names $work/lonely/libnicmalloc-dpdk.so:"
  cat "$work/err"
  failed=1
fi

mkdir "$work/old"
cp "$libdir/libnicmalloc.so.0" "$old_plugin" "$work/old/"
got=$(LD_LIBRARY_PATH=$work/old "$probe" 2>"$work/err")
expect "a plugin of another version beside it" "dpdk endpoint: none" "$got"
if grep -q "built for another version of nicmalloc" "$work/err" && ! grep -q "old plugin opened" "$work/err"; then
  echo "ok: the plugin of another version is not opened, and the warning says why"
else
  echo "FAIL: the plugin of another version was opened, or no message says why:"
  cat "$work/err"
  failed=1
fi
exit $failed
