/* Switching sites off without recompiling: NICMALLOC_SITES_OFF is a comma list of site ids,
 * "file:line" or function names; names are looked up in the site table the LLVM pass wrote
 * (NICMALLOC_SITE_TABLE, JSON lines: {"module":..,"sites":[{"file":..,"function":..,"id":..,
 * "line":..,...},...]}). Reading the table also finds ids two modules share (the pass can only
 * see collisions inside one module). A module rebuilt by an older pass was appended again rather
 * than replaced: only its last line counts, and an id given twice to the same site (file, line,
 * function) is no collision. Runs at start-up, before main: it streams the file through a fixed
 * buffer, twice (the first pass finds each module's last line), and allocates nothing. */
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

/* Names of NICMALLOC_SITES_OFF whose match is tracked, for the warning about those matching
 * nothing: the settings hold 16 KiB in all (settings.c), so at most 8192 names ever reach us. */
#define NAMES_TRACKED 16384u
#define FIELD_MAX 256
#define LINES_MAX 8192u /* lines past it are all read, rebuilt modules or not */
#define MODULE_SLOTS (2 * LINES_MAX)

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
  bool first_pass; /* finding each module's last line */
  unsigned line;   /* the current line, from 0 */
  uint64_t module; /* hash of the current line's "module", 0 before it */
  unsigned char seen[NIC_MAX_SITES / 8];
  uint64_t entry[NIC_MAX_SITES]; /* hash of (file, line, function) of each id seen */
  uint64_t line_module[LINES_MAX];
  unsigned char skip[LINES_MAX / 8]; /* lines of a module that a later line replaces */
  unsigned switched_off, duplicates;
  const char *off; /* NICMALLOC_SITES_OFF, walked for its names at each site: no copy, no cap */
  bool names;      /* it names a site by file:line or function */
  unsigned char name_matched[NAMES_TRACKED / 8];
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

/* True when a piece of NICMALLOC_SITES_OFF is a site id rather than a name; *id is it. */
static bool site_id(const char *piece, size_t len, long *id) {
  char *end;
  *id = strtol(piece, &end, 10);
  return end == piece + len && *id >= 0 && *id < (long)NIC_MAX_SITES;
}

/* The next name of the list at *cursor (ids and empty pieces skipped), NULL past its end. */
static const char *next_name(const char **cursor, size_t *len) {
  long id;
  for (const char *t = *cursor; *t;) {
    const char *piece = t;
    const size_t n = strcspn(t, ",");
    t += n + (t[n] == ',');
    if (n && !site_id(piece, n, &id)) {
      *cursor = t;
      *len = n;
      return piece;
    }
  }
  *cursor = "";
  return NULL;
}

static uint64_t hash_text(uint64_t h, const char *text) {
  for (; *text; text++)
    h = (h ^ (unsigned char)*text) * 0x100000001b3ull;
  return h;
}

static bool skipped_line(const struct scan *sc) {
  return sc->line < LINES_MAX && (sc->skip[sc->line / 8] >> (sc->line % 8) & 1);
}

static void finish_site(struct scan *sc) {
  struct site *s = &sc->site;
  if (sc->first_pass || skipped_line(sc) || s->id < 0 || s->id >= (long)NIC_MAX_SITES) return;
  const uint64_t entry =
      hash_text(hash_text(hash_text(0xcbf29ce484222325ull, s->file), s->function), "\n") ^
      (uint64_t)s->line * 0x9e3779b97f4a7c15ull;
  unsigned char bit = (unsigned char)(1u << (s->id % 8));
  const bool again = sc->seen[s->id / 8] & bit;
  if (again && sc->entry[s->id] != entry) {
    sc->duplicates++;
    nic_log_warn("site table: id %ld is used by more than one site (%s:%ld in %s); switching it "
                 "off switches off all of them",
                 s->id, s->file, s->line, s->function);
  }
  if (!again) sc->entry[s->id] = entry;
  sc->seen[s->id / 8] |= bit;
  if (!sc->names) return;
  size_t len;
  unsigned i = 0;
  for (const char *cursor = sc->off, *name; (name = next_name(&cursor, &len)); i++)
    if (matches(s, name, len)) {
      nic_site_set_enabled((uint32_t)s->id, 0);
      sc->switched_off++;
      if (i < NAMES_TRACKED) sc->name_matched[i / 8] |= (unsigned char)(1u << (i % 8));
    }
}

