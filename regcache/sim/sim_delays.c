#define _GNU_SOURCE
#include "sim_delays.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DELAY_US 1e7 /* 10 s: anything longer is a typo, not a NIC */

/* Built-in delays in microseconds, sorted. A synthetic shape, not a measurement: what a small
 * send's completion looks like on a loaded host, a few microseconds typically (doorbell, WQE
 * fetch, DMA read, wire: perftest-style latencies on ConnectX parts are 1-5 us) with a tail from
 * interrupt moderation, scheduling and PCIe contention out to 200 us. Median 5 us, mean ~18 us.
 * Long enough that a buffer freed or rewritten right after post is caught in the act. */
#define U(us) ((us)*1000ull)
static const uint64_t builtin_ns[64] = {
    U(2),  U(2),  U(3),  U(3),  U(3),  U(3),  U(3),  U(4),  U(4),  U(4),   U(4),   U(4),  U(4),
    U(4),  U(4),  U(4),  U(4),  U(5),  U(5),  U(5),  U(5),  U(5),  U(5),   U(5),   U(5),  U(5),
    U(5),  U(5),  U(5),  U(5),  U(5),  U(5),  U(5),  U(5),  U(6),  U(6),   U(6),   U(6),  U(6),
    U(7),  U(7),  U(7),  U(8),  U(8),  U(8),  U(9),  U(9),  U(10), U(11),  U(12),  U(13), U(14),
    U(16), U(18), U(20), U(24), U(28), U(35), U(45), U(60), U(80), U(110), U(150), U(200)};

/* splitmix64: tiny, fast, and every seed (0 too) gives a good sequence. */
static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void nic_sim_delays_builtin(struct nic_sim_delays *d, uint64_t seed) {
  *d = (struct nic_sim_delays){.ns = builtin_ns, .n = 64, .state = seed, .builtin = true};
}

void nic_sim_delays_fixed(struct nic_sim_delays *d, uint64_t ns) {
  *d = (struct nic_sim_delays){.ns = NULL, .n = 1, .fixed_ns = ns};
}

/* One line: empty, a comment, or a delay. Returns 1 with *ns set, 0 for nothing, -1 if bad. */
static int parse_line(char *text, uint64_t *ns) {
  char *hash = strchr(text, '#');
  if (hash) *hash = '\0';
  while (isspace((unsigned char)*text))
    text++;
  if (!*text) return 0;
  if (!isdigit((unsigned char)*text) && *text != '.') return -1; /* no sign, nan, inf */
  char *end;
  errno = 0;
  double us = strtod(text, &end);
  while (isspace((unsigned char)*end))
    end++;
  if (errno || *end || !(us >= 0 && us <= MAX_DELAY_US)) return -1; /* also rejects NaN */
  *ns = (uint64_t)(us * 1000.0 + 0.5);
  return 1;
}

int nic_sim_delays_load(struct nic_sim_delays *d, const char *path, uint64_t seed, unsigned *line) {
  *line = 0;
  /* A regular file only: a FIFO would hold the backend's start until someone wrote to it, and a
   * device such as /dev/zero would never end its first line. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -errno;
  struct stat st;
  FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "re") : NULL;
  if (!f) {
    close(fd);
    return -ESPIPE;
  }
  uint64_t *table = NULL;
  size_t n = 0, cap = 0, buflen = 0;
  char *buf = NULL;
  int rc = 0;
  for (unsigned no = 1; getline(&buf, &buflen, f) >= 0; no++) {
    uint64_t ns;
    int r = parse_line(buf, &ns);
    if (r < 0) {
      *line = no;
      rc = -EINVAL;
      break;
    }
    if (!r) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      uint64_t *bigger = realloc(table, cap * sizeof *table);
      if (!bigger) {
        rc = -ENOMEM;
        break;
      }
      table = bigger;
    }
    table[n++] = ns;
  }
  if (!rc && ferror(f)) rc = -EIO;
  if (!rc && !n) rc = -EINVAL; /* a file with no delays is a mistake, not "no delay" */
  free(buf);
  fclose(f);
  if (rc) {
    free(table);
    return rc;
  }
  *d = (struct nic_sim_delays){.ns = table, .n = n, .state = seed, .owned = true};
  return 0;
}

uint64_t nic_sim_delays_next(struct nic_sim_delays *d) {
  if (!d->ns) return d->fixed_ns;
  /* Multiply-shift maps 64 random bits onto [0, n) without modulo bias worth the name. */
  uint64_t r = next_random(&d->state);
  return d->ns[(size_t)(((unsigned __int128)r * d->n) >> 64)];
}

void nic_sim_delays_release(struct nic_sim_delays *d) {
  if (d->owned) free((void *)d->ns);
  d->ns = NULL;
  d->owned = false;
}
