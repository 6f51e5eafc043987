#!/usr/bin/env bash
# The installed package under install directories other than the defaults: the project is
# configured again, with CMAKE_INSTALL_INCLUDEDIR=inc/nm and an absolute CMAKE_INSTALL_LIBDIR
# outside the prefix, in a scratch directory inside BUILD_DIR, installed, and a consumer built
# against it both ways; then BUILD_DIR is installed to the prefix /usr (under DESTDIR), whose
# directories pkg-config must recognise as the system's. Usage:
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
libdir=$work/elsewhere/lib64
cmake -S "$src" -B "$work/b" -G "$(cached CMAKE_GENERATOR)" \
  -DCMAKE_BUILD_TYPE="$(cached CMAKE_BUILD_TYPE)" -DNICMALLOC_BUILD_TESTS=OFF \
  -DNICMALLOC_BUILD_BENCH=OFF -DNICMALLOC_BUILD_LLVM_PASS=OFF -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_INCLUDEDIR=inc/nm -DCMAKE_INSTALL_LIBDIR="$libdir" >/dev/null
mkdir -p "$work/b/alloc"
cp -P "$build"/alloc/libnicmalloc*.so* "$work/b/alloc/"
cmake --install "$work/b" >/dev/null
[ -f "$prefix/inc/nm/nicmalloc.h" ] || { echo "FAIL: nicmalloc.h not in inc/nm"; exit 1; }
export NICMALLOC_CHUNK_SIZE=64M LD_LIBRARY_PATH=$libdir

{ cmake -S "$here/consumer" -B "$work/cmake-build" -Dnicmalloc_DIR="$libdir/cmake/nicmalloc" &&
  cmake --build "$work/cmake-build"; } >"$work/consumer.log" 2>&1 ||
  { echo "FAIL: find_package consumer:"; grep -i -m1 -A1 error "$work/consumer.log"; exit 1; }
"$work/cmake-build/consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: find_package consumer"; exit 1; }

export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -o "$work/pc-consumer" "$here/consumer/main.c" $(pkg-config --cflags --libs nicmalloc) ||
  { echo "FAIL: pkg-config consumer does not build"; exit 1; }
"$work/pc-consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: pkg-config consumer"; exit 1; }

DESTDIR=$work/dest cmake --install "$build" --prefix /usr >/dev/null
usr_pc=$(find "$work/dest/usr" -name nicmalloc.pc)
got=$(PKG_CONFIG_PATH=$(dirname "$usr_pc") pkg-config --cflags --libs nicmalloc | xargs)
want="-Wl,--push-state,--no-as-needed -lnicmalloc -Wl,--pop-state"
[ "$got" = "$want" ] || { echo "FAIL: pkg-config under /usr: '$got', expected '$want'"; exit 1; }
echo "install dirs: consumers built against inc/nm and an absolute libdir both ways; /usr's are the system's"
