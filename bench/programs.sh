#!/usr/bin/env bash
# Unmodified programs under LD_PRELOAD: a git session, a sqlite3 script and a clang++-16 compile,
# each without nicmalloc ("none"), with nicmalloc's control heap only ("nicmalloc") and with
# NICMALLOC_DP_MIN_SIZE=1024 ("dp1k"), interleaved in rotating order within each repetition.
#   bench/programs.sh [quick|full] [results_dir]
# Inputs are made locally (nothing is fetched): a tree of generated source files and the changes
# of its later commits, a SQL script, and one of this repository's test sources preprocessed with
# its includes. Records wall time, CPU time (user + system of the whole session) and peak RSS
# (GNU time's %e, %U + %S and %M: %M is the session's largest process) in
# results_dir/programs.csv; checks that every run's output is the same as the first "none" run's
# (git: hashes of `git log -p` and of the sorted object listing; sqlite: of the query output and
# the .dump; clang: of the object file) and writes results_dir/programs.md with medians and
# ratios. PROGRAMS_REPS overrides the repetitions (quick 1, full 5), PROGRAMS_ONLY="git sqlite"
# runs a subset, PROGRAMS_KEEP=1 keeps the inputs (their folder is printed).
# Exits non-zero when a run fails or an output differs; never on a timing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NICMALLOC_BUILD_DIR:-build}
[[ $build = /* ]] || build=$root/$build
mode=${1:-quick}
out=${2:-$root/results/$mode}
case $mode in
# git: files, commits after the first, files changed per commit; sqlite: rows; clang: source, flags
quick) reps=1 git_files=200 git_commits=2 git_changed=20 sql_rows=20000 \
  cxx_src=tests/base/test_pool.cc cxx_opt=-O0 ;;
full) reps=5 git_files=3000 git_commits=20 git_changed=150 sql_rows=200000 \
  cxx_src=tests/safety/test_uring_receive.cc cxx_opt=-O2 ;;
*) echo "usage: $0 [quick|full] [results_dir]" >&2 && exit 2 ;;
esac
reps=${PROGRAMS_REPS:-$reps}
programs=(${PROGRAMS_ONLY:-git sqlite clang})
libnic=$build/alloc/libnicmalloc.so
[ -f "$libnic" ] || { echo "programs: no $libnic: build first" >&2; exit 1; }
for p in git sqlite3 clang++-16 /usr/bin/time sha256sum; do
  command -v "$p" >/dev/null || { echo "programs: $p is not installed" >&2; exit 1; }
done
# name|environment of the session (words for env)
modes=("none|" "nicmalloc|LD_PRELOAD=$libnic"
  "dp1k|LD_PRELOAD=$libnic NICMALLOC_DP_MIN_SIZE=1024")

mkdir -p "$out"
csv=$out/programs.csv log=$out/programs.log
work=$(mktemp -d "${TMPDIR:-/tmp}/nic_programs.XXXXXX")
# PROGRAMS_KEEP=1 keeps the inputs and the last run (to profile one session by hand).
if [ "${PROGRAMS_KEEP:-0}" = 1 ]; then
  echo "programs: inputs kept in $work" >&2
else
  trap 'rm -rf "$work"' EXIT
fi
echo "rep,program,mode,seconds,cpu_seconds,max_rss_kib,output_sha256,status" >"$csv"
: >"$log"

# --- inputs (made once, without preload) -------------------------------------------------------

# A tree of $git_files C-like files in 50 directories, then per later commit an overlay of
# $git_changed rewritten files and 10 new ones. Deterministic: the same bytes on every machine.
make_git_input() {
  mkdir -p "$work/git/tree"
  awk -v files="$git_files" -v commits="$git_commits" -v changed="$git_changed" -v dir="$work/git" '
    function body(path, seed, lines,   i, s) {
      s = seed
      printf "/* %s */\n#include <stddef.h>\n", path > path
      for (i = 0; i < lines; i++) {
        s = (s * 1103515245 + 12345) % 2147483648
        printf "static int f%d_%d(int x) { return x * %d + %d; } /* %08x */\n",
          seed, i, s % 97, s % 1009, s > path
      }
      close(path)
    }
    function file(c, k) { return sprintf("d%02d/f%05d.c", k % 50, k) }
    BEGIN {
      for (k = 0; k < 50; k++) system(sprintf("mkdir -p %s/tree/d%02d", dir, k))
      for (k = 0; k < files; k++) body(dir "/tree/" file(0, k), k, 20 + (k * 37) % 180)
      for (c = 1; c <= commits; c++) {
        for (k = 0; k < 50; k++) system(sprintf("mkdir -p %s/change%d/d%02d", dir, c, k))
        for (j = 0; j < changed; j++) {
          k = (c * 7919 + j * 104729) % files
          body(dir "/change" c "/" file(c, k), k + c * 100000, 20 + (k * 37 + c) % 180)
        }
        for (j = 0; j < 10; j++) {
          k = files + c * 10 + j
          body(dir "/change" c "/" file(c, k), k, 30 + j)
        }
      }
    }'
  # The session: every command here runs under the mode's environment (cp and sort too).
  cat >"$work/git/session.sh" <<'EOF'
set -euo pipefail
src=$1 dst=$2 commits=$3
export HOME=$dst GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@example.invalid
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@example.invalid
cp -r "$src/tree" "$dst/repo"
cd "$dst/repo"
git init -q -b main
git config gc.auto 0
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
git add -A
git commit -q -m "initial"
for c in $(seq "$commits"); do
  cp -r "$src/change$c/." .
  export GIT_AUTHOR_DATE="2026-01-01T00:$(printf %02d "$c"):00Z" GIT_COMMITTER_DATE=$GIT_AUTHOR_DATE
  git add -A
  git commit -q -m "change $c"
  git diff --stat HEAD~1 >/dev/null
done
git gc -q
git log -p >"$dst/log.txt"
git rev-list --objects --all | sort >"$dst/objects.txt"
git fsck --no-progress >/dev/null
EOF
}

