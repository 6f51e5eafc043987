#!/usr/bin/env bash
# The installed package under install directories other than the defaults: the project is
# configured again, with CMAKE_INSTALL_INCLUDEDIR=inc/nm, in a scratch directory inside
# BUILD_DIR, installed, and a consumer built against it both ways. Usage:
#   check_install_dirs.sh BUILD_DIR SOURCE_DIR
# The install directories change no object, so the libraries BUILD_DIR built are put where the
# scratch build's would be instead of building them again.
set -euo pipefail
build=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "$build/install-dirs-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
cached() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }

prefix=$work/prefix
cmake -S "$src" -B "$work/b" -G "$(cached CMAKE_GENERATOR)" \
  -DCMAKE_BUILD_TYPE="$(cached CMAKE_BUILD_TYPE)" -DNICMALLOC_BUILD_TESTS=OFF \
  -DNICMALLOC_BUILD_BENCH=OFF -DNICMALLOC_BUILD_LLVM_PASS=OFF -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_INCLUDEDIR=inc/nm >/dev/null
mkdir -p "$work/b/alloc"
cp -P "$build"/alloc/libnicmalloc*.so* "$work/b/alloc/"
cmake --install "$work/b" >/dev/null
[ -f "$prefix/inc/nm/nicmalloc.h" ] || { echo "FAIL: nicmalloc.h not in inc/nm"; exit 1; }
libdir=$(dirname "$(find "$prefix" -name 'libnicmalloc.so' | head -1)")
export NICMALLOC_CHUNK_SIZE=64M LD_LIBRARY_PATH=$libdir

{ cmake -S "$here/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" &&
  cmake --build "$work/cmake-build"; } >"$work/consumer.log" 2>&1 ||
  { echo "FAIL: find_package consumer:"; grep -i -m1 -A1 error "$work/consumer.log"; exit 1; }
"$work/cmake-build/consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: find_package consumer"; exit 1; }

export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -o "$work/pc-consumer" "$here/consumer/main.c" $(pkg-config --cflags --libs nicmalloc) ||
  { echo "FAIL: pkg-config consumer does not build"; exit 1; }
"$work/pc-consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: pkg-config consumer"; exit 1; }
echo "install dirs: consumers built against inc/nm both ways"
