/* NICMALLOC_PROFILE's file. Every process of a run adds its sites to the one file: a program is
 * often started through a wrapper (timeout, a shell, a pyenv shim) that the preload reaches too,
 * and when each process wrote the file anew, whichever exited last (the wrapper, sending
 * nothing) left its profile. A run is the first process to start profiling and everything it
 * execs or forks: the first sets NICMALLOC_PROFILE_RUN, which its descendants inherit, and the
 * file names its run; a process of another run (an earlier one) replaces the file instead of
 * adding to it. Forked children start their counts from zero (profile_table.c), so nothing is
 * counted twice.
 * The file is never written in place: a writer takes an exclusive flock on the current file,
 * reads it, writes the merged profile to a new file in the same directory and renames that over
 * the path, so the path always holds a complete profile, the old one or the new one, whenever the
 * writer is killed. A writer that waited for the lock finds the path renamed over and locks the
 * new file instead; when there is no file yet, the first new one is put in place only if the path
 * is still free (RENAME_NOREPLACE), and a writer that lost that race merges into the winner's.
 * What may be written where is alloc/base/safe_path.c's business, and the new file's making
 * alloc/base/file_aside.c's.
 * Besides at exit, a process writes what it counted since its last write every few seconds from
 * the reaper thread, so a daemon stopped by SIGTERM (or SIGKILL, or _exit) loses at most that
 * interval: this needs no signal handler, which would change the program's signal dispositions
 * and could not merge from signal context anyway. */
#define _GNU_SOURCE
#include "profile.h"

#include "clock.h"
#include "config.h"
#include "file_aside.h"
#include "forklock.h"
#include "log.h"
#include "nocancel.h"
#include "safe_path.h"
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_MERGED 16384u
#define MERGE_SLOTS (2 * MAX_MERGED)
#define TEXT_BYTES (64u << 20) /* frames text of all sites: virtual, touched as used */
#define NUMBERS 6              /* SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS */
#define OWN_SITES 8192u
#define DONE_SLOTS 16384u
#define PERIOD_MS 5000u
#define LOCK_WAIT_MS 10000u /* another user may hold a lock on a file it can read */

static char run[64];
static struct nic_safe_path path = {.setting = "NICMALLOC_PROFILE", .escapes = "u"};
static bool usable;
static pthread_mutex_t write_mutex = PTHREAD_MUTEX_INITIALIZER; /* reaper thread and exit */
static bool finished;
static uint64_t last_write_ms;