# $sql_rows single-row INSERTs in one transaction (rows of 20 B to 3 KiB: some over 1 KiB), two
# indexes, updates and deletes, VACUUM, then the dump. No syncs: the disk is not what is measured.
make_sqlite_input() {
  mkdir -p "$work/sqlite"
  awk -v rows="$sql_rows" 'BEGIN {
    print "PRAGMA journal_mode=WAL;"
    print "PRAGMA synchronous=OFF;"
    print "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, grp INTEGER, v TEXT);"
    print "BEGIN;"
    s = 42
    for (i = 1; i <= rows; i++) {
      s = (s * 1103515245 + 12345) % 2147483648
      n = (s % 100 < 5) ? 1024 + s % 2048 : 20 + s % 200
      printf "INSERT INTO t VALUES(%d,%c%08x-%d%c,%d,printf(%c%%.%dc%c,%c%c%c));\n",
        i, 39, s, i, 39, s % 997, 39, n, 39, 39, 97 + s % 26, 39
    }
    print "COMMIT;"
    print "CREATE INDEX t_k ON t(k);"
    print "CREATE INDEX t_grp ON t(grp, id);"
    print "UPDATE t SET v = v || v WHERE grp % 7 = 0;"
    print "DELETE FROM t WHERE grp % 5 = 0;"
    print "SELECT grp, count(*), sum(length(v)) FROM t GROUP BY grp ORDER BY 3 DESC LIMIT 5;"
    print "VACUUM;"
  }' >"$work/sqlite/script.sql"
  cat >"$work/sqlite/session.sh" <<'EOF'
set -euo pipefail
src=$1 dst=$2
sqlite3 "$dst/db.sqlite" <"$src/script.sql" >"$dst/query.txt"
sqlite3 "$dst/db.sqlite" .dump >"$dst/dump.sql"
EOF
}

