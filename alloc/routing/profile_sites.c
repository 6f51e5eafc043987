/* NICMALLOC_SITES: routes the allocations of the sites a profile (profile.c's format) saw
 * sending bytes to dataplane memory. Each sending site is kept as module + offsets, and turned
 * back into addresses from its modules' load biases in this process (profile_modules.c), so the
 * site hash computed at allocation time matches under ASLR. Sites whose modules are not loaded at
 * start-up wait: after a dlopen (interpose_dlopen.h) the routing path scans the loaded objects
 * again and routes the sites they complete. dlopen is counted on entry, and the loader allocates
 * before it adds the object: a dlopen is taken as seen once a scan finds the loader's count of
 * loads moved, or after a few scans (dlopen(NULL), a library already loaded). Once a second
 * the path looks anyway. A site that never completes, in a process that
 * loaded another of its modules (so the profile is of this program), is named at exit.
 * An allocation is tested first by where the program's call returns to (the exported malloc,
 * calloc and new pass it down; other calls walk one frame for it) against the routed sites' first
 * frames, and walks the stack (as far as the sites' frames go) only when that matches: most
 * allocations are of no routed site, and the walk cost them 100 ns and more.
 * The budget (NICMALLOC_SITES_BUDGET) caps the bytes each site routes over the run (requested
 * bytes, not live ones: frees do not give budget back), so a mis-profiled site cannot pin the
 * world; over it, the site allocates from the control heap after one warning. */
#define _GNU_SOURCE
#include "profile.h"

#include "config.h"
#include "interpose_dlopen.h"
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
#include <time.h>
#include <unistd.h>

#define ROUTE_SLOTS 4096u
#define SITES_MAX (ROUTE_SLOTS / 2)

struct routed {
  uint64_t hash; /* 0 = empty; set once, by the resolver */
  uint64_t bytes;
  uint64_t budget;
  int warned;
};

/* A sending site of the profile as the file names it: routed once all its modules are loaded. */
struct site {
  uintptr_t offset[NIC_PROF_FRAMES];
  int16_t module[NIC_PROF_FRAMES];
  uint8_t n;
  bool routed;
  uint64_t budget;
};

static struct routed table[ROUTE_SLOTS];
/* The routed sites' first frames, a set (0 = empty; set once, by the resolver). */
static uintptr_t firsts[ROUTE_SLOTS];
static unsigned frames_max; /* the most frames of a routed site */
static struct site sites[SITES_MAX];
static unsigned nstored;
static size_t min_size;
static const char *sites_path;
static uint64_t nsites, routed_allocs, routed_bytes, over_budget;
/* Sending sites not kept: past SITES_MAX, or naming a module past the module table's room
 * (profile_modules.c). Said apart, as the two limits differ. */
static uint64_t dropped_sites, dropped_for_modules;
/* Sites still waiting for a module, and when to look for new modules again. */
static unsigned waiting;
static unsigned long dlopens_seen;
static unsigned long long loads_seen; /* the loader's count at the last scan */
static unsigned tries;                /* scans since the last dlopen taken as seen */
#define TRIES_MAX 64
static time_t next_look;
static int looking; /* the pid of the process whose thread looks: a fork cannot leave it held */
static __thread unsigned until_clock __attribute__((tls_model("initial-exec")));

static struct routed *slot(uint64_t hash, bool insert) {
  for (uint32_t i = (uint32_t)(hash >> 20) & (ROUTE_SLOTS - 1);; i = (i + 1) & (ROUTE_SLOTS - 1)) {
    const uint64_t h = __atomic_load_n(&table[i].hash, __ATOMIC_ACQUIRE);
    if (h == hash) return &table[i];
    if (h) continue;
    if (!insert) return NULL;
    __atomic_add_fetch(&nsites, 1, __ATOMIC_RELAXED);
    return &table[i];
  }
}

static bool first_known(uintptr_t first, bool insert) {
  for (uint32_t i = (uint32_t)((first * 0x9e3779b97f4a7c15ull) >> 52) & (ROUTE_SLOTS - 1);;
       i = (i + 1) & (ROUTE_SLOTS - 1)) {
    const uintptr_t f = __atomic_load_n(&firsts[i], __ATOMIC_ACQUIRE);
    if (f == first) return true;
    if (f) continue;
    if (insert) __atomic_store_n(&firsts[i], first, __ATOMIC_RELEASE);
    return insert;
  }
}