/* A value at site depth: remember the fields we need. */
static void take_value(struct scan *sc, const char *text, bool is_string) {
  struct site *s = &sc->site;
  if (sc->depth == 1 && is_string && !strcmp(s->key, "module"))
    sc->module = hash_text(0xcbf29ce484222325ull, text) | 1;
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
      if (sc->value_is_key && sc->depth <= 2) /* the keys looked for are short: cut the rest */
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
    if (++sc->depth <= 2) memset(&sc->site, 0, sizeof sc->site), sc->site.id = -1;
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

static void end_line(struct scan *sc) {
  if (sc->first_pass && sc->line < LINES_MAX) sc->line_module[sc->line] = sc->module;
  sc->line++;
  sc->module = 0;
  sc->depth = 0; /* each line is one module */
  sc->in_string = sc->escape = false;
  sc->nlen = 0;
}

static void stream(struct scan *sc, int fd) {
  char buf[4096];
  ssize_t n;
  bool open_line = false;
  sc->line = 0;
  sc->module = 0;
  while ((n = nic_read_nocancel(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++) {
      open_line = buf[i] != '\n';
      if (open_line)
        feed(sc, buf[i]);
      else
        end_line(sc);
    }
  if (open_line) end_line(sc);
}

/* Every line but the last of each module: an older pass appended a rebuilt module's line again. */
static void mark_replaced_lines(struct scan *sc) {
  static uint64_t modules[MODULE_SLOTS]; /* a set of module hashes; 0 = empty */
  memset(modules, 0, sizeof modules);
  for (unsigned i = sc->line < LINES_MAX ? sc->line : LINES_MAX; i-- > 0;) {
    const uint64_t m = sc->line_module[i];
    if (!m) continue;
    uint32_t k = (uint32_t)(m >> 32) & (MODULE_SLOTS - 1);
    while (modules[k] && modules[k] != m)
      k = (k + 1) & (MODULE_SLOTS - 1);
    if (modules[k])
      sc->skip[i / 8] |= (unsigned char)(1u << (i % 8));
    else
      modules[k] = m;
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
  for (sc->first_pass = true;; sc->first_pass = false) {
    stream(sc, fd);
    if (!sc->first_pass || lseek(fd, 0, SEEK_SET) != 0) break;
    mark_replaced_lines(sc);
  }
  nic_close_nocancel(fd);
}

static void site_table_apply(void) {
  const char *off = nic_setting_text(NIC_S_SITES_OFF), *table = nic_setting_text(NIC_S_SITE_TABLE);
  if (!off && !table) return;
  /* 600 KiB: not on the stack of whatever thread starts us; zero, as this runs once. */
  static struct scan sc;
  sc.off = off ? off : "";
  long id;
  for (const char *t = sc.off; *t;) { /* every id, however long the list */
    const size_t len = strcspn(t, ",");
    if (len && site_id(t, len, &id))
      nic_site_set_enabled((uint32_t)id, 0);
    else if (len)
      sc.names = true;
    t += len + (t[len] == ',');
  }
  if (sc.names && !table) {
    nic_log_warn("NICMALLOC_SITES_OFF names sites by file:line or function, which needs the "
                 "pass's table in NICMALLOC_SITE_TABLE; those stay on");
    return;
  }
  if (table) read_table(&sc, table);
  size_t len;
  unsigned i = 0; /* each name that matched nothing: a typo? */
  for (const char *cursor = sc.off, *name; (name = next_name(&cursor, &len)); i++)
    if (i < NAMES_TRACKED && !(sc.name_matched[i / 8] >> (i % 8) & 1))
      nic_log_warn("NICMALLOC_SITES_OFF: '%.*s' matched no site in %s", (int)len, name, table);
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
