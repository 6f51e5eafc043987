/* Switching sites off without recompiling: NICMALLOC_SITES_OFF is a comma list of site ids,
 * "file:line" or function names; names are looked up in the site table the LLVM pass wrote
 * (NICMALLOC_SITE_TABLE, JSON lines: {"module":..,"sites":[{"file":..,"function":..,"id":..,
 * "line":..,...},...]}). Reading the table also finds ids two modules share (the pass can only
 * see collisions inside one module). Runs at start-up, before main: it streams the file through
 * a fixed buffer and allocates nothing. */
#include "site_table.h"

#include "export.h"
#include "log.h"
#include "nicmalloc.h"
#include "nocancel.h"
#include "settings.h"
#include "startup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKENS_MAX 64
#define FIELD_MAX 256

struct site {
  char file[FIELD_MAX], function[FIELD_MAX], key[16];
  long id, line;
};

struct scan {
  int depth; /* brace depth: a line is 1, a site object 2 */
  bool in_string, escape, value_is_key;
  char str[FIELD_MAX]; /* the current string */
  size_t len;
  char number[24]; /* the current number */
  size_t nlen;
  struct site site;
  unsigned char seen[NIC_MAX_SITES / 8];
  unsigned switched_off, duplicates;
  const char *tokens[TOKENS_MAX];
  size_t token_len[TOKENS_MAX];
  bool token_matched[TOKENS_MAX];
  unsigned ntokens;
};

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* A token names a site by function, or by file:line (the file by its name or full path). */
static bool matches(const struct site *s, const char *tok, size_t len) {
  const char *colon = memchr(tok, ':', len);
  if (!colon) return strlen(s->function) == len && !memcmp(s->function, tok, len);
  size_t flen = (size_t)(colon - tok);
  char *end;
  long line = strtol(colon + 1, &end, 10);
  if (end != tok + len || end == colon + 1) return false; /* "b.c:20x" is not line 20 */
  bool file = (strlen(s->file) == flen && !memcmp(s->file, tok, flen)) ||
              (strlen(base_name(s->file)) == flen && !memcmp(base_name(s->file), tok, flen));
  return file && line == s->line;
}

static void finish_site(struct scan *sc) {
  struct site *s = &sc->site;
  if (s->id < 0 || s->id >= (long)NIC_MAX_SITES) return;
  unsigned char bit = (unsigned char)(1u << (s->id % 8));
  if (sc->seen[s->id / 8] & bit) {
    sc->duplicates++;
    nic_log_warn("site table: id %ld is used by more than one site (%s:%ld in %s); switching it "
                 "off switches off all of them",
                 s->id, s->file, s->line, s->function);
  }
  sc->seen[s->id / 8] |= bit;
  for (unsigned i = 0; i < sc->ntokens; i++)
    if (matches(s, sc->tokens[i], sc->token_len[i])) {
      nic_site_set_enabled((uint32_t)s->id, 0);
      sc->switched_off++;
      sc->token_matched[i] = true;
    }
}

/* A value at site depth: remember the fields we need. */
static void take_value(struct scan *sc, const char *text, bool is_string) {
  struct site *s = &sc->site;
  if (sc->depth != 2) return;
  if (is_string && !strcmp(s->key, "file"))
    strcpy(s->file, text);
  else if (is_string && !strcmp(s->key, "function"))
    strcpy(s->function, text);
  else if (!is_string && !strcmp(s->key, "id"))
    s->id = strtol(text, NULL, 10);
  else if (!is_string && !strcmp(s->key, "line"))
    s->line = strtol(text, NULL, 10);
}

static void end_number(struct scan *sc) {
  if (!sc->nlen) return;
  sc->number[sc->nlen] = '\0';
  take_value(sc, sc->number, false);
  sc->nlen = 0;
}

