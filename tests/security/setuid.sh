#!/usr/bin/env bash
# A setuid-root program linked with -lnicmalloc, run by an unprivileged user this test creates,
# with NICMALLOC_* settings an attacker would pass: none of them may name a file, a plugin or an
# argument for the root process. Each attack is first run without the setuid bit (root runs the
# probe itself, no secure execution) to show that it would work, so the checks can fail.
#   setuid.sh <directory of libnicmalloc.so> <source directory> <C compiler>
set -u
libdir=$1 src=$2 cc=${3:-cc}
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAIL: $*"
  failed=1
}
failed=0

[ "$(id -u)" = 0 ] || skip "needs root to make a setuid-root program and a user"
command -v useradd >/dev/null && command -v setpriv >/dev/null || skip "useradd or setpriv missing"

user=nicsec$$
work=$(mktemp -d /tmp/nicmalloc-setuid.XXXXXX)
cleanup() {
  userdel -r "$user" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
# A home outside /tmp: EAL refuses plugins under a world-writable folder, a user's home is not.
useradd -m -r -s /usr/sbin/nologin "$user" || skip "useradd $user failed"
uid=$(id -u "$user") gid=$(id -g "$user")
home=$(getent passwd "$user" | cut -d: -f6)
[ -d "$home" ] || skip "useradd made no home for $user"

# Everything the unprivileged user runs must be reachable by them: copies under one 0755 folder.
chmod 755 "$work"
bin=$work/bin secret=$work/secret
mkdir -p "$bin" "$secret"
chmod 755 "$bin"
chmod 700 "$secret"
cp -P "$libdir"/libnicmalloc*.so* "$bin"/
"$cc" -o "$bin/probe" "$src/tests/security/setuid_probe.c" -I"$src/include" -L"$bin" \
  -lnicmalloc -lmimalloc -Wl,-rpath,"$bin" || skip "cannot build the probe"
"$cc" -shared -fPIC -o "$home/evil.so" "$src/tests/security/evil_plugin.c" ||
  skip "cannot build the plugin"
chown "$user:" "$home/evil.so"
# Root's site table, whose strings a duplicate id would echo (two modules: a module's earlier
# lines are replaced by its last).
for i in 1 2; do
  echo '{"module":"m'$i'","sites":[{"file":"SECRET-7f3a9.c","function":"f","id":5,"line":'$i'}]}'
done >"$secret/file"
chmod 600 "$secret/file"

probe_args=() # what the probe is asked to do beyond allocating and registering
as_root() { env -i PATH=/usr/bin:/bin "$@" "$bin/probe" "${probe_args[@]}" 2>&1; }
as_user() {
  setpriv --reuid="$uid" --regid="$gid" --clear-groups env -i PATH=/usr/bin:/bin "$@" \
    "$bin/probe" "${probe_args[@]}" 2>&1
}

chmod 4755 "$bin/probe"
out=$(as_user)
case "$out" in
*"euid 0 uid $uid"*) ;;
*) skip "the setuid bit does not take effect here (nosuid mount or no_new_privs): $out" ;;
esac
echo "setuid probe runs with euid 0 for uid $uid"

setuid_on() { chmod 4755 "$bin/probe"; }
setuid_off() { chmod 0755 "$bin/probe"; }

# 1. NICMALLOC_PROFILE creates (and would overwrite) a file in a root-only folder.
setuid_off
rm -f "$secret/profile"
as_root NICMALLOC_PROFILE="$secret/profile" >/dev/null
[ -e "$secret/profile" ] || fail "control: the probe wrote no profile without setuid"
rm -f "$secret/profile"
setuid_on
out=$(as_user NICMALLOC_PROFILE="$secret/profile")
[ -e "$secret/profile" ] && fail "NICMALLOC_PROFILE created $secret/profile as root: $out"
case "$out" in
*"secure execution"*NICMALLOC_PROFILE*) ;;
*) fail "no line saying NICMALLOC_PROFILE was ignored: $out" ;;
esac
[ "$(printf '%s\n' "$out" | grep -c nicmalloc)" = 1 ] || fail "more than one line: $out"
echo "NICMALLOC_PROFILE: ignored"