# One of this repository's test sources with its includes (GoogleTest, the C++ library and
# nicmalloc's headers), preprocessed once: the compile is then clang's work alone.
make_clang_input() {
  mkdir -p "$work/clang"
  local inc
  inc=$(cd "$root" && find include alloc regcache safety tests -type d -printf '-I%p ')
  (cd "$root" && clang++-16 -std=c++17 -E $inc "$cxx_src" -o "$work/clang/input.ii")
  cat >"$work/clang/session.sh" <<EOF
set -euo pipefail
src=\$1 dst=\$2
clang++-16 -std=c++17 $cxx_opt -w -c "\$src/input.ii" -o "\$dst/input.o"
EOF
}

# What must be the same whatever the allocator.
output_hash() { # PROGRAM DIR
  case $1 in
  git) cat "$2/log.txt" "$2/objects.txt" | sha256sum ;;
  sqlite) cat "$2/query.txt" "$2/dump.sql" | sha256sum ;;
  clang) sha256sum <"$2/input.o" ;;
  esac | cut -c1-16
}

session_args() { # PROGRAM
  case $1 in
  git) echo "$git_commits" ;;
  *) echo "" ;;
  esac
}

t0=$SECONDS
for p in "${programs[@]}"; do "make_${p}_input"; done
echo "programs: ${programs[*]}; $reps repetitions; inputs: $git_files files + $git_commits" \
  "commits of $git_changed, $sql_rows rows, $cxx_src $cxx_opt ($((SECONDS - t0)) s;" \
  "log in $log)" >&2

# --- runs -------------------------------------------------------------------------------------

declare -A want=()
failed=0
run_one() { # REP PROGRAM MODE_NAME ENV
  local rep=$1 p=$2 name=$3 envw=$4 dst="$work/run" status=ok hash= secs= rss= usr sys cpu=
  rm -rf "$dst" && mkdir -p "$dst"
  # shellcheck disable=SC2086 # the mode's environment is words on purpose
  if /usr/bin/time -f '%e %M %U %S' -o "$work/time.txt" env $envw bash "$work/$p/session.sh" \
    "$work/$p" "$dst" $(session_args "$p") >"$dst/stdout" 2>"$dst/stderr"; then
    read -r secs rss usr sys <"$work/time.txt"
    cpu=$(awk -v u="$usr" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
    hash=$(output_hash "$p" "$dst")
    if [ -z "${want[$p]:-}" ]; then
      want[$p]=$hash
    elif [ "$hash" != "${want[$p]}" ]; then
      status=DIFFERENT failed=1
      echo "programs: $p under $name: output $hash differs from ${want[$p]}" >&2
    fi
  else
    status=FAILED failed=1
    echo "programs: $p under $name FAILED (see $log)" >&2
  fi
  {
    echo "== rep $rep $p $name: $status $secs s, $cpu s CPU, $rss KiB"
    tail -5 "$dst/stderr"
  } >>"$log"
  echo "$rep,$p,$name,$secs,$cpu,$rss,$hash,$status" >>"$csv"
}

n=${#modes[@]}
for rep in $(seq "$reps"); do
  for p in "${programs[@]}"; do
    # The first "none" run sets the expected output; later repetitions rotate the order.
    for i in $(seq 0 $((n - 1))); do
      IFS='|' read -r name envw <<<"${modes[$(((i + rep - 1) % n))]}"
      [ "$rep" = 1 ] && IFS='|' read -r name envw <<<"${modes[$i]}"
      run_one "$rep" "$p" "$name" "$envw"
    done
  done
  echo "programs: repetition $rep/$reps done ($((SECONDS - t0)) s)" >&2
done
{
  echo "load: $(uptime)"
  echo
  /usr/bin/python3 "$root/bench/programs_report.py" "$csv"
} | tee "$out/programs.md"
exit "$failed"
