#!/usr/bin/env bash
# The LLVM pass over a real code base: Debian's memcached source, built with clang-16, full LTO
# and the plugin, then checked three ways:
#   1. the site table (NICMALLOC_SITE_TABLE_OUT) lists the slab allocation with its path to
#      sendmsg;
#   2. under a memcslap load, the share of bytes memcached sends from dataplane memory
#      (nicmalloc's report at exit);
#   3. memcached's own test suite (`make test`), unless --no-tests.
# The source is fetched with `apt-get source` through a private deb-src list in the work
# directory (the system's apt configuration is left alone) and never committed.
#
#   llvm-pass/eval/memcached.sh [--no-tests] [work_dir]      (default work dir: build/eval)
# Needs the project built (build/ or NICMALLOC_BUILD_DIR); installs what it needs when missing
# (root): libevent-dev, lld-16, libclang-rt-16-dev (memcached-debug uses gcov), memcslap.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=$(realpath "${NICMALLOC_BUILD_DIR:-build}")
tests=1
if [ "${1:-}" = --no-tests ]; then
  tests=0
  shift
fi
work=$(realpath -m "${1:-$build/eval}")
plugin=$build/llvm-pass/NicDataplaneSites.so
lib=$build/alloc
say() { echo "memcached-eval: $*"; }
[ -f "$plugin" ] && [ -f "$lib/libnicmalloc.so" ] || {
  say "build the project first (missing $plugin or $lib/libnicmalloc.so)" >&2
  exit 2
}

missing=()
for p in libevent-dev lld-16 libclang-rt-16-dev libmemcached-tools dpkg-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
fi

mkdir -p "$work/apt/lists/partial" "$work/src"
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
echo "deb-src http://deb.debian.org/debian $codename main" >"$work/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$work/apt/lists" -o APT::Sandbox::User=root)
if ! ls "$work"/src/memcached-*/configure >/dev/null 2>&1; then
  say "fetching Debian's memcached source"
  apt-get "${apt_opts[@]}" update -qq
  (cd "$work/src" && apt-get "${apt_opts[@]}" source -qq memcached >/dev/null)
fi
src=$(ls -d "$work"/src/memcached-*/ | head -1)
say "source: $src"

# Per unit the flows are invisible (slabs.c allocates, memcached.c sends): full LTO, with the
# plugin both in the compiler and in the linker. The merged module needs more solver work than
# one unit.
export NICMALLOC_ANALYSIS_BUDGET=${NICMALLOC_ANALYSIS_BUDGET:-400000000}
cd "$src"
# configure's link tests run the plugin too: they must not write into the site table.
if [ ! -f Makefile ]; then
  env -u NICMALLOC_SITE_TABLE_OUT ./configure -q CC=/usr/lib/llvm-16/bin/clang \
    CFLAGS="-O2 -g -flto -fpass-plugin=$plugin -I$root/include" \
    LDFLAGS="-fuse-ld=lld -flto -Wl,--load-pass-plugin=$plugin -L$lib -Wl,-rpath,$lib" \
    LIBS="-lnicmalloc"
fi
say "building (each of the two binaries spends about a minute in the link-time analysis)"
start=$(date +%s)
make -s clean >/dev/null 2>&1 || true
export NICMALLOC_SITE_TABLE_OUT=$work/memcached.sites.jsonl
rm -f "$NICMALLOC_SITE_TABLE_OUT" "$work/others.sites.jsonl"
# memcached first, alone, so that its site table holds one link; then the rest (memcached-debug,
# timedrun, testapp: make test runs them) with a table of their own.
make -s -j"$(nproc)" memcached >"$work/build.log" 2>&1 &&
  NICMALLOC_SITE_TABLE_OUT=$work/others.sites.jsonl make -s -j"$(nproc)" all >>"$work/build.log" 2>&1 || {
  tail -20 "$work/build.log" >&2
  exit 1
}
say "built in $(($(date +%s) - start)) s"

# 1. The site table: the merged module's line, and the slab pages among its sites.
/usr/bin/python3 - "$NICMALLOC_SITE_TABLE_OUT" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
link = [l for l in lines if l["module"] == "ld-temp.o"]
if len(link) != 1:
    sys.exit(f"memcached-eval: {len(link)} link-time site tables, expected one")
sites = link[0]["sites"]
print(f"memcached-eval: {len(sites)} sites rewritten at link time "
      f"({sum(len(l['sites']) for l in lines if l is not link[0])} per unit)")
for s in sites:
    print(f"  {s['file']}:{s['line']} {s['function']}: {s['callee']} -> {s['sink']}")
slab = [s for s in sites if s["file"].endswith("slabs.c") and s["function"] == "do_slabs_newslab"]
if not slab:
    sys.exit("memcached-eval: the slab page allocation (do_slabs_newslab) was not rewritten")
print("memcached-eval: slab pages: " + " <- ".join(reversed(slab[0]["path"])))
EOF

# 2. A load: sets, then gets; nicmalloc reports where the bytes sent came from.
port=$((20000 + RANDOM % 20000))
NICMALLOC_STATS=1 NICMALLOC_CHUNK_SIZE=64M ./memcached -U 0 -l 127.0.0.1 -p "$port" -m 256 \
  -u root 2>"$work/report.txt" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
timeout 120 memcslap --servers="127.0.0.1:$port" --concurrency=4 --execute-number=20000 \
  --flush >"$work/slap-set.txt" 2>&1
timeout 120 memcslap --servers="127.0.0.1:$port" --concurrency=4 --execute-number=20000 \
  --test=get >"$work/slap-get.txt" 2>&1
kill -TERM $server
wait $server || true
trap - EXIT
sent=$(grep -E '^  sent ' "$work/report.txt" || true)
[ -n "$sent" ] || {
  say "no report from the server" >&2
  exit 1
}
say "under memcslap: sent $(echo "$sent" | sed 's/^ *sent *//')"
grep -E '^  (dataplane|control heap) ' "$work/report.txt" | sed 's/^ */memcached-eval:   /'
/usr/bin/python3 - "$sent" <<'EOF'
import re, sys
m = re.search(r"(\d+) bytes, (\d+) from dataplane", sys.argv[1])
total, dp = int(m.group(1)), int(m.group(2))
if total == 0 or dp / total < 0.95:
    sys.exit(f"memcached-eval: only {dp}/{total} bytes sent from dataplane memory (< 95%)")
EOF

# 3. memcached's own tests, on binaries built the same way.
if [ "$tests" = 1 ]; then
  say "running memcached's test suite (make test)"
  if NICMALLOC_CHUNK_SIZE=32M make test PARALLEL="$(nproc)" >"$work/test.log" 2>&1; then
    say "make test: $(grep -E '^Result:|^All tests' "$work/test.log" | tail -1)"
  else
    grep -E 'Failed|not ok|Result' "$work/test.log" | tail -20 >&2
    say "make test failed (log: $work/test.log)" >&2
    exit 1
  fi
fi
say "ok"
