/* NICMALLOC_PROFILE's file. Every process of a run adds its sites to the one file: a program is
 * often started through a wrapper (timeout, a shell, a pyenv shim) that the preload reaches too,
 * and when each process wrote the file anew, whichever exited last (the wrapper, sending
 * nothing) left its profile. A run is the first process to start profiling and everything it
 * execs or forks: the first sets NICMALLOC_PROFILE_RUN, which its descendants inherit, and the
 * file names its run; a process of another run (an earlier one) replaces the file instead of
 * adding to it. Writers take an exclusive flock on the file, so concurrent exits do not tear it.
 * Forked children start their counts from zero (profile_table.c), so nothing is counted twice.
 * The path is made absolute at start-up, where it is also checked to be writable. */
#define _GNU_SOURCE
#include "profile.h"

#include "config.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RUN_ENV "NICMALLOC_PROFILE_RUN"
#define MAX_MERGED 16384u
#define MERGE_SLOTS (2 * MAX_MERGED)
#define TEXT_BYTES (64u << 20) /* frames text of all sites: virtual, touched as used */
#define NUMBERS 6              /* SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS */

static char path[4096];
static char run[64];
static bool usable;

void nic_profile_file_start(const char *given) {
  int n = 0;
  if (given[0] != '/') {
    char cwd[2048];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    n = snprintf(path, sizeof path, "%s/%s", cwd, given);
  } else {
    n = snprintf(path, sizeof path, "%s", given);
  }
  if (n <= 0 || (size_t)n >= sizeof path) {
    nic_log_warn("NICMALLOC_PROFILE=%s: path too long; no profile", given);
    return;
  }
  const char *inherited = nic_getenv(RUN_ENV);
  if (inherited && *inherited && strlen(inherited) < sizeof run) {
    snprintf(run, sizeof run, "%s", inherited);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(run, sizeof run, "%d-%lld%09ld", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec);
    setenv(RUN_ENV, run, 1);
  }
  /* Said now, not after the whole run. Opening without O_TRUNC leaves the file alone. */
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    nic_log_warn("NICMALLOC_PROFILE=%s cannot be written (%s); no profile", path,
                 fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0) close(fd);
    return;
  }
  close(fd);
  usable = true;
}

struct merged {
  double number[NUMBERS];
  uint32_t text, len; /* frames text in the arena */
};

static struct merged *sites;
static uint32_t *slots; /* index + 1 into sites; 0 = empty */
static char *text;
static uint32_t count, text_used;
static double totals[3]; /* sent_dataplane, sent_other, dropped_samples */

static uint64_t hash_text(const char *s, size_t len) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
  return h;
}

/* Adds one site's numbers under its frames text; false when the tables are full. */
static bool add(const double *number, const char *frames, size_t len) {
  for (uint32_t i = (uint32_t)hash_text(frames, len) & (MERGE_SLOTS - 1);;
       i = (i + 1) & (MERGE_SLOTS - 1)) {
    if (slots[i]) {
      struct merged *m = &sites[slots[i] - 1];
      if (m->len != len || memcmp(text + m->text, frames, len)) continue;
      for (int k = 0; k < NUMBERS; k++)
        m->number[k] += number[k];
      return true;
    }
    if (count >= MAX_MERGED || text_used + len > TEXT_BYTES) return false;
    memcpy(text + text_used, frames, len);
    sites[count] = (struct merged){.text = text_used, .len = (uint32_t)len};
    memcpy(sites[count].number, number, sizeof sites[count].number);
    text_used += (uint32_t)len;
    slots[i] = ++count;
    return true;
  }
}

/* A module path goes on one space-separated line: a space or '%' in it is written %20 / %25
 * (profile_sites.c decodes them). */
static size_t put_path(char *out, size_t cap, const char *p) {
  size_t n = 0;
  for (; *p && n + 3 < cap; p++) {
    if (*p == ' ' || *p == '%') {
      n += (size_t)snprintf(out + n, cap - n, "%%%02X", (unsigned char)*p);
    } else {
      out[n++] = *p;
    }
  }
  out[n] = '\0';
  return n;
}

static void add_own(const struct nic_prof_site *s) {
  char frames[4096], module[1024];
  size_t len = 0;
  for (unsigned i = 0; i < s->nframes && len + 1100 < sizeof frames; i++) {
    uintptr_t bias = 0;
    if (!nic_prof_module_of(s->frames[i], module, sizeof module, &bias)) snprintf(module, 8, "?");
    frames[len++] = ' ';
    len += put_path(frames + len, sizeof frames - len, module);
    len += (size_t)snprintf(frames + len, sizeof frames - len, "+0x%lx",
                            (unsigned long)(s->frames[i] - bias));
  }
  const double number[NUMBERS] = {(double)s->sent, s->est_sent,  (double)s->sampled,
                                  s->est_allocs,   s->est_bytes, s->est_sent_blocks};
  if (len) add(number, frames, len);
}

