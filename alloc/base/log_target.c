/* Where stderr lines go. A program may close fd 2 (coreutils do at exit) and its next open()
 * then gets fd 2: writing there would put our lines into its file. So fd 2 is used only while it
 * is still the file it was at start-up, or the one the program last put there with dup2/dup3 (as
 * gtest's capture and daemons do); else the line is dropped and counted. A guest must not hold a
 * descriptor the program can see (programs compare their fd tables, and under a low RLIMIT_NOFILE
 * a copy shifts every number the program opens), so a copy of the start-up stderr is kept only
 * when the user asked for output at exit on stderr (NICMALLOC_STATS=1 without
 * NICMALLOC_STATS_FILE), which a program that closes stderr before exit would otherwise never
 * show. A program that moves fd 2 with freopen (whose
 * dup3 is glibc's own, out of our reach) then finds our lines where its stderr first was. */
#include "config.h"
#include "log.h"
#include "startup.h"

#include <fcntl.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

struct file_id {
  bool valid;
  dev_t dev;
  ino_t ino;
};

static bool noted;              /* before nic_log_note_stderr, lines go to fd 2 as it is */
static struct file_id expected; /* what fd 2 should be */
static struct file_id copy_id;  /* what copy_fd was made from */
static int copy_fd = -1;
static unsigned long dropped; /* lines with nowhere to go */

static struct file_id id_of(int fd) {
  struct stat st;
  if (fstat(fd, &st)) return (struct file_id){0};
  return (struct file_id){.valid = true, .dev = st.st_dev, .ino = st.st_ino};
}

static bool still(int fd, struct file_id want) {
  struct file_id now = id_of(fd);
  return want.valid && now.valid && now.dev == want.dev && now.ino == want.ino;
}

/* The copy sits far above the numbers a program's own open() calls get, so none of them shifts
 * (half the descriptor limit when that is below 512); close-on-exec, as an exec'd program notes
 * its own. */
void nic_log_note_stderr(bool keep_copy) {
  expected = copy_id = id_of(STDERR_FILENO);
  if (expected.valid && keep_copy) {
    struct rlimit lim;
    int low = 3;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur >= 8)
      low = lim.rlim_cur > 512 ? 256 : (int)(lim.rlim_cur / 2);
    copy_fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, low);
  }
  __atomic_store_n(&noted, true, __ATOMIC_RELEASE);
}

void nic_log_stderr_redirected(void) {
  struct file_id now = id_of(STDERR_FILENO);
  if (now.valid) expected = now;
}

int nic_log_fd(void) {
  if (!__atomic_load_n(&noted, __ATOMIC_ACQUIRE)) return STDERR_FILENO;
  if (still(STDERR_FILENO, expected)) return STDERR_FILENO;
  if (copy_fd >= 0 && still(copy_fd, copy_id)) return copy_fd;
  __atomic_add_fetch(&dropped, 1, __ATOMIC_RELAXED);
  return -1;
}

unsigned long nic_log_dropped(void) {
  return __atomic_load_n(&dropped, __ATOMIC_RELAXED);
}

/* Whether a copy of stderr is kept depends on the settings; their warnings go to fd 2 as it
 * is, the start-up stderr by definition. */
static void note_stderr(void) {
  const struct nic_config *c = nic_config();
  nic_log_note_stderr(c->stats_at_exit != NIC_STATS_AT_EXIT_OFF && !c->stats_file);
}
NIC_STARTUP_STEP(log_target, NIC_START_LOG, note_stderr);
