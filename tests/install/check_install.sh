#!/usr/bin/env bash
# Installs the build into a scratch prefix, then builds and runs a consumer twice: through
# find_package(nicmalloc) and through pkg-config. Usage: check_install.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for h in nicmalloc.h nicmalloc_stats_fields.h nicmalloc/stream.h nicmalloc/sg_post.h nicmalloc/capnp.h nicmalloc/flatbuffers.h nicmalloc/protobuf.h; do
  [ -f "$work/prefix/include/$h" ] || { echo "FAIL: $h not installed"; exit 1; }
done
libdir=$(dirname "$(find "$work/prefix" -name 'libnicmalloc.so' | head -1)")
export NICMALLOC_CHUNK_SIZE=64M LD_LIBRARY_PATH=$libdir

cmake -S "$here/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: find_package consumer"; exit 1; }

export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -o "$work/pc-consumer" "$here/consumer/main.c" $(pkg-config --cflags --libs nicmalloc)
"$work/pc-consumer" | grep -qx 'consumer: ok, 1 chunk(s)' || { echo "FAIL: pkg-config consumer"; exit 1; }
# nic_dpdk_attach through the installed header: the plugin beside libnicmalloc.so answers.
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -Werror=implicit-function-declaration -o "$work/dpdk-attach" "$here/consumer/dpdk_attach.c" \
  $(pkg-config --cflags --libs nicmalloc)
want="dpdk_attach: -19, backend none" # ENODEV: no dpdk plugin installed
[ -f "$libdir/libnicmalloc-dpdk.so" ] && want="dpdk_attach: -22, backend none" # EINVAL: no EAL
got=$("$work/dpdk-attach" 2>/dev/null)
[ "$got" = "$want" ] || { echo "FAIL: nic_dpdk_attach consumer: '$got', expected '$want'"; exit 1; }
echo "install: find_package and pkg-config consumers built and ran; nic_dpdk_attach answered"
