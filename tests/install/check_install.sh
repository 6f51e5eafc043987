#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs consumers both ways: through
# find_package(nicmalloc) and through pkg-config. Usage: check_install.sh BUILD_DIR
# Everything it makes lies in a scratch directory inside BUILD_DIR, removed at the end.
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "$build/install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A program that names nothing of libnicmalloc's (it allocates through the C library alone) still
# needs libnicmalloc, and its malloc is nicmalloc's: gcc's default --as-needed must not have
# dropped the library.
owner_is_nicmalloc() { # PROGRAM HOW
  readelf -d "$1" | grep -q 'NEEDED.*\[libnicmalloc\.so\.0\]' ||
    { echo "FAIL: $2: libnicmalloc.so.0 is not among the program's NEEDED entries"; exit 1; }
  local got
  got=$("$1")
  [ "$got" = "malloc: libnicmalloc.so.0" ] || { echo "FAIL: $2: '$got'"; exit 1; }
}
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for h in nicmalloc.h nicmalloc_stats_fields.h nicmalloc/stream.h nicmalloc/sg_post.h nicmalloc/capnp.h nicmalloc/flatbuffers.h nicmalloc/protobuf.h; do
  [ -f "$work/prefix/include/$h" ] || { echo "FAIL: $h not installed"; exit 1; }
done
libdir=$(dirname "$(find "$work/prefix" -name 'libnicmalloc.so' | head -1)")
export NICMALLOC_CHUNK_SIZE=64M LD_LIBRARY_PATH=$libdir

# As a user without mimalloc's CMake package (libmimalloc-dev): the package needs none.
cmake -S "$here/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_DISABLE_FIND_PACKAGE_mimalloc=ON --no-warn-unused-cli >/dev/null ||
  { echo "FAIL: find_package(nicmalloc) without mimalloc's CMake package"; exit 1; }
cmake --build "$work/cmake-build" >/dev/null
# libmimalloc.so exports a malloc of its own: only libnicmalloc may bring it in.
if readelf -d "$work/cmake-build/consumer" | grep -q 'NEEDED.*mimalloc'; then
  echo "FAIL: find_package consumer links libmimalloc itself"
  exit 1
fi
"$work/cmake-build/consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: find_package consumer"; exit 1; }
owner_is_nicmalloc "$work/cmake-build/malloc_owner" "find_package, malloc alone"

export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -o "$work/pc-consumer" "$here/consumer/main.c" $(pkg-config --cflags --libs nicmalloc)
"$work/pc-consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: pkg-config consumer"; exit 1; }
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -o "$work/pc-owner" "$here/consumer/malloc_owner.c" $(pkg-config --cflags --libs nicmalloc)
owner_is_nicmalloc "$work/pc-owner" "pkg-config, malloc alone"
# nic_dpdk_attach through the installed header: the plugin beside libnicmalloc.so answers.
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -Werror=implicit-function-declaration -o "$work/dpdk-attach" "$here/consumer/dpdk_attach.c" \
  $(pkg-config --cflags --libs nicmalloc)
want="dpdk_attach: -19, backend none" # ENODEV: no dpdk plugin installed
[ -f "$libdir/libnicmalloc-dpdk.so" ] && want="dpdk_attach: -22, backend none" # EINVAL: no EAL
got=$("$work/dpdk-attach" 2>/dev/null)
[ "$got" = "$want" ] || { echo "FAIL: nic_dpdk_attach consumer: '$got', expected '$want'"; exit 1; }

# The LLVM pass, where the README says, working from there.
if grep -q '^NICMALLOC_BUILD_LLVM_PASS:BOOL=ON' "$build/CMakeCache.txt"; then
  pass=$work/prefix/lib/nicmalloc/NicDataplaneSites.so
  [ -f "$pass" ] || { echo "FAIL: the LLVM pass is not installed as $pass"; exit 1; }
  clang=$(sed -n 's/^NIC_CLANG_16:FILEPATH=//p' "$build/CMakeCache.txt")
  "${clang:-clang-16}" -O1 -fpass-plugin="$pass" -c -o "$work/send_site.o" "$here/consumer/send_site.c"
  nm "$work/send_site.o" | grep -q ' U nic_malloc_site$' ||
    { echo "FAIL: the installed LLVM pass rewrote no allocation site"; exit 1; }
fi

# The build tree as the package, uninstalled: nicmalloc_DIR=BUILD_DIR, and PKG_CONFIG_PATH=
# BUILD_DIR, where pkg-config takes nicmalloc-uninstalled.pc.
export LD_LIBRARY_PATH=$build/alloc PKG_CONFIG_PATH=$build
{ cmake -S "$here/consumer" -B "$work/tree-build" -Dnicmalloc_DIR="$build" &&
  cmake --build "$work/tree-build"; } >"$work/tree-build.log" 2>&1 ||
  { echo "FAIL: find_package from the build tree:"; grep -i -m1 -A1 error "$work/tree-build.log"; exit 1; }
"$work/tree-build/consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: build tree's find_package consumer"; exit 1; }
owner_is_nicmalloc "$work/tree-build/malloc_owner" "find_package from the build tree"
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -o "$work/tree-pc-consumer" "$here/consumer/main.c" $(pkg-config --cflags --libs nicmalloc) ||
  { echo "FAIL: pkg-config from the build tree"; exit 1; }
"$work/tree-pc-consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: build tree's pkg-config consumer"; exit 1; }
echo "install: find_package and pkg-config consumers built and ran, installed and from the build tree; nic_dpdk_attach answered"
