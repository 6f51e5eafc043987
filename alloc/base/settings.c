/* The copy of NICMALLOC_* settings taken at start-up, secure execution, misspellings, and the
 * one parser that turns the copied text into typed values.
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
#include "settings_table.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* Typed values, parsed on first read. */
struct typed {
  uint64_t number;
  int choice;       /* index in words, -1 for none */
  const char *text; /* NIC_T_TEXT's value */
  bool given;       /* from the environment, not the default */
};
static struct typed typed[COUNT];
static int typed_state[COUNT]; /* 0 unparsed, 1 parsing, 2 ready */

static void forget_typed(void) {
  memset(typed, 0, sizeof typed);
  for (size_t i = 0; i < COUNT; i++)
    __atomic_store_n(&typed_state[i], 0, __ATOMIC_RELEASE);
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
  forget_typed();
}

/* ---- the parsers of the types ---- */

/* Digits first: strtoull would skip spaces and take "-1" (even " -1") as 2^64 - 1. */
static bool parse_digits(const char *text, unsigned long long *v, char **end) {
  if (!text || *text < '0' || *text > '9') return false;
  errno = 0;
  *v = strtoull(text, end, 10);
  return !errno;
}

bool nic_parse_count(const char *text, size_t *out) {
  unsigned long long v;
  char *end;
  if (!parse_digits(text, &v, &end) || *end || v > SIZE_MAX) return false;
  *out = (size_t)v;
  return true;
}

bool nic_parse_size(const char *text, size_t *out) {
  unsigned long long v;
  char *end;
  if (!parse_digits(text, &v, &end)) return false;
  unsigned shift = 0;
  switch (*end) {
  case 'k':
  case 'K':
    shift = 10;
    end++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    end++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    end++;
    break;
  default:
    break;
  }
  if (shift && *end == 'i') end++; /* KiB-style suffixes */
  if (*end == 'B') end++;
  if (*end != '\0') return false;
  if (shift && v > (SIZE_MAX >> shift)) return false;
  *out = (size_t)(v << shift);
  return true;
}

bool nic_parse_bool(const char *text, bool *out) {
  if (!text) return false;
  if (!strcmp(text, "1") || !strcmp(text, "yes") || !strcmp(text, "on") || !strcmp(text, "true")) {
    *out = true;
    return true;
  }
  if (!strcmp(text, "0") || !strcmp(text, "no") || !strcmp(text, "off") || !strcmp(text, "false")) {
    *out = false;
    return true;
  }
  return false;
}

/* The index of text among "a|b|c", or -1. With `prefix`, a word that starts text counts, and
 * *len is its length. */
static int find_word(const char *words, const char *text, bool prefix, size_t *len) {
  int i = 0;
  for (const char *w = words; *w; i++) {
    size_t n = strcspn(w, "|");
    if (n && !strncmp(w, text, n) && (prefix || text[n] == '\0')) {
      if (len) *len = n;
      return i;
    }
    w += n + (w[n] == '|');
  }
  return -1;
}

static bool is_size(enum nic_setting_type t) {
  return t == NIC_T_SIZE || t == NIC_T_POW2;
}

/* Sizes with the largest unit that divides them, so that ranges read as they are written. */
static void format_number(const struct nic_setting_info *s, uint64_t v, char *buf, size_t cap) {
  static const char units[] = "GMK";
  if (is_size(s->type) && v)
    for (int u = 0; u < 3; u++) {
      unsigned shift = 30u - 10u * (unsigned)u;
      if (!(v & ((1ull << shift) - 1))) {
        snprintf(buf, cap, "%llu%c", (unsigned long long)(v >> shift), units[u]);
        return;
      }
    }
  snprintf(buf, cap, "%llu", (unsigned long long)v);
}

static void describe_range(const struct nic_setting_info *s, char *buf, size_t cap) {
  char lo[32], hi[32];
  format_number(s, s->min, lo, sizeof lo);
  format_number(s, s->max, hi, sizeof hi);
  if (s->max == UINT64_MAX)
    snprintf(buf, cap, s->min ? " of at least %s" : "", lo);
  else
    snprintf(buf, cap, " from %s to %s", lo, hi);
}

/* Words as "a, b or c". */
static void describe_words(const char *words, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (const char *w = words; *w && at < cap;) {
    size_t n = strcspn(w, "|");
    bool last = w[n] == '\0';
    at +=
        (size_t)snprintf(buf + at, cap - at, "%s%.*s", at ? (last ? " or " : ", ") : "", (int)n, w);
    w += n + !last;
  }
}

