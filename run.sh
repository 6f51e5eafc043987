#!/usr/bin/env bash
# nicmalloc's two entry points (see README.md):
#   ./run.sh demo   the main job: build, then run memcached under the library with a memcslap load
#   ./run.sh test   build, then run the whole test suite under ctest
set -euo pipefail
cd "$(dirname "$0")"
build=${NICMALLOC_BUILD_DIR:-build}

scripts/install-deps.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --parallel "$(nproc)"

case "${1:-}" in
  demo) exec scripts/demo-memcached.sh "$build" ;;
  test) cd "$build" && exec ctest --output-on-failure --timeout 600 -j "$(nproc)" ;;
  *) echo "usage: ./run.sh demo|test" >&2; exit 2 ;;
esac
