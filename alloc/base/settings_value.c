/* The one parser of settings: the text settings.c copied at start-up becomes typed values, on
 * each setting's first read, with the table's defaults, ranges and words (settings_table.h) and
 * one warning form for a bad value. */
#include "log.h"
#include "settings.h"
#include "settings_internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AS_INFO(id, name, type, def, min, max, words, reach, help)                                 \
  {#id, name, type, def, min, max, words, reach, help},
static const struct nic_setting_info settings[] = {NIC_SETTINGS(AS_INFO)};
#undef AS_INFO
#define COUNT (sizeof settings / sizeof settings[0])

/* Typed values, parsed on first read. */
struct typed {
  uint64_t number;
  int choice;       /* index in words, -1 for none */
  const char *text; /* NIC_T_TEXT's value */
  bool given;       /* from the environment, not the default */
};
static struct typed typed[COUNT];
static int typed_state[COUNT]; /* 0 unparsed, 1 parsing, 2 ready */

void nic_setting_values_forget(void) {
  memset(typed, 0, sizeof typed);
  for (size_t i = 0; i < COUNT; i++)
    __atomic_store_n(&typed_state[i], 0, __ATOMIC_RELEASE);
}

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
      snprintf(buf, cap, "text"); /* a path, a name, a list: the help says which */
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
  const char *text = nic_getenv(s->name);
  struct typed t;
  if (text && parse(s, text, &t)) {
    typed[i] = t;
    return;
  }
  if (text) {
    char expected[256];
    nic_setting_describe((enum nic_setting)i, expected, sizeof expected);
    nic_log_warn("%s=%s: expected %s; using %s", s->name, text, expected,
                 *s->def ? s->def : "the default");
  }
  if (!parse(s, s->def, &typed[i])) /* a default the table's test would have refused */
    typed[i] = (struct typed){.choice = -1};
  typed[i].given = false;
}

static const struct typed *get(enum nic_setting id) {
  static const struct typed none = {.choice = -1};
  static __thread struct typed provisional __attribute__((tls_model("initial-exec")));
  size_t i = (size_t)id;
  if (i >= COUNT) return &none;
  if (__atomic_load_n(&typed_state[i], __ATOMIC_ACQUIRE) == 2) return &typed[i];
  if (!nic_settings_taken()) { /* the default, kept by no one: the environment comes later */
    if (!parse(&settings[i], settings[i].def, &provisional)) provisional = none;
    provisional.given = false;
    return &provisional;
  }
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