# 2. NICMALLOC_SITE_TABLE echoes strings of a root-only file in a warning.
setuid_off
out=$(as_root NICMALLOC_SITES_OFF=nosuchsite NICMALLOC_SITE_TABLE="$secret/file")
case "$out" in
*SECRET-7f3a9*) ;;
*) fail "control: without setuid the site table's text is not echoed: $out" ;;
esac
setuid_on
out=$(as_user NICMALLOC_SITES_OFF=nosuchsite NICMALLOC_SITE_TABLE="$secret/file")
case "$out" in
*SECRET-7f3a9*) fail "NICMALLOC_SITE_TABLE read a root-only file back: $out" ;;
esac
echo "NICMALLOC_SITE_TABLE: ignored"

# 3. NICMALLOC_SITES tells whether a root-only file exists.
setuid_off
a=$(as_root NICMALLOC_SITES="$secret/file" | sed "s#$secret/file#PATH#g")
b=$(as_root NICMALLOC_SITES="$secret/none" | sed "s#$secret/none#PATH#g")
[ "$a" != "$b" ] || fail "control: without setuid an existing and a missing file answer alike: $a"
setuid_on
a=$(as_user NICMALLOC_SITES="$secret/file" | sed "s#$secret/file#PATH#g")
b=$(as_user NICMALLOC_SITES="$secret/none" | sed "s#$secret/none#PATH#g")
[ "$a" = "$b" ] || fail "NICMALLOC_SITES tells an existing root-only file from a missing one:
  existing: $a
  missing:  $b"
echo "NICMALLOC_SITES: no answer differs"

# 4. NICMALLOC_DPDK_EAL_ARGS makes the root process load the user's library.
if ls "$bin"/libnicmalloc-dpdk.so >/dev/null 2>&1; then
  eal="--no-huge -m 64 --no-pci --no-shconf --no-telemetry -d $home/evil.so"
  setuid_off
  rm -f "$home/mark"
  as_root EVIL_MARK="$home/mark" NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_EAL_ARGS="$eal" >/dev/null
  [ -e "$home/mark" ] || fail "control: EAL did not load the plugin without setuid"
  rm -f "$home/mark"
  setuid_on
  out=$(as_user EVIL_MARK="$home/mark" NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_EAL_ARGS="$eal")
  [ -e "$home/mark" ] && fail "the user's plugin ran in the root process ($(cat "$home/mark")): $out"
  echo "NICMALLOC_DPDK_EAL_ARGS: ignored"
else
  echo "SKIP part: the dpdk plugin is not built here, NICMALLOC_DPDK_EAL_ARGS not tried"
fi

# 5. DPDK's EAL, opened by the program's code, makes its runtime directory (even with
# --no-shconf) under RUNTIME_DIRECTORY, or XDG_RUNTIME_DIR when the real uid is not root.
if ls "$bin"/libnicmalloc-dpdk.so >/dev/null 2>&1; then
  mkdir -p "$secret/rt"
  probe_args=(dpdk)
  setuid_off
  as_root RUNTIME_DIRECTORY="$secret/rt" >/dev/null
  [ -d "$secret/rt/dpdk" ] || fail "control: EAL made no directory under RUNTIME_DIRECTORY without setuid"
  rm -rf "$secret/rt/dpdk"
  setuid_on
  for var in RUNTIME_DIRECTORY XDG_RUNTIME_DIR; do
    out=$(as_user "$var=$secret/rt")
    case "$out" in
    *"probe ok"*) ;;
    *) fail "the probe did not finish with $var set: $out" ;;
    esac
    [ -e "$secret/rt/dpdk" ] && fail "$var had root make $secret/rt/dpdk: $out"
    rm -rf "$secret/rt/dpdk"
  done
  probe_args=()
  echo "DPDK's RUNTIME_DIRECTORY and XDG_RUNTIME_DIR: not read"
else
  echo "SKIP part: the dpdk plugin is not built here, DPDK's runtime directory not tried"
fi

