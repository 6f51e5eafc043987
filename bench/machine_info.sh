#!/usr/bin/env bash
# Prints what a benchmark report must state about the machine: cores, memory, kernel, page kinds,
# the allocators' versions and which nicmalloc was measured. Usage: machine_info.sh REPO_ROOT
root=${1:?usage: machine_info.sh REPO_ROOT}
echo "date: $(date -u +%FT%TZ)"
echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "kernel: $(uname -r)"
echo "thp: enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag)"
for d in /sys/kernel/mm/hugepages/hugepages-*; do
  echo "hugetlb ${d##*-}: nr $(cat "$d"/nr_hugepages), free $(cat "$d"/free_hugepages)"
done
echo "glibc: $(ldd --version | head -1 | awk '{print $NF}')"
for p in libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 memcached redis-server valgrind; do
  echo "$p: $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo absent)"
done
# Read-only git (no optional index refresh): which nicmalloc was measured. The build directory
# (NICMALLOC_BUILD_DIR) may come from another tree than the scripts: its CMake cache names it.
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null)
src=${src:-$root}
rev=$(GIT_OPTIONAL_LOCKS=0 git -C "$src" rev-parse --short HEAD 2>/dev/null || echo ?)
GIT_OPTIONAL_LOCKS=0 git -C "$src" diff --quiet HEAD -- alloc include regcache safety 2>/dev/null ||
  rev="$rev + uncommitted changes"
echo "nicmalloc: $rev (source $src, build $build)"