static void feed(struct scan *sc, char c) {
  if (sc->in_string) {
    if (sc->escape)
      sc->escape = false;
    else if (c == '\\') {
      sc->escape = true;
      return;
    } else if (c == '"') {
      sc->in_string = false;
      sc->str[sc->len] = '\0';
      if (sc->value_is_key && sc->depth == 2) /* the keys looked for are short: cut the rest */
        snprintf(sc->site.key, sizeof sc->site.key, "%.15s", sc->str);
      else if (!sc->value_is_key)
        take_value(sc, sc->str, true);
      return;
    }
    if (sc->len < FIELD_MAX - 1) sc->str[sc->len++] = c;
    return;
  }
  if ((c >= '0' && c <= '9') || c == '-') {
    if (sc->nlen < sizeof sc->number - 1) sc->number[sc->nlen++] = c;
    return;
  }
  end_number(sc);
  switch (c) {
  case '"':
    sc->in_string = true;
    sc->len = 0;
    break;
  case ':':
    sc->value_is_key = false;
    break;
  case ',':
    sc->value_is_key = true;
    break;
  case '{':
    if (++sc->depth == 2) memset(&sc->site, 0, sizeof sc->site), sc->site.id = -1;
    sc->value_is_key = true;
    break;
  case '}':
    if (sc->depth-- == 2) finish_site(sc);
    break;
  case '[':
    sc->value_is_key = false;
    break;
  default:
    break;
  }
}

/* Read at start-up, inside the first malloc: O_NONBLOCK and a regular file only, since a FIFO
 * would hold every process that names it until someone wrote to it. */
static void read_table(struct scan *sc, const char *path) {
  int fd = nic_open_nocancel(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    if (fd >= 0) nic_close_nocancel(fd);
    nic_log_warn("NICMALLOC_SITE_TABLE=%s cannot be read (not a readable regular file); sites "
                 "named in NICMALLOC_SITES_OFF by file:line or function stay on",
                 path);
    return;
  }
  char buf[4096];
  ssize_t n;
  while ((n = nic_read_nocancel(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == '\n') sc->depth = 0; /* each line is one module */
      feed(sc, buf[i]);
    }
  nic_close_nocancel(fd);
}

static void site_table_apply(void) {
  const char *off = nic_setting_text(NIC_S_SITES_OFF), *table = nic_setting_text(NIC_S_SITE_TABLE);
  if (!off && !table) return;
  static struct scan sc; /* 8 KiB of id bits: not on the stack of whatever thread starts us */
  memset(&sc, 0, sizeof sc);
  bool names = false;
  for (const char *t = off; t && *t && sc.ntokens < TOKENS_MAX;) {
    size_t len = strcspn(t, ",");
    char *end;
    long id = strtol(t, &end, 10);
    if (len && end == t + len && id >= 0 && id < (long)NIC_MAX_SITES) {
      nic_site_set_enabled((uint32_t)id, 0);
    } else if (len) {
      sc.tokens[sc.ntokens] = t;
      sc.token_len[sc.ntokens++] = len;
      names = true;
    }
    t += len + (t[len] == ',');
  }
  if (names && !table) {
    nic_log_warn("NICMALLOC_SITES_OFF names sites by file:line or function, which needs the "
                 "pass's table in NICMALLOC_SITE_TABLE; those stay on");
    return;
  }
  if (table) read_table(&sc, table);
  for (unsigned i = 0; i < sc.ntokens; i++) /* each name that matched nothing: a typo? */
    if (!sc.token_matched[i])
      nic_log_warn("NICMALLOC_SITES_OFF: '%.*s' matched no site in %s", (int)sc.token_len[i],
                   sc.tokens[i], table);
  nic_log_info("site table: %u sites switched off by name, %u duplicate ids", sc.switched_off,
               sc.duplicates);
}
NIC_STARTUP_STEP(site_table, NIC_START_SITE_TABLE, site_table_apply);

/* One bit per site, set = switched off, so the zero-initialised table means "all on". */
static unsigned long long sites_off[NIC_MAX_SITES / 64];

enum nic_route nic_site_route(uint32_t site) {
  if (site >= NIC_MAX_SITES) return NIC_ROUTE_AUTO;
  unsigned long long word = __atomic_load_n(&sites_off[site / 64], __ATOMIC_RELAXED);
  return (word >> (site % 64)) & 1 ? NIC_ROUTE_AUTO : NIC_ROUTE_DATAPLANE;
}

NIC_EXPORT int nic_site_set_enabled(uint32_t site, int enabled) {
  if (site >= NIC_MAX_SITES) return -EINVAL;
  unsigned long long bit = 1ull << (site % 64);
  if (enabled)
    __atomic_and_fetch(&sites_off[site / 64], ~bit, __ATOMIC_RELAXED);
  else
    __atomic_or_fetch(&sites_off[site / 64], bit, __ATOMIC_RELAXED);
  return 0;
}

NIC_EXPORT int nic_site_is_enabled(uint32_t site) {
  if (site >= NIC_MAX_SITES) return -EINVAL;
  return nic_site_route(site) == NIC_ROUTE_DATAPLANE;
}
