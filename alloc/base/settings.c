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
#include "settings_internal.h"
#include "settings_table.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>

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
static int state; /* 0 unread, 1 reading, 2 ready */
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

static void read_environment(bool secure_now) {
  enum { REPORT_MAX = 32 };
  const char *odd[REPORT_MAX];
  size_t odd_len[REPORT_MAX], odd_n = 0, used = 0;
  secure = secure_now;
  memset(values, 0, sizeof values);
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "NICMALLOC_", 10)) continue;
    size_t len;
    const char *value = name_tail(*e, &len);
    int i = find(*e, len);
    bool report = secure ? true : i < 0 && !is_tool_variable(*e, len);
    if (report && odd_n < REPORT_MAX) odd[odd_n] = *e, odd_len[odd_n++] = len;
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

static void ensure_read(void) {
  if (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 2) return;
  int expected = 0;
  if (__atomic_compare_exchange_n(&state, &expected, 1, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    read_environment(getauxval(AT_SECURE) != 0);
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2)
      __builtin_ia32_pause();
  }
}

const char *nic_getenv(const char *name) {
  ensure_read();
  int i = find(name, strlen(name));
  if (i >= 0) return values[i];
  nic_log_error("internal: %s is read but not declared in settings_table.h; ignored", name);
  return NULL;
}

bool nic_secure_execution(void) {
  ensure_read();
  return secure;
}

void nic_settings_reload(bool secure_now) {
  ensure_read();
  read_environment(secure_now || getauxval(AT_SECURE) != 0);
  nic_setting_values_forget();
}