/* Routes the sites whose modules are all loaded now. The constructor, or the one looker. */
static void resolve(void) {
  nic_prof_modules_scan(&loads_seen);
  for (unsigned i = 0; i < nstored; i++) {
    struct site *s = &sites[i];
    uintptr_t frames[NIC_PROF_FRAMES], bias;
    unsigned n = 0;
    while (!s->routed && n < s->n && nic_prof_module_loaded(s->module[n], &bias)) {
      frames[n] = bias + s->offset[n];
      n++;
    }
    if (s->routed || n < s->n) continue;
    const uint64_t hash = nic_prof_hash(frames, n);
    struct routed *r = slot(hash, true);
    if (r->budget < s->budget) __atomic_store_n(&r->budget, s->budget, __ATOMIC_RELAXED);
    __atomic_store_n(&r->hash, hash, __ATOMIC_RELEASE); /* after its budget */
    if (n > __atomic_load_n(&frames_max, __ATOMIC_RELAXED))
      __atomic_store_n(&frames_max, n, __ATOMIC_RELAXED);
    first_known(frames[0], true); /* after the site: a match finds it */
    s->routed = true;
    __atomic_sub_fetch(&waiting, 1, __ATOMIC_RELEASE);
  }
}

/* From the routing path while sites wait: after a dlopen, or once a second, one thread looks. */
static void look_for_modules(void) {
  const unsigned long dlopens = __atomic_load_n(&nic_dlopen_calls, __ATOMIC_RELAXED);
  struct timespec now;
  if (dlopens == __atomic_load_n(&dlopens_seen, __ATOMIC_RELAXED)) {
    if (until_clock--) return; /* the clock every 256 requests: a vDSO call is not free */
    until_clock = 255;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    if (now.tv_sec < __atomic_load_n(&next_look, __ATOMIC_RELAXED)) return;
  }
  int owner = 0;
  const int self = getpid();
  if (!__atomic_compare_exchange_n(&looking, &owner, self, false, __ATOMIC_ACQUIRE,
                                   __ATOMIC_RELAXED) &&
      (owner == self || /* held in the parent when it forked us */
       !__atomic_compare_exchange_n(&looking, &owner, self, false, __ATOMIC_ACQUIRE,
                                    __ATOMIC_RELAXED)))
    return;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const unsigned long long loads_before = loads_seen;
  resolve();
  if (loads_seen != loads_before || ++tries >= TRIES_MAX) {
    __atomic_store_n(&dlopens_seen, dlopens, __ATOMIC_RELAXED);
    tries = 0;
  }
  __atomic_store_n(&next_look, now.tv_sec + 1, __ATOMIC_RELAXED);
  __atomic_store_n(&looking, 0, __ATOMIC_RELEASE);
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
 * a site that sent bytes is kept (*sending). Only those name modules to look up. */
static bool parse_site(char *line, bool *sending) {
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
  struct site s = {.budget = site_budget(blocks)};
  bool known = true; /* every module has a place in the table */
  while ((tok = strtok_r(NULL, " \t", &save)) && s.n < NIC_PROF_FRAMES) {
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
    s.offset[s.n] = strtoull(hex, &end, 16);
    if (*end || errno || !decode_path(tok)) return false;
    if (sent) {
      const int id = nic_prof_module_intern(tok);
      known &= id >= 0;
      s.module[s.n] = (int16_t)id;
    }
    s.n++;
  }
  if (!s.n) return false;
  if (!sent) return true;
  if (!known)
    dropped_for_modules++;
  else if (nstored == SITES_MAX)
    dropped_sites++;
  else
    sites[nstored++] = s;
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
  unsigned lines = 0, bad = 0, sending_sites = 0;
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
      bool sending;
      if (lines++ == 0)
        header = !strcmp(line, "# nicmalloc profile 1");
      else if (line[0] && line[0] != '#' && !parse_site(line, &sending))
        bad++;
      else if (line[0] && line[0] != '#')
        sending_sites += sending;
    } else {
      bad++;
    }
    at += len + 1;
  }
  if (text != MAP_FAILED) munmap(text, (size_t)st.st_size);
  if (!header || bad) {
    say_once_per_run(path, "NICMALLOC_SITES=%s is not a nicmalloc profile (%s); running unrouted",
                     path, header ? "malformed site lines" : "no '# nicmalloc profile 1' header");
    nstored = 0;
    dropped_sites = dropped_for_modules = 0;
    return false;
  }
  if (cut)
    say_once_per_run(
        path, "NICMALLOC_SITES=%s ends in a cut line (its writer stopped?); that line is skipped",
        path);
  /* A profile is made of a whole run, wrappers and shells included (NICMALLOC_PROFILE), and
   * routes the same run: a process that loaded no module of a sending site (timeout, a shell, a
   * pyenv shim, another program of the run) has nothing to route now, which is no news on its
   * stderr; it still routes the sites of modules it loads later. A profile with no sending site
   * at all routes nothing anywhere: that is said. */
  if (!sending_sites) {
    say_once_per_run(path, "NICMALLOC_SITES=%s names no site that sent bytes; running unrouted",
                     path);
    return false;
  }
  if (dropped_sites)
    say_once_per_run(path,
                     "NICMALLOC_SITES=%s: %llu sending sites past the first %u are not routed",
                     path, (unsigned long long)dropped_sites, SITES_MAX);
  if (dropped_for_modules)
    say_once_per_run(path,
                     "NICMALLOC_SITES=%s: %llu sending sites name modules past the first %u "
                     "(or past %u KiB of module names) and are not routed",
                     path, (unsigned long long)dropped_for_modules, NIC_PROF_MODULES_MAX,
                     NIC_PROF_MODULE_NAMES_BYTES >> 10);
  sites_path = path;
  waiting = nstored;
  dlopens_seen = __atomic_load_n(&nic_dlopen_calls, __ATOMIC_RELAXED);
  resolve();
  if (!nsites)
    nic_log_info("NICMALLOC_SITES=%s: none of its %u sending sites lies in modules this process "
                 "loaded (a wrapper, or another program of the profiled run?); routing those of "
                 "modules it loads later",
                 path, sending_sites);
  else
    nic_log_info("NICMALLOC_SITES=%s: %llu sites routed, %u wait for modules not loaded now", path,
                 (unsigned long long)nsites, waiting);
  return nstored > 0;
}