# 6. The libraries a backend plugin brings read the environment as they load (libnl, under
# rdma-core: NLDBG turns on its debug output) and inside the plugin's open (EAL's bus drivers:
# DPRC names an fslmc container), before their getenv imports could be redirected.
# The probe opens the plugin by code (secure execution ignores NICMALLOC_BACKEND).
plugin_reads() { # <plugin> <variable=value> <what its output shows when read>
  local plugin=$1 setting=$2 shows=$3
  ls "$bin"/libnicmalloc-"$plugin".so >/dev/null 2>&1 || {
    echo "SKIP part: the $plugin plugin is not built here, ${setting%%=*} not tried"
    return
  }
  probe_args=("$plugin")
  setuid_off
  out=$(as_root "$setting")
  case "$out" in
  *"$shows"*) ;;
  *) echo "SKIP part: ${setting%%=*} shows nothing here even without setuid: $out" ;;
  esac
  setuid_on
  out=$(as_user "$setting")
  case "$out" in
  *"$shows"*) fail "the $plugin plugin's libraries read ${setting%%=*} in the root process: $out" ;;
  esac
  probe_args=()
  echo "${setting%%=*} (the $plugin plugin's libraries): not read"
}
plugin_reads verbs NLDBG=7 "DBG<"
plugin_reads dpdk DPRC=nicsec-container nicsec-container

# 7. mimalloc reads its own MIMALLOC_* settings before nicmalloc starts: they go back to their
# defaults (MIMALLOC_SHOW_STATS would print the root process's statistics at exit).
setuid_off
out=$(as_root MIMALLOC_SHOW_STATS=1)
case "$out" in
*"heap stats"*) ;;
*) fail "control: MIMALLOC_SHOW_STATS printed no statistics without setuid: $out" ;;
esac
setuid_on
out=$(as_user MIMALLOC_SHOW_STATS=1)
case "$out" in
*"heap stats"*) fail "MIMALLOC_SHOW_STATS printed the root process's statistics: $out" ;;
esac
echo "MIMALLOC_SHOW_STATS: back to mimalloc's default"
setuid_off
case "$(as_root MIMALLOC_DESTROY_ON_EXIT=1)" in
*"destroy_on_exit 1"*) ;;
*) fail "control: MIMALLOC_DESTROY_ON_EXIT=1 did not set the option without setuid" ;;
esac
setuid_on
out=$(as_user MIMALLOC_DESTROY_ON_EXIT=1)
case "$out" in
*"destroy_on_exit 0"*) echo "MIMALLOC_DESTROY_ON_EXIT: back to mimalloc's default" ;;
*) fail "MIMALLOC_DESTROY_ON_EXIT stayed set in the root process: $out" ;;
esac

# 8. Settings that only tune: ignored too, with the one line.
out=$(as_user NICMALLOC_DP_MIN_SIZE=1 NICMALLOC_MAX_CHUNKS=48 NICMALLOC_FREE_CHECK=0)
case "$out" in
*"secure execution"*NICMALLOC_DP_MIN_SIZE*) ;;
*) fail "no line saying NICMALLOC_DP_MIN_SIZE was ignored: $out" ;;
esac

# 9. NICMALLOC_STATS_FILE creates (and would replace) a file in a root-only folder, and moves the
# report off stderr: ignored as every setting, it writes no report anywhere.
setuid_off
rm -f "$secret"/stats.*
out=$(as_root NICMALLOC_STATS_FILE="$secret/stats.%p")
ls "$secret"/stats.* >/dev/null 2>&1 || fail "control: the probe wrote no report file without setuid: $out"
rm -f "$secret"/stats.*
setuid_on
out=$(as_user NICMALLOC_STATS_FILE="$secret/stats.%p")
ls "$secret"/stats.* >/dev/null 2>&1 && fail "NICMALLOC_STATS_FILE created a file as root: $out"
case "$out" in
*"secure execution"*NICMALLOC_STATS_FILE*) ;;
*) fail "no line saying NICMALLOC_STATS_FILE was ignored: $out" ;;
esac
[ "$(printf '%s\n' "$out" | grep -c nicmalloc)" = 1 ] || fail "more than one line (a report?): $out"
echo "NICMALLOC_STATS_FILE: ignored, no report"

[ "$failed" = 0 ] && echo "setuid: every attack refused"
exit "$failed"