void nic_setting_describe(enum nic_setting id, char *buf, size_t cap) {
  if ((size_t)id >= COUNT || !cap) return;
  const struct nic_setting_info *s = &settings[id];
  char range[96], words[160];
  describe_range(s, range, sizeof range);
  describe_words(s->words, words, sizeof words);
  switch (s->type) {
  case NIC_T_SIZE:
    snprintf(buf, cap, "a size%s (K, M, G)%s%s", range, *words ? ", or " : "", words);
    break;
  case NIC_T_POW2:
    snprintf(buf, cap, "a power of two%s (K, M, G)", range);
    break;
  case NIC_T_COUNT:
    snprintf(buf, cap, "a number%s", range);
    break;
  case NIC_T_MS:
    snprintf(buf, cap, "milliseconds%s", range);
    break;
  case NIC_T_BOOL:
    snprintf(buf, cap, "0 or 1 (no or yes, off or on, false or true)");
    break;
  case NIC_T_CHOICE:
    snprintf(buf, cap, "%s", words);
    break;
  case NIC_T_TEXT:
    if (*words)
      snprintf(buf, cap, "a path, or %s then a number%s", words, range);
    else
      snprintf(buf, cap, "%s", s->reach == NIC_REACH_FILE ? "a path or arguments" : "a name");
    break;
  }
}

static bool parse(const struct nic_setting_info *s, const char *text, struct typed *out) {
  *out = (struct typed){.choice = -1, .given = *text != '\0'};
  size_t v, len;
  if (s->type == NIC_T_TEXT) {
    if (!*text) return true; /* empty is unset, as for a path it always was */
    int w = *s->words ? find_word(s->words, text, true, &len) : -1;
    if (w < 0) {
      out->text = text;
      return true;
    }
    out->choice = w;
    out->number = v = 0;
    if (!nic_parse_count(text + len, &v) || v < s->min || v > s->max) return false;
    out->number = v;
    return true;
  }
  if ((out->choice = find_word(s->words, text, false, NULL)) >= 0) return true;
  if (s->type == NIC_T_CHOICE) return false;
  if (s->type == NIC_T_BOOL) {
    bool b;
    if (!nic_parse_bool(text, &b)) return false;
    out->number = b;
    return true;
  }
  bool ok = is_size(s->type) ? nic_parse_size(text, &v) : nic_parse_count(text, &v);
  if (!ok || v < s->min || v > s->max || (s->type == NIC_T_POW2 && (v & (v - 1)))) return false;
  out->number = v;
  return true;
}

static void parse_setting(size_t i) {
  const struct nic_setting_info *s = &settings[i];
  struct typed t;
  if (values[i] && parse(s, values[i], &t)) {
    typed[i] = t;
    return;
  }
  if (values[i]) {
    char expected[256];
    nic_setting_describe((enum nic_setting)i, expected, sizeof expected);
    nic_log_warn("%s=%s: expected %s; using %s", s->name, values[i], expected,
                 *s->def ? s->def : "the default");
  }
  if (!parse(s, s->def, &typed[i])) /* a default the table's test would have refused */
    typed[i] = (struct typed){.choice = -1};
  typed[i].given = false;
}

static const struct typed *get(enum nic_setting id) {
  static const struct typed none = {.choice = -1};
  size_t i = (size_t)id;
  ensure_read();
  if (i >= COUNT) return &none;
  if (__atomic_load_n(&typed_state[i], __ATOMIC_ACQUIRE) == 2) return &typed[i];
  int expected = 0;
  if (__atomic_compare_exchange_n(&typed_state[i], &expected, 1, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    parse_setting(i);
    __atomic_store_n(&typed_state[i], 2, __ATOMIC_RELEASE);
  } else {
    while (__atomic_load_n(&typed_state[i], __ATOMIC_ACQUIRE) != 2)
      __builtin_ia32_pause();
  }
  return &typed[i];
}

uint64_t nic_setting_number(enum nic_setting s) {
  return get(s)->number;
}

int nic_setting_choice(enum nic_setting s) {
  return get(s)->choice;
}

bool nic_setting_is(enum nic_setting s, const char *word) {
  int choice = get(s)->choice;
  return choice >= 0 && choice == find_word(settings[s].words, word, false, NULL);
}

const char *nic_setting_text(enum nic_setting s) {
  return get(s)->text;
}

bool nic_setting_given(enum nic_setting s) {
  return get(s)->given;
}

const struct nic_setting_info *nic_setting_row(enum nic_setting s) {
  return (size_t)s < COUNT ? &settings[s] : NULL;
}