enum nic_route nic_sites_route(size_t size, uintptr_t caller) {
  if (size < min_size || !nic_thread_ready() || nic_self.scope_depth || nic_self.internal_depth)
    return NIC_ROUTE_AUTO;
  if (__atomic_load_n(&waiting, __ATOMIC_RELAXED)) look_for_modules();
  if (!__atomic_load_n(&nsites, __ATOMIC_RELAXED)) return NIC_ROUTE_AUTO;
  /* A caller in this library: an exported function that did not inline the allocation path. */
  if ((!caller || nic_prof_own(caller)) && !nic_prof_capture_n(&caller, 1)) return NIC_ROUTE_AUTO;
  if (!first_known(caller, false)) return NIC_ROUTE_AUTO;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned n = nic_prof_capture_n(frames, __atomic_load_n(&frames_max, __ATOMIC_RELAXED));
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

/* Sites still waiting at exit, named when this process is the profiled program: it loaded another
 * module of such a site (the C library and the loader, which every process has, do not count). */
void nic_sites_finish(void) {
  if (!__atomic_load_n(&waiting, __ATOMIC_ACQUIRE)) return;
  unsigned missing = 0;
  int named = -1;
  for (unsigned i = 0; i < nstored; i++) {
    const struct site *s = &sites[i];
    if (s->routed) continue;
    bool ours = false;
    int absent = -1;
    for (unsigned k = 0; k < s->n; k++) {
      uintptr_t bias;
      const char *name = nic_prof_module_name(s->module[k]);
      if (!nic_prof_module_loaded(s->module[k], &bias))
        absent = absent < 0 ? s->module[k] : absent;
      else if (strncmp(name, "libc.so", 7) && strncmp(name, "ld-linux", 8))
        ours = true;
    }
    if (ours && absent >= 0) missing++, named = named < 0 ? absent : named;
  }
  if (missing)
    nic_log_warn("NICMALLOC_SITES=%s: %u sending sites were never routed: their module %s%s was "
                 "never loaded by this process (renamed, or not loaded in this run?)",
                 sites_path, missing, nic_prof_module_name(named),
                 missing > 1 ? " (or others)" : "");
}
