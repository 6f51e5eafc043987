#!/usr/bin/env bash
# Installs the Debian 12 packages nicmalloc needs to build, test and demo. Idempotent: when every
# package is present it returns at once without touching apt.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libmimalloc-dev libgtest-dev libbenchmark-dev liburing-dev libunwind-dev
  libibverbs-dev libdpdk-dev iproute2 valgrind time
  libjemalloc2 libtcmalloc-minimal4 python3-matplotlib
  memcached libmemcached-tools redis-server python3 sqlite3 git
  clang-16 llvm-16-dev llvm-16-tools
  libcapnp-dev capnproto libflatbuffers-dev flatbuffers-compiler libprotobuf-dev protobuf-compiler
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "nicmalloc: installing ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
  echo "nicmalloc: packages are missing and this is not root; install them: apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts these services on install; nicmalloc's tests start their own on private ports.
for svc in memcached redis-server; do
  command -v systemctl >/dev/null 2>&1 && systemctl disable --now "$svc" >/dev/null 2>&1 || true
done
