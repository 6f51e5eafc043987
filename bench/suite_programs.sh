# Sourced by bench/suite.sh and bench/suite_instructions.sh: the suite's programs, found by glob
# in the build (every bench/suite/<name>.c is built as suite_<name>), so a new one is picked up
# without editing either script; SUITE_ONLY="cfrac barnes" keeps a subset.
#   suite_programs BUILD_DIR   sets SUITE_PROGRAMS (names, in glob order)
suite_programs() {
  SUITE_PROGRAMS=()
  local exe p
  for exe in "$1"/bench/suite/suite_*; do
    [ -x "$exe" ] || continue
    p=${exe##*/suite_}
    if [ -n "${SUITE_ONLY:-}" ] && [[ " $SUITE_ONLY " != *" $p "* ]]; then continue; fi
    SUITE_PROGRAMS+=("$p")
  done
}