void nic_profile_file_start(const char *given) {
  const char *inherited = nic_setting_text(NIC_S_PROFILE_RUN);
  if (inherited && strlen(inherited) < sizeof run) {
    snprintf(run, sizeof run, "%s", inherited);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(run, sizeof run, "%d-%lld%09ld", (int)getpid(), (long long)ts.tv_sec, ts.tv_nsec);
    setenv(nic_setting_row(NIC_S_PROFILE_RUN)->name, run, 1);
  }
  usable = nic_safe_path_start(&path, given);
  last_write_ms = nic_now_ms();
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

/* The file's sites and totals, if it is a profile of this run (true then). */
static bool take_existing(int fd) {
  struct stat st;
  if (fstat(fd, &st) || st.st_size <= 0) return false;
  const size_t size = (size_t)st.st_size;
  char *file = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (file == MAP_FAILED) return false;
  char want[128];
  int want_len = snprintf(want, sizeof want, "# run %s\n", run);
  const bool ours = memmem(file, size, want, (size_t)want_len) && size > 21 &&
                    !memcmp(file, "# nicmalloc profile 1\n", 22);
  if (ours) {
    for (size_t at = 0; at < size;) {
      const char *nl = memchr(file + at, '\n', size - at);
      size_t len = (nl ? (size_t)(nl - file) : size) - at;
      /* sscanf only on a copy of the header line: on the mapping itself it would measure the
       * rest of the file at every line, and read past its end when the size is a whole number of
       * pages. */
      char header[256];
      double d, o, n;
      if (len > 15 && len < sizeof header && !memcmp(file + at, "# sample_bytes ", 15)) {
        memcpy(header, file + at, len);
        header[len] = '\0';
        if (sscanf(header,
                   "# sample_bytes %*f sent_dataplane %lf sent_other %lf dropped_samples %lf", &d,
                   &o, &n) == 3)
          totals[0] += d, totals[1] += o, totals[2] += n;
      } else {
        add_line(file + at, len);
      }
      at += len + 1;
    }
  }
  munmap(file, size);
  return ours;
}

static int by_sent(const void *a, const void *b) {
  const struct merged *x = a, *y = b;
  if (x->number[0] != y->number[0]) return x->number[0] < y->number[0] ? 1 : -1;
  return x->number[4] < y->number[4] ? 1 : x->number[4] > y->number[4] ? -1 : 0;
}

/* What this process has written so far, by site, so that each write adds only what was counted
 * since (the file already holds the rest). */
struct done {
  uint64_t hash;
  double number[NUMBERS];
};
static struct done *done;
static double done_totals[3];
static bool written;
static struct nic_prof_site own[OWN_SITES];
static double own_number[OWN_SITES][NUMBERS];
static double own_totals[3];

static struct done *done_of(uint64_t hash) {
  for (uint32_t i = (uint32_t)(hash * 0x9e3779b97f4a7c15ull >> 40) & (DONE_SLOTS - 1);;
       i = (i + 1) & (DONE_SLOTS - 1))
    if (done[i].hash == hash || !done[i].hash) return &done[i];
}

/* Output through one buffer; a failed write sticks. */
static char out[1 << 16];
static size_t out_len;
static bool out_failed;

static void out_flush(int fd) {
  for (size_t at = 0; at < out_len && !out_failed;) {
    ssize_t r = nic_write_nocancel(fd, out + at, out_len - at);
    if (r > 0) {
      at += (size_t)r;
    } else if (r < 0 && errno != EINTR) {
      out_failed = true;
    }
  }
  out_len = 0;
}

static void out_put(int fd, const char *s, size_t len) {
  while (len) {
    if (out_len == sizeof out) out_flush(fd);
    size_t n = len < sizeof out - out_len ? len : sizeof out - out_len;
    memcpy(out + out_len, s, n);
    out_len += n, s += n, len -= n;
  }
}

static void out_printf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_printf(int fd, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n > 0) out_put(fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static bool write_profile(int fd) {
  out_len = 0;
  out_failed = false;
  out_printf(fd, "# nicmalloc profile 1\n");
  out_printf(fd, "# sample_bytes %zu sent_dataplane %.0f sent_other %.0f dropped_samples %.0f\n",
             nic_config()->profile_sample, totals[0], totals[1], totals[2]);
  out_printf(fd, "# run %s\n", run);
  out_printf(fd, "# site SENT EST_SENT SAMPLED EST_ALLOCS EST_BYTES EST_SENT_BLOCKS "
                 "MODULE+0xOFFSET...\n");
  for (uint32_t i = 0; i < count; i++) {
    const struct merged *m = &sites[i];
    out_printf(fd, "site %.0f %.0f %.0f %.0f %.0f %.0f", m->number[0], m->number[1], m->number[2],
               m->number[3], m->number[4], m->number[5]);
    out_put(fd, text + m->text, m->len);
    out_put(fd, "\n", 1);
  }
  out_flush(fd);
  return !out_failed;
}

/* Descriptors open during a write: the directory, the current file, the new file (noted with
 * file_aside.h, so that a forked child closes its copies). */
enum { DIR_FD, CUR_FD, NEW_FD, HELD };
static int open_fds[HELD] = {-1, -1, -1};

static void fd_close(int slot) {
  nic_aside_close(open_fds[slot]);
  open_fds[slot] = -1;
}

/* flock, waiting at most LOCK_WAIT_MS. */
static bool lock_file(int fd) {
  const uint64_t until = nic_now_ms() + LOCK_WAIT_MS;
  long pause_ns = 1000000;
  while (flock(fd, LOCK_EX | LOCK_NB)) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || nic_now_ms() > until) return false;
    nic_pause_nocancel(pause_ns);
    if (pause_ns < 32000000) pause_ns *= 2;
  }
  return true;
}

