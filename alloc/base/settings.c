/* The copy of NICMALLOC_* settings taken at start-up, secure execution, and misspellings.
 *
 * Secure execution ignores every setting, not only those that name files: the others reach
 * further than they look in a program running as another user. NICMALLOC_MAX_CHUNKS with
 * NICMALLOC_DP_MIN_SIZE makes a setuid-root program lock gigabytes that no RLIMIT_MEMLOCK
 * charges; NICMALLOC_FREE_CHECK=0 and NICMALLOC_FENCE=off take protections away;
 * NICMALLOC_BACKEND chooses which devices and kernel interfaces it opens. glibc's MALLOC_* and
 * jemalloc's MALLOC_CONF are ignored there alike. The program still gets what it asks for in
 * code (nic_malloc and the rest of the API), with the defaults. */
#define _GNU_SOURCE
#include "settings.h"

#include "log.h"
#include "map.h"
#include "nocancel.h"
#include "proc_own.h"
#include "settings_internal.h"
#include "settings_table.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>

extern char **environ;

#define AS_INFO(id, name, type, def, min, max, words, reach, help)                                 \
  {#id, name, type, def, min, max, words, reach, help},
static const struct nic_setting_info settings[] = {NIC_SETTINGS(AS_INFO)};
#undef AS_INFO
#define AS_NAME(name) name,
static const char *const tool_variables[] = {NIC_TOOL_VARIABLES(AS_NAME)};
#undef AS_NAME
#define COUNT (sizeof settings / sizeof settings[0])

/* Values live here, not in malloc'd memory: they are taken inside the first malloc. */
static char store[16384];
static const char *values[COUNT];
static int state;       /* 0 unread, 1 reading, 2 ready */
static int proc_failed; /* environ was NULL and /proc's copy could not be read */
static bool secure;

static const char *name_tail(const char *entry, size_t *len) {
  const char *eq = strchr(entry, '=');
  *len = eq ? (size_t)(eq - entry) : strlen(entry);
  return eq ? eq + 1 : NULL;
}

static int find(const char *name, size_t len) {
  for (size_t i = 0; i < COUNT; i++)
    if (strlen(settings[i].name) == len && !memcmp(settings[i].name, name, len)) return (int)i;
  return -1;
}

static bool is_tool_variable(const char *name, size_t len) {
  for (size_t i = 0; i < sizeof tool_variables / sizeof tool_variables[0]; i++)
    if (strlen(tool_variables[i]) == len && !memcmp(tool_variables[i], name, len)) return true;
  return false;
}

/* Edit distance of two short names, for "did you mean". */
static size_t distance(const char *a, size_t la, const char *b) {
  size_t lb = strlen(b), row[64];
  if (la >= 63 || lb >= 63) return (size_t)-1;
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

static const char *nearest(const char *name, size_t len) {
  const char *best = NULL;
  size_t best_d = 4; /* further than this is no misspelling of ours */
  for (size_t i = 0; i < COUNT; i++) {
    size_t d = distance(name, len, settings[i].name);
    if (d < best_d) best_d = d, best = settings[i].name;
  }
  return best;
}

/* One line for all the misspellings, then the names we know, so the fix is on the screen. */
static void report_unknown(const char *const *unknown, const size_t *len, size_t n) {
  char line[4096];
  size_t at = 0;
  for (size_t i = 0; i < n && at < sizeof line; i++) {
    const char *near = nearest(unknown[i], len[i]);
    at += (size_t)snprintf(line + at, sizeof line - at, "%s%.*s%s%s%s", i ? ", " : "", (int)len[i],
                           unknown[i], near ? " (did you mean " : "", near ? near : "",
                           near ? "?)" : "");
  }
  if (at < sizeof line) at += (size_t)snprintf(line + at, sizeof line - at, "; known settings:");
  for (size_t i = 0; i < COUNT && at < sizeof line; i++)
    at += (size_t)snprintf(line + at, sizeof line - at, " %s", settings[i].name);
  nic_log_warn_text(n > 1 ? "unknown settings ignored: " : "unknown setting ignored: ", line);
}

static void report_secure(const char *const *ignored, const size_t *len, size_t n) {
  char line[2048];
  size_t at = 0;
  for (size_t i = 0; i < n && at < sizeof line; i++)
    at += (size_t)snprintf(line + at, sizeof line - at, "%s%.*s", i ? ", " : "", (int)len[i],
                           ignored[i]);
  nic_log_warn_text("secure execution (setuid, setgid or capabilities): every NICMALLOC_* "
                    "setting is ignored and the defaults are used; ignored: ",
                    line);
}

/* The entries of environ, or of a block of NUL-ended entries (/proc's copy). */
struct entries {
  char **list;
  const char *at, *end;
};

static const char *next_entry(struct entries *w) {
  if (w->list) return *w->list ? *w->list++ : NULL;
  if (w->at >= w->end) return NULL;
  const char *e = w->at;
  w->at += strnlen(e, (size_t)(w->end - e)) + 1;
  return e;
}

static void read_entries(bool secure_now, struct entries *w) {
  enum { REPORT_MAX = 32 };
  const char *odd[REPORT_MAX];
  size_t odd_len[REPORT_MAX], odd_n = 0, used = 0;
  secure = secure_now;
  memset(values, 0, sizeof values);
  for (const char *e; (e = next_entry(w));) {
    if (strncmp(e, "NICMALLOC_", 10)) continue;
    size_t len;
    const char *value = name_tail(e, &len);
    int i = find(e, len);
    bool report = secure ? true : i < 0 && !is_tool_variable(e, len);
    if (report && odd_n < REPORT_MAX) odd[odd_n] = e, odd_len[odd_n++] = len;
    /* The first of several entries with one name wins, as with getenv. */
    if (secure || i < 0 || !value || values[i]) continue;
    size_t n = strlen(value) + 1;
    if (n > sizeof store - used) {
      nic_log_warn("%s is too long to keep (settings hold %zu bytes in all); ignored",
                   settings[i].name, sizeof store);
      continue;
    }
    memcpy(store + used, value, n);
    values[i] = store + used;
    used += n;
  }
  if (odd_n && secure)
    report_secure(odd, odd_len, odd_n);
  else if (odd_n)
    report_unknown(odd, odd_len, odd_n);
}

/* The environment the process started with, from /proc, into pages of our own (no malloc): a
 * malloc from the main program's .preinit_array runs before libc has set environ. false when
 * it cannot be read. */
static bool read_proc_environment(bool secure_now) {
  const int fd = nic_proc_own_open("environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t cap = 256 << 10, len = 0;
  char *buf = nic_map_anon(cap, PROT_READ | PROT_WRITE, true);
  ssize_t n = 0;
  while (buf && (n = nic_read_nocancel(fd, buf + len, cap - 1 - len)) > 0) {
    len += (size_t)n;
    if (len < cap - 1) continue;
    char *more = nic_map_anon(cap * 2, PROT_READ | PROT_WRITE, true); /* zeroed: stays ended */
    if (more) memcpy(more, buf, len);
    nic_unmap(buf, cap);
    buf = more, cap *= 2;
  }
  nic_close_nocancel(fd);
  if (!buf || n < 0) {
    if (buf) nic_unmap(buf, cap);
    return false;
  }
  struct entries w = {.at = buf, .end = buf + len};
  read_entries(secure_now, &w);
  nic_unmap(buf, cap);
  return true;
}

/* The loader's record of the initial stack: argc, argv[], NULL, envp[], NULL (the System V ABI's
 * process start), which glibc's own loader keeps for the main thread's stack bounds. */
extern void *__libc_stack_end __attribute__((weak));

/* The environment the process started with, from the initial stack: before libc sets environ
 * (a malloc from .preinit_array), the one copy that needs neither /proc (not mounted in a chroot)
 * nor a dumpable process (a setgid program cannot open its own /proc files). NULL when the
 * stack does not look as the ABI has it. */
static char **initial_environment(void) {
  const long *sp = __libc_stack_end;
  if (!sp || sp[0] < 0 || sp[0] > (1l << 24)) return NULL;
  char **argv = (char **)(sp + 1);
  return argv[sp[0]] == NULL ? argv + sp[0] + 1 : NULL;
}

/* false while neither environ nor /proc's copy could be read: nothing is taken yet. */
static bool read_environment(bool secure_now) {
  char **list = environ ? environ : initial_environment();
  if (list) {
    struct entries w = {.list = list};
    read_entries(secure_now, &w);
    return true;
  }
  if (__atomic_load_n(&proc_failed, __ATOMIC_RELAXED)) return false;
  if (read_proc_environment(secure_now)) return true;
  __atomic_store_n(&proc_failed, 1, __ATOMIC_RELAXED);
  return false;
}

/* true once the settings are taken for good. false before libc has set environ where /proc
 * cannot be read either: every setting reads as unset (its default) and the settings are not
 * marked read, so a call once environ is set takes them. What was read before then keeps its
 * default: nic_config()'s settings (config.h: the chunk and step sizes, NICMALLOC_DP_MIN_SIZE,
 * NICMALLOC_STATS and the rest the first allocation takes), and the typed values read meanwhile
 * are parsed again from the environment, not kept. */
bool nic_settings_taken(void) {
  for (;;) {
    const int now = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (now == 2) return true;
    int expected = 0;
    if (now == 0 && __atomic_compare_exchange_n(&state, &expected, 1, false, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE)) {
      const bool taken = read_environment(getauxval(AT_SECURE) != 0);
      __atomic_store_n(&state, taken ? 2 : 0, __ATOMIC_RELEASE);
      return taken;
    }
    __builtin_ia32_pause();
  }
}

const char *nic_getenv(const char *name) {
  if (!nic_settings_taken()) return NULL;
  int i = find(name, strlen(name));
  if (i >= 0) return values[i];
  nic_log_error("internal: %s is read but not declared in settings_table.h; ignored", name);
  return NULL;
}

bool nic_secure_execution(void) {
  if (!nic_settings_taken()) return getauxval(AT_SECURE) != 0;
  return secure;
}

void nic_settings_reload(bool secure_now) {
  nic_settings_taken();
  read_environment(secure_now || getauxval(AT_SECURE) != 0);
  nic_setting_values_forget();
}
