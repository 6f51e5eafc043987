/* NICMALLOC_* settings as the process started with them: copied once, so a program that rewrites
 * its environment (nginx does) changes nothing we read later, checked against the one table of
 * known names (settings_table.h), and turned into typed values there, so no module parses text.
 *
 * A value is parsed on its first read, where its module first needs it, not all at start-up. A
 * bad value gets one warning, "NICMALLOC_X=value: expected <range>; using <default>", and the
 * setting keeps its default. */
#ifndef NIC_SETTINGS_H
#define NIC_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "settings_table.h"

enum nic_setting_type {
  NIC_T_SIZE,
  NIC_T_POW2,
  NIC_T_COUNT,
  NIC_T_MS,
  NIC_T_BOOL,
  NIC_T_CHOICE,
  NIC_T_TEXT,
};
enum nic_reach { NIC_REACH_VALUE, NIC_REACH_FILE };

#define NIC_SETTING_ID(id, ...) NIC_S_##id,
enum nic_setting { NIC_SETTINGS(NIC_SETTING_ID) NIC_S_COUNT };
#undef NIC_SETTING_ID

/* One row of the table, for the tests and the README generator. */
struct nic_setting_info {
  const char *id, *name;
  enum nic_setting_type type;
  const char *def; /* "" when unset by default */
  uint64_t min, max;
  const char *words; /* "a|b|c" or "" */
  enum nic_reach reach;
  const char *help;
};
const struct nic_setting_info *nic_setting_row(enum nic_setting s);

/* The number of a size, count, milliseconds or bool setting (1 or 0), of the default when it
 * was unset or bad, or 0 when it has no default (see nic_setting_given) or holds a word. For
 * NIC_T_TEXT with a number after a prefix word, that number. */
uint64_t nic_setting_number(enum nic_setting s);
static inline bool nic_setting_bool(enum nic_setting s) {
  return nic_setting_number(s) != 0;
}
/* The index in the setting's words of its value (or of its default), -1 when it holds a number
 * or text (or nothing). */
int nic_setting_choice(enum nic_setting s);
/* True when the setting holds this one of its words. */
bool nic_setting_is(enum nic_setting s, const char *word);
/* A NIC_T_TEXT setting's text, NULL when unset or empty (or bad: a prefix with no number). */
const char *nic_setting_text(enum nic_setting s);
/* True when the environment gave a valid value, false when the default is in use. */
bool nic_setting_given(enum nic_setting s);

/* The range of a setting in words ("32M to 1G, a power of two"), for messages and the README. */
void nic_setting_describe(enum nic_setting s, char *buf, size_t cap);

/* Parsers of the types, exposed for the tests. Return true and set *out on success. */
bool nic_parse_size(const char *text, size_t *out);
/* Digits only, no suffix: counts and milliseconds. */
bool nic_parse_count(const char *text, size_t *out);
bool nic_parse_bool(const char *text, bool *out);

/* The value of a declared NICMALLOC_* variable at start-up, or NULL when it was unset, or when
 * the process runs in secure execution (setuid, setgid, file capabilities: AT_SECURE), where
 * every setting is ignored. Never allocates. The raw text: modules read the typed values above. */
const char *nic_getenv(const char *name);

/* True when the kernel started this process in secure execution. */
bool nic_secure_execution(void);

/* Reads the environment again, as in secure execution when `secure` (for the tests: a setenv
 * after start-up is otherwise never seen), and forgets the typed values, so their next read
 * parses (and warns) again. Not safe against concurrent readers. */
void nic_settings_reload(bool secure);

#endif