/* "site N N N N N N frames...": the six numbers, and the frames text with its leading space. */
static bool add_line(const char *line, size_t len) {
  if (len < 5 || memcmp(line, "site ", 5)) return false;
  char copy[8192];
  if (len >= sizeof copy) return false;
  memcpy(copy, line, len);
  copy[len] = '\0';
  double number[NUMBERS];
  char *at = copy + 4;
  for (int k = 0; k < NUMBERS; k++) {
    char *end;
    number[k] = strtod(at, &end);
    if (end == at || *end != ' ' || !(number[k] >= 0)) return false;
    at = end;
  }
  return add(number, at, strlen(at));
}

/* The file's sites and totals, if it is a profile of this run. */
static void take_existing(int fd) {
  struct stat st;
  if (fstat(fd, &st) || st.st_size <= 0) return;
  const size_t size = (size_t)st.st_size;
  char *file = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (file == MAP_FAILED) return;
  char want[128];
  int want_len = snprintf(want, sizeof want, "# run %s\n", run);
  if (memmem(file, size, want, (size_t)want_len) && size > 21 &&
      !memcmp(file, "# nicmalloc profile 1\n", 22)) {
    for (size_t at = 0; at < size;) {
      const char *nl = memchr(file + at, '\n', size - at);
      size_t len = (nl ? (size_t)(nl - file) : size) - at;
      double d, o, n;
      if (sscanf(file + at,
                 "# sample_bytes %*f sent_dataplane %lf sent_other %lf dropped_samples %lf", &d, &o,
                 &n) == 3) {
        totals[0] += d, totals[1] += o, totals[2] += n;
      } else {
        add_line(file + at, len);
      }
      at += len + 1;
    }
  }
  munmap(file, size);
}

static int by_sent(const void *a, const void *b) {
  const struct merged *x = a, *y = b;
  if (x->number[0] != y->number[0]) return x->number[0] < y->number[0] ? 1 : -1;
  return x->number[4] < y->number[4] ? 1 : x->number[4] > y->number[4] ? -1 : 0;
}

void nic_profile_file_write(void) {
  if (!usable) return;
  static struct nic_prof_site own[8192];
  const unsigned n = nic_prof_table_sites(own, sizeof own / sizeof own[0]);
  sites = nic_prof_map(sizeof *sites * MAX_MERGED);
  slots = nic_prof_map(sizeof *slots * MERGE_SLOTS);
  text = nic_prof_map(TEXT_BYTES);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (!sites || !slots || !text || fd < 0 || flock(fd, LOCK_EX)) {
    nic_log_warn("NICMALLOC_PROFILE=%s cannot be written (%s); no profile", path,
                 fd < 0 ? strerror(errno) : "no memory or no lock");
    if (fd >= 0) close(fd);
    return;
  }
  take_existing(fd);
  for (unsigned i = 0; i < n; i++)
    add_own(&own[i]);
  struct nic_sink_totals sent;
  nic_sink_totals(&sent);
  totals[0] += (double)sent.dataplane;
  totals[1] += (double)sent.other;
  totals[2] += (double)nic_prof_table_dropped();
  qsort(sites, count, sizeof *sites, by_sent);
  if (ftruncate(fd, 0) == 0) {
    nic_fdprintf(fd, "# nicmalloc profile 1\n");
    nic_fdprintf(fd,
                 "# sample_bytes %zu sent_dataplane %.0f sent_other %.0f dropped_samples %.0f\n",
                 nic_config()->profile_sample, totals[0], totals[1], totals[2]);
    nic_fdprintf(fd, "# run %s\n", run);
    nic_fdprintf(fd, "# site SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS "
                     "MODULE+0xOFFSET...\n");
    for (uint32_t i = 0; i < count; i++) {
      const struct merged *m = &sites[i];
      nic_fdprintf(fd, "site %.0f %.0f %.0f %.0f %.0f %.0f", m->number[0], m->number[1],
                   m->number[2], m->number[3], m->number[4], m->number[5]);
      if (write(fd, text + m->text, m->len) != (ssize_t)m->len || write(fd, "\n", 1) != 1) break;
    }
  }
  close(fd); /* and the lock with it */
}
