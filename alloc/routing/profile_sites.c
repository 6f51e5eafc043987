/* NICMALLOC_SITES: routes the allocations of the sites a profile (profile.c's format) saw
 * sending bytes to dataplane memory. Each site's frames are turned back into addresses once, at
 * start-up, from the load addresses of the modules now (matched by base name), so the site hash
 * computed at allocation time matches under ASLR. Modules loaded later (dlopen) are not
 * resolved; their sites are counted as unresolved in the verbose log.
 * The budget (NICMALLOC_SITES_BUDGET) caps the bytes each site routes over the run (requested
 * bytes, not live ones: frees do not give budget back), so a mis-profiled site cannot pin the
 * world; over it, the site allocates from the control heap after one warning. */
#define _GNU_SOURCE
#include "profile.h"

#include "config.h"
#include "log.h"
#include "nocancel.h"
#include "settings.h"
#include "thread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROUTE_SLOTS 4096u

struct routed {
  uint64_t hash; /* 0 = empty; read-only after loading */
  uint64_t bytes;
  uint64_t budget;
  int warned;
};

static struct routed table[ROUTE_SLOTS];
static size_t min_size;
static uint64_t nsites, routed_allocs, routed_bytes, over_budget, dropped_sites;

static struct routed *slot(uint64_t hash, bool insert) {
  for (uint32_t i = (uint32_t)(hash >> 20) & (ROUTE_SLOTS - 1);; i = (i + 1) & (ROUTE_SLOTS - 1)) {
    if (table[i].hash == hash) return &table[i];
    if (table[i].hash) continue;
    if (!insert) return NULL;
    if (nsites >= ROUTE_SLOTS / 2) {
      dropped_sites++;
      return NULL;
    }
    nsites++;
    table[i].hash = hash;
    return &table[i];
  }
}

/* NICMALLOC_SITES_BUDGET, lowered to NICMALLOC_SITES_HEADROOM times the bytes of the site's
 * blocks that the profile saw reach the network (at least 1 MiB): a site whose blocks were
 * mostly never sent (memcached's slab pages filled by a set-only load) routes about as much as
 * its sent blocks needed, not everything it allocates. Headroom 0 keeps the fixed budget. */
static uint64_t site_budget(double sent_blocks) {
  const struct nic_config *c = nic_config();
  if (!c->sites_headroom) return c->sites_budget;
  double b = sent_blocks * c->sites_headroom;
  if (b < (double)(1 << 20)) b = (double)(1 << 20);
  return b < (double)c->sites_budget ? (uint64_t)b : c->sites_budget;
}

/* Undoes profile_write.c's %20 / %25 in a module path, in place. */
static bool decode_path(char *p) {
  char *out = p;
  for (; *p; p++) {
    if (*p != '%') {
      *out++ = *p;
    } else if (!strncmp(p, "%20", 3) || !strncmp(p, "%25", 3)) {
      *out++ = p[2] == '0' ? ' ' : '%';
      p += 2;
    } else {
      return false;
    }
  }
  *out = '\0';
  return true;
}

/* "site SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS MOD+0xOFF...": true if parsed;
 * *resolved says whether every module is loaded now, *sending whether the site sent bytes. */
static bool parse_site(char *line, bool *resolved, bool *sending) {
  char *save, *tok = strtok_r(line, " \t", &save);
  if (!tok || strcmp(tok, "site")) return false;
  /* Numbers as profile_write.c writes them: digits only (strtoull would take "-5"). */
  char *end, *number = strtok_r(NULL, " \t", &save);
  if (!number || *number < '0' || *number > '9') return false;
  errno = 0;
  unsigned long long sent = strtoull(number, &end, 10);
  if (*end || errno) return false;
  *sending = sent > 0;
  for (int i = 0; i < 4; i++)
    if (!strtok_r(NULL, " \t", &save)) return false;
  number = strtok_r(NULL, " \t", &save);
  if (!number || *number < '0' || *number > '9') return false; /* no nan, inf or sign */
  double blocks = strtod(number, &end);
  if (*end) return false;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned n = 0;
  *resolved = true;
  while ((tok = strtok_r(NULL, " \t", &save)) && n < NIC_PROF_FRAMES) {
    char *plus = strrchr(tok, '+');
    if (!plus || strncmp(plus, "+0x", 3)) return false;
    *plus = '\0';
    /* As the writer wrote it: hex digits that fit (strtoull would take "-1", "" and clamp an
     * overflow to ULLONG_MAX without a word). */
    const char *hex = plus + 3;
    if (!((*hex >= '0' && *hex <= '9') || (*hex >= 'a' && *hex <= 'f') ||
          (*hex >= 'A' && *hex <= 'F')))
      return false;
    errno = 0;
    uintptr_t off = strtoull(hex, &end, 16), bias;
    if (*end || errno || !decode_path(tok)) return false;
    if (!nic_prof_module_base(tok, &bias)) *resolved = false;
    frames[n++] = bias + off;
  }
  if (!n) return false;
  struct routed *r = sent && *resolved ? slot(nic_prof_hash(frames, n), true) : NULL;
  if (r && site_budget(blocks) > r->budget) r->budget = site_budget(blocks); /* a repeated site */
  return true;
}

/* What is wrong with the file is said once per run: every process of a run (a shell, timeout, the
 * program and its children) loads the same file, and a line from each on stderr fails test
 * suites and build tools that compare it (a test run routed by a profile without a sending site
 * printed 340). The first process to say it marks its descendants with NICMALLOC_SITES_SAID;
 * they say it only with NICMALLOC_VERBOSE=1. */
