/* How much more memory the process's memory cgroups let it fault in. A chunk is prefaulted
 * whole; past a cgroup's limit the kernel answers MADV_POPULATE_WRITE with the OOM killer, not
 * an error, so the only way to get ENOMEM instead is to look first. Reads sysfs and procfs with
 * plain system calls into stack buffers: this runs under the chunk lock, with no malloc. */
#define _GNU_SOURCE
#include "memcg.h"

#include "clock.h"
#include "nocancel.h"
#include "proc_own.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static ssize_t read_fd(int fd, char *buf, size_t size) {
  if (fd < 0) return -1;
  ssize_t n = nic_read_nocancel(fd, buf, size - 1);
  nic_close_nocancel(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

static ssize_t read_file(const char *path, char *buf, size_t size) {
  return read_fd(nic_open_nocancel(path, O_RDONLY | O_CLOEXEC), buf,
                 size); /* malloc is no cancellation point */
}

static ssize_t read_own_file(const char *name, char *buf, size_t size) {
  return read_fd(nic_proc_own_open(name, O_RDONLY | O_CLOEXEC), buf, size);
}

/* A number file; "max" (cgroup v2's no limit) and anything unreadable are SIZE_MAX. */
static size_t read_bytes(const char *dir, const char *name) {
  char path[512], buf[64];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) return SIZE_MAX;
  if (read_file(path, buf, sizeof buf) <= 0 || buf[0] < '0' || buf[0] > '9') return SIZE_MAX;
  return (size_t)strtoull(buf, NULL, 10);
}

/* Page cache the kernel reclaims before it kills: the file LRU lists of memory.stat. */
static size_t reclaimable(const char *dir, bool v1) {
  char path[512], buf[4096]; /* the file LRU lines come well within it */
  if ((size_t)snprintf(path, sizeof path, "%s/memory.stat", dir) >= sizeof path) return 0;
  if (read_file(path, buf, sizeof buf) <= 0) return 0;
  const char *keys[2] = {v1 ? "total_active_file " : "active_file ",
                         v1 ? "total_inactive_file " : "inactive_file "};
  size_t sum = 0;
  for (int k = 0; k < 2; k++) {
    size_t len = strlen(keys[k]);
    for (const char *line = buf; line && *line;) {
      if (!strncmp(line, keys[k], len)) {
        sum += (size_t)strtoull(line + len, NULL, 10);
        break;
      }
      line = strchr(line, '\n');
      if (line) line++;
    }
  }
  return sum;
}

/* cgroup v1 writes "no limit" as the largest page-aligned long (v2 writes "max", read as
 * SIZE_MAX); no machine has 4 EiB, so any limit from here up bounds nothing. */
#define NO_LIMIT_MIN ((size_t)1 << 62)

size_t nic_memcg_room_up_from(const char *mount, const char *cgroup_path, bool v1) {
  char dir[512];
  if ((size_t)snprintf(dir, sizeof dir, "%s%s", mount, cgroup_path) >= sizeof dir) return SIZE_MAX;
  if (access(dir, R_OK) != 0) return SIZE_MAX;
  const size_t mount_len = strlen(mount);
  size_t room = SIZE_MAX;
  for (;;) {
    /* Usage and memory.stat (a costly read, on every step backed) only under a limit. */
    const size_t limit = read_bytes(dir, v1 ? "memory.limit_in_bytes" : "memory.max");
    const size_t usage = limit < NO_LIMIT_MIN
                             ? read_bytes(dir, v1 ? "memory.usage_in_bytes" : "memory.current")
                             : SIZE_MAX;
    if (limit < NO_LIMIT_MIN && usage != SIZE_MAX) {
      size_t cache = reclaimable(dir, v1);
      size_t used = usage - (cache < usage ? cache : usage);
      size_t here = limit > used ? limit - used : 0;
      if (here < room) room = here;
    }
    char *slash = strrchr(dir, '/');
    if (!slash || (size_t)(slash - dir) < mount_len) break;
    *slash = '\0';
  }
  return room;
}

static size_t look_up_headroom(void) {
  char buf[2048];
  if (read_own_file("cgroup", buf, sizeof buf) <= 0) return SIZE_MAX;
  size_t room = SIZE_MAX;
  for (char *line = buf, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    /* "id:controllers:path"; cgroup v2 is "0::path", v1 lists memory among its controllers. */
    char *controllers = strchr(line, ':');
    char *path = controllers ? strchr(controllers + 1, ':') : NULL;
    if (!path) continue;
    *path++ = '\0';
    controllers++;
    size_t r = SIZE_MAX;
    if (!strcmp(line, "0") && !*controllers) {
      r = nic_memcg_room_up_from("/sys/fs/cgroup", path, false);
      size_t u = nic_memcg_room_up_from("/sys/fs/cgroup/unified", path, false);
      if (u < r) r = u;
    } else {
      char *save = NULL;
      for (char *c = strtok_r(controllers, ",", &save); c; c = strtok_r(NULL, ",", &save))
        if (!strcmp(c, "memory")) r = nic_memcg_room_up_from("/sys/fs/cgroup/memory", path, true);
    }
    if (r < room) room = r;
  }
  return room;
}

/* A look that finds no limit anywhere above the process (most machines) stands for a while: the
 * look is a dozen file reads, and a process backing steps fast (large blocks freed and
 * allocated again) spent a seventh of its time in them. A limit set since is then seen up to
 * this late by steps locked as touched, which fault in only what is touched, as any memory
 * does; what is prefaulted whole asks nic_memcg_headroom_now. Under a limit every call looks
 * again: the room left changes with every page. A child looks again (a supervisor moves it into
 * its own cgroup between fork and exec). */
#define NO_LIMIT_STANDS_MS 1000u
/* Until when (ms, monotonic) and for which process, in one word: pids are below 2^22 (the
 * kernel's PID_MAX_LIMIT), so no lock is needed, nor a place among the fork locks. */
#define PID_BITS 22
#define PID_MASK ((1u << PID_BITS) - 1)
static uint64_t no_limit_stamp;

size_t nic_memcg_headroom_now(void) {
  const size_t room = look_up_headroom();
  const uint64_t pid = (uint64_t)getpid() & PID_MASK;
  __atomic_store_n(&no_limit_stamp,
                   room == SIZE_MAX ? (nic_now_ms() + NO_LIMIT_STANDS_MS) << PID_BITS | pid : 0,
                   __ATOMIC_RELAXED);
  return room;
}

size_t nic_memcg_headroom(void) {
  const uint64_t stamp = __atomic_load_n(&no_limit_stamp, __ATOMIC_RELAXED);
  if ((stamp & PID_MASK) == ((uint64_t)getpid() & PID_MASK) && nic_now_ms() < stamp >> PID_BITS)
    return SIZE_MAX;
  return nic_memcg_headroom_now();
}