/* Counts of this process not yet in the file: all of them when the file is not of this run. */
static void add_own_counts(unsigned n, bool merge) {
  for (unsigned i = 0; i < n; i++) {
    const struct done *d = merge ? done_of(own[i].hash) : NULL;
    struct nic_prof_site s = own[i];
    double number[NUMBERS];
    memcpy(number, own_number[i], sizeof number);
    if (d && d->hash)
      for (int k = 0; k < NUMBERS; k++)
        number[k] -= d->number[k];
    bool any = false;
    for (int k = 0; k < NUMBERS; k++)
      any |= number[k] > 0;
    if (!any && merge) continue;
    s.sent = (uint64_t)number[0], s.est_sent = number[1], s.sampled = (uint64_t)number[2];
    s.est_allocs = number[3], s.est_bytes = number[4], s.est_sent_blocks = number[5];
    add_own(&s);
  }
  for (int k = 0; k < 3; k++)
    totals[k] += own_totals[k] - (merge ? done_totals[k] : 0);
}

enum attempt { WRITTEN, RETRY, FAILED };

static enum attempt write_attempt(unsigned n) {
  char name[NAME_MAX + 1], tmp[NAME_MAX + 32];
  nic_aside_lock();
  int dirfd = open_fds[DIR_FD] = nic_aside_note(nic_safe_path_open_dir(&path, name));
  int cur = dirfd < 0 ? -2 : nic_aside_note(nic_safe_path_open_file(&path, dirfd, name));
  open_fds[CUR_FD] = cur;
  nic_aside_unlock();
  if (cur == -2) return FAILED;
  if (cur >= 0) {
    struct stat held, now;
    if (!lock_file(cur)) {
      nic_log_warn_once("NICMALLOC_PROFILE=%s: locked by another process for %u s; not written",
                        path.given_abs, LOCK_WAIT_MS / 1000);
      return FAILED;
    }
    /* Renamed over while we waited: lock the new one. */
    if (fstat(cur, &held) || fstatat(dirfd, name, &now, AT_SYMLINK_NOFOLLOW) ||
        held.st_ino != now.st_ino || held.st_dev != now.st_dev)
      return RETRY;
  }
  /* Only with the current file locked, when no other writer of a live process is between
   * nic_aside_create and its rename but one that found no file to lock, which the age spares. */
  if (cur >= 0) nic_aside_remove_stale(dirfd, name);
  count = text_used = 0;
  memset(slots, 0, sizeof *slots * MERGE_SLOTS);
  memset(totals, 0, sizeof totals);
  const bool merge = cur >= 0 && take_existing(cur);
  add_own_counts(n, merge);
  qsort(sites, count, sizeof *sites, by_sent);
  struct stat cur_st;
  const bool have_cur = cur >= 0 && !fstat(cur, &cur_st);
  int fd = open_fds[NEW_FD] =
      nic_aside_create(dirfd, name, tmp, sizeof tmp, have_cur ? &cur_st : NULL);
  if (fd < 0) {
    nic_log_warn_once("NICMALLOC_PROFILE=%s: no new file can be made next to it (%s); not written",
                      path.given_abs, strerror(errno));
    return FAILED;
  }
  const bool ok = write_profile(fd);
  const int saved = errno;
  fd_close(NEW_FD);
  if (!ok) {
    unlinkat(dirfd, tmp, 0);
    nic_log_warn_once("NICMALLOC_PROFILE=%s: cannot be written (%s); the previous profile stays",
                      path.given_abs, strerror(saved));
    return FAILED;
  }
  /* With the current file locked, a plain rename; with none, only if none appeared meanwhile. */
  int rc = cur >= 0 ? renameat(dirfd, tmp, dirfd, name)
                    : renameat2(dirfd, tmp, dirfd, name, RENAME_NOREPLACE);
  if (rc && cur < 0 && (errno == EINVAL || errno == ENOSYS)) { /* a file system without it */
    rc = linkat(dirfd, tmp, dirfd, name, 0);
    if (rc == 0 || errno == EEXIST) unlinkat(dirfd, tmp, 0);
  }
  if (rc) {
    const int why = errno;
    unlinkat(dirfd, tmp, 0);
    if (why == EEXIST) return RETRY;
    nic_log_warn_once("NICMALLOC_PROFILE=%s cannot be replaced (%s); not written", path.given_abs,
                      strerror(why));
    return FAILED;
  }
  return WRITTEN;
}

