#!/bin/bash
# The statistics field list reaches its readers: README.md's table is the one the list makes
# (regenerate it with: stats_fields table, between the two markers), and NICMALLOC_STATS=json
# prints at exit one JSON object that parses and has every field of the list, and nothing else
# but "version": on stderr, and with NICMALLOC_STATS_FILE in that file, stderr left empty.
# Usage: stats_fields.sh STATS_FIELDS_PROGRAM README.md
set -euo pipefail
prog=$1 readme=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nic_stats_fields.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$prog" table >"$tmp/table"
sed -n '/^<!-- stats fields: begin/,/^<!-- stats fields: end/p' "$readme" | sed '1d;$d' >"$tmp/readme"
[ -s "$tmp/readme" ] || fail "README.md has no '<!-- stats fields: begin' ... 'end' block"
diff -u "$tmp/readme" "$tmp/table" || fail "README.md's statistics table is not the field list's"
echo "ok: README.md lists the $(($(wc -l <"$tmp/table") - 2)) fields of the list"

# check_json NAMES REPORT WHERE: REPORT holds one JSON object with every name, as WHERE says.
check_json() {
  python3 - "$@" <<'PY'
import json, sys
names = open(sys.argv[1]).read().split()
where = sys.argv[3]
lines = [l for l in open(sys.argv[2]) if l.startswith("{")]
if len(lines) != 1:
    sys.exit("FAIL: expected one JSON line %s at exit, got %d:\n%s" % (where, len(lines), open(sys.argv[2]).read()))
obj = json.loads(lines[0])
missing = [n for n in names if n not in obj]
extra = sorted(set(obj) - set(names) - {"version"})
if missing or extra or obj.get("version") != 8:
    sys.exit("FAIL: missing %s, extra %s, version %r" % (missing, extra, obj.get("version")))
for n in names:
    if n in ("backend", "page_kind"):
        ok = isinstance(obj[n], str) and obj[n]
    else:
        ok = isinstance(obj[n], int) and obj[n] >= 0
    if not ok:
        sys.exit("FAIL: %s = %r" % (n, obj[n]))
print("ok: NICMALLOC_STATS=json printed %d fields %s, all parsed" % (len(names), where))
PY
}

NICMALLOC_STATS=json "$prog" names >"$tmp/names" 2>"$tmp/err"
check_json "$tmp/names" "$tmp/err" "on stderr"

NICMALLOC_STATS=json NICMALLOC_STATS_FILE="$tmp/report.%p" "$prog" names >/dev/null 2>"$tmp/err"
[ ! -s "$tmp/err" ] || fail "with NICMALLOC_STATS_FILE, stderr got: $(cat "$tmp/err")"
set -- "$tmp"/report.*
[ $# = 1 ] && [ -f "$1" ] || fail "with NICMALLOC_STATS_FILE, expected one report.PID file, got: $*"
check_json "$tmp/names" "$1" "in NICMALLOC_STATS_FILE"