__attribute__((format(printf, 2, 3))) static void say_once_per_run(const char *path,
                                                                   const char *fmt, ...) {
  const char *said = nic_setting_text(NIC_S_SITES_SAID);
  const bool first = !said || strcmp(said, path);
  va_list ap;
  va_start(ap, fmt);
  nic_log_v(first ? NIC_LOG_WARN : NIC_LOG_INFO, fmt, ap);
  va_end(ap);
  if (first) setenv(nic_setting_row(NIC_S_SITES_SAID)->name, path, 1);
}

bool nic_sites_load(const char *path) {
  const struct nic_config *c = nic_config();
  min_size = c->sites_min_size;
  /* O_NONBLOCK: a FIFO would hold start-up until someone wrote to it. */
  int fd = nic_open_nocancel(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    say_once_per_run(path, "NICMALLOC_SITES=%s cannot be read (%s); running unrouted", path,
                     fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0) nic_close_nocancel(fd);
    return false;
  }
  /* mmap: no malloc at start-up, and no line buffer to refill. */
  char *text =
      st.st_size > 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  nic_close_nocancel(fd);
  unsigned lines = 0, bad = 0, unresolved = 0, sending_sites = 0;
  bool header = false, cut = false;
  static char line[1 << 14];
  for (size_t at = 0, size = text == MAP_FAILED ? 0 : (size_t)st.st_size; at < size;) {
    const char *nl = memchr(text + at, '\n', size - at);
    size_t len = (nl ? (size_t)(nl - text) : size) - at;
    /* Every line is written whole with its newline: one without is what a writer killed in the
     * middle leaves, and the lines before it are still good. */
    if (!nl && lines > 0) {
      cut = true;
      break;
    }
    if (len < sizeof line) {
      memcpy(line, text + at, len);
      line[len] = '\0';
      bool resolved, sending;
      if (lines++ == 0)
        header = !strcmp(line, "# nicmalloc profile 1");
      else if (line[0] && line[0] != '#' && !parse_site(line, &resolved, &sending))
        bad++;
      else if (line[0] && line[0] != '#')
        unresolved += !resolved, sending_sites += sending;
    } else {
      bad++;
    }
    at += len + 1;
  }
  if (text != MAP_FAILED) munmap(text, (size_t)st.st_size);
  if (!header || bad) {
    say_once_per_run(path, "NICMALLOC_SITES=%s is not a nicmalloc profile (%s); running unrouted",
                     path, header ? "malformed site lines" : "no '# nicmalloc profile 1' header");
    memset(table, 0, sizeof table);
    nsites = 0;
    return false;
  }
  if (cut)
    say_once_per_run(
        path, "NICMALLOC_SITES=%s ends in a cut line (its writer stopped?); that line is skipped",
        path);
  /* A profile is made of a whole run, wrappers and shells included (NICMALLOC_PROFILE), and
   * routes the same run: a process that loaded no module of a sending site (timeout, a shell, a
   * pyenv shim, another program of the run) has nothing to route, which is no news on its stderr.
   * A profile with no sending site at all routes nothing anywhere: that is said. */
  if (!nsites && !sending_sites) {
    say_once_per_run(path, "NICMALLOC_SITES=%s names no site that sent bytes; running unrouted",
                     path);
    return false;
  }
  if (!nsites) {
    nic_log_info("NICMALLOC_SITES=%s: none of its %u sending sites lies in modules this process "
                 "loaded (a wrapper, or another program of the profiled run?); running unrouted",
                 path, sending_sites);
    return false;
  }
  if (dropped_sites)
    say_once_per_run(path,
                     "NICMALLOC_SITES=%s: %llu sending sites past the first %u are not routed",
                     path, (unsigned long long)dropped_sites, ROUTE_SLOTS / 2);
  nic_log_info("NICMALLOC_SITES=%s: %llu sites routed, %u not loaded now", path,
               (unsigned long long)nsites, unresolved);
  return true;
}

enum nic_route nic_sites_route(size_t size) {
  if (size < min_size || !nic_thread_ready() || nic_self.scope_depth || nic_self.internal_depth)
    return NIC_ROUTE_AUTO;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned n = nic_prof_capture(frames);
  struct routed *r = n ? slot(nic_prof_hash(frames, n), false) : NULL;
  if (!r) return NIC_ROUTE_AUTO;
  uint64_t before = __atomic_fetch_add(&r->bytes, size, __ATOMIC_RELAXED);
  if (before + size > r->budget) {
    __atomic_sub_fetch(&r->bytes, size, __ATOMIC_RELAXED);
    __atomic_add_fetch(&over_budget, 1, __ATOMIC_RELAXED);
    if (!__atomic_exchange_n(&r->warned, 1, __ATOMIC_RELAXED))
      nic_log_warn("a routed site (0x%lx) reached its budget of %zu bytes "
                   "(NICMALLOC_SITES_BUDGET/_HEADROOM); its further allocations are control",
                   (unsigned long)frames[0], (size_t)r->budget);
    return NIC_ROUTE_AUTO;
  }
  __atomic_add_fetch(&routed_allocs, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&routed_bytes, size, __ATOMIC_RELAXED);
  return NIC_ROUTE_DATAPLANE;
}

void nic_sites_totals(struct nic_sites_totals *out) {
  out->sites = nsites;
  out->routed_allocs = __atomic_load_n(&routed_allocs, __ATOMIC_RELAXED);
  out->routed_bytes = __atomic_load_n(&routed_bytes, __ATOMIC_RELAXED);
  out->over_budget = __atomic_load_n(&over_budget, __ATOMIC_RELAXED);
}