/* Writes what this process counted since its last write; at exit (final) even when that is
 * nothing, if it never wrote, so that a run leaves a profile. */
static void write_now(bool final) {
  pthread_mutex_lock(&write_mutex);
  if (finished || (!sites && !(sites = nic_prof_map(sizeof *sites * MAX_MERGED))) ||
      (!slots && !(slots = nic_prof_map(sizeof *slots * MERGE_SLOTS))) ||
      (!text && !(text = nic_prof_map(TEXT_BYTES))) ||
      (!done && !(done = nic_prof_map(sizeof *done * DONE_SLOTS)))) {
    if (!finished) nic_log_warn_once("NICMALLOC_PROFILE: no memory to write the profile");
    if (final) __atomic_store_n(&finished, true, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&write_mutex);
    return;
  }
  __atomic_store_n(&finished, final, __ATOMIC_RELAXED);
  __atomic_store_n(&last_write_ms, nic_now_ms(), __ATOMIC_RELAXED);
  const unsigned n = nic_prof_table_sites(own, OWN_SITES);
  bool changed = !written && final;
  for (unsigned i = 0; i < n; i++) {
    const struct nic_prof_site *s = &own[i];
    const double number[NUMBERS] = {(double)s->sent, s->est_sent,  (double)s->sampled,
                                    s->est_allocs,   s->est_bytes, s->est_sent_blocks};
    memcpy(own_number[i], number, sizeof number);
    const struct done *d = done_of(s->hash);
    changed |= !d->hash || memcmp(d->number, number, sizeof number);
  }
  struct nic_sink_totals sent;
  nic_sink_totals(&sent);
  own_totals[0] = (double)sent.dataplane;
  own_totals[1] = (double)sent.other;
  own_totals[2] = (double)nic_prof_table_dropped();
  changed |= memcmp(own_totals, done_totals, sizeof own_totals) != 0;
  enum attempt a = changed ? RETRY : FAILED;
  for (int tries = 0; a == RETRY && tries < 64; tries++) {
    a = write_attempt(n);
    fd_close(CUR_FD);
    fd_close(DIR_FD);
  }
  if (a == WRITTEN) {
    written = true;
    for (unsigned i = 0; i < n; i++) {
      struct done *d = done_of(own[i].hash);
      d->hash = own[i].hash;
      memcpy(d->number, own_number[i], sizeof d->number);
    }
    memcpy(done_totals, own_totals, sizeof done_totals);
  }
  pthread_mutex_unlock(&write_mutex);
}

void nic_profile_file_write(void) {
  if (usable) write_now(true);
}

void nic_profile_file_tick(void) {
  if (!usable || __atomic_load_n(&finished, __ATOMIC_RELAXED) ||
      nic_now_ms() - __atomic_load_n(&last_write_ms, __ATOMIC_RELAXED) < PERIOD_MS)
    return;
  write_now(false);
}

/* The child's counts start from zero (profile_table.c), and so does what it has written. A write
 * in progress in the parent is the parent's: file_aside.c closes the child's copies of its
 * files. */
static void after_fork_child(void) {
  open_fds[DIR_FD] = open_fds[CUR_FD] = open_fds[NEW_FD] = -1;
  pthread_mutex_init(&write_mutex, NULL);
  if (done) memset(done, 0, sizeof *done * DONE_SLOTS);
  memset(done_totals, 0, sizeof done_totals);
  written = false;
  last_write_ms = nic_now_ms();
}
NIC_FORK_CHILD(profile_file, NIC_FORK_PROFILE_FILE, after_fork_child);
