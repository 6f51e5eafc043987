/* nic_probe: start-up and its environment: refused system calls, layout, backend, sites, fd 2. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"
#include "refuse_syscall.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* What any program does at start-up, with no nicmalloc call: blocks of many sizes (1 MiB ones
 * are dataplane under NICMALLOC_DP_MIN_SIZE), grown and freed; then the fallbacks taken. */
static int guest_start(void) {
  char *blocks[64];
  for (unsigned i = 0; i < 64; i++) {
    const size_t size = (size_t)16 << (i % 17);
    blocks[i] = malloc(size);
    if (!blocks[i]) return 1;
    memset(blocks[i], (int)i, size);
  }
  for (unsigned i = 0; i < 64; i += 2) {
    char *grown = realloc(blocks[i], (size_t)24 << (i % 17));
    if (!grown) return 1;
    blocks[i] = grown;
  }
  for (unsigned i = 0; i < 64; i++)
    free(blocks[i]);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("chunks_created=%llu\npage_fallbacks=%llu\npin_failures=%llu\n",
         (unsigned long long)s.chunks_created, (unsigned long long)s.page_fallbacks,
         (unsigned long long)s.pin_failures);
  printf("vspace_refusals=%llu\nchunk_refusals=%llu\ndp_fallbacks=%llu\n",
         (unsigned long long)s.vspace_refusals, (unsigned long long)s.chunk_refusals,
         (unsigned long long)s.dataplane_fallbacks);
  return 0;
}

/* no-uring ARGS... / no-populate ARGS... / no-getrandom ARGS...: runs the probe again with ARGS
 * where a system call fails, as under a container's seccomp profile: io_uring_setup or getrandom
 * with ENOSYS, or madvise(MADV_POPULATE_WRITE) with ENOMEM, as when memory cannot be had. */
static int refusing(char **argv, int nr, int advice, int err) {
  if (nic_refuse_syscall(nr, advice, err)) return 1;
  argv[1] = argv[0];
  execv(argv[0], argv + 1);
  return 1;
}

/* Runs the scenario argv[2]... with address space layout randomisation off, so that two runs
 * differ only in what they draw. 77: the kernel (or a seccomp filter) refused. */
static int fixed_layout(char **argv) {
  const int persona = personality(0xffffffff);
  if (persona == -1 || personality((unsigned long)persona | ADDR_NO_RANDOMIZE) == -1) return 77;
  argv[1] = argv[0];
  execv(argv[0], argv + 1);
  return 1;
}

/* Opens the backend NICMALLOC_BACKEND names (a plugin says what it opened when verbose). */
static void open_backend(void) {
  struct nic_sga sga;
  printf("sga_init=%d\n", nic_sga_init(&sga, 1));
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("backend=%s\n", s.backend);
  fflush(stdout);
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_guest_start(int argc, char **argv) {
  (void)argc, (void)argv;
  return guest_start();
}

int cmd_low_memlock_guest(int argc, char **argv) { /* the same without CAP_IPC_LOCK */
  (void)argc, (void)argv;
  if (!memlock_limit_set(64 << 10)) return 3;
  return guest_start();
}

int cmd_no_uring(int argc, char **argv) {
  (void)argc;
  return refusing(argv, __NR_io_uring_setup, -1, ENOSYS);
}

int cmd_no_getrandom(int argc, char **argv) {
  (void)argc;
  return refusing(argv, __NR_getrandom, -1, ENOSYS);
}

int cmd_no_populate(int argc, char **argv) {
  (void)argc;
  return refusing(argv, __NR_madvise, 23 /* MADV_POPULATE_WRITE */, ENOMEM);
}

int cmd_fixed_layout(int argc, char **argv) {
  (void)argc;
  return fixed_layout(argv);
}

int cmd_uring_endpoint(int argc, char **argv) { /* which backend; can one be made? */
  (void)argc, (void)argv;
  errno = 0;
  struct nic_endpoint *ep = nic_uring_endpoint_create(STDOUT_FILENO);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("endpoint=%d\nerrno=%d\nbackend=%s\n", ep != NULL, errno, s.backend);
  return 0;
}

int cmd_sites(int argc, char **argv) { /* sites ID...: which are on, and where they allocate */
  for (int i = 2; i < argc; i++) {
    const uint32_t id = (uint32_t)atoi(argv[i]);
    void *p = nic_malloc_site(4096, id);
    printf("site_%s=%d\nsite_%s_dataplane=%d\n", argv[i], nic_site_is_enabled(id), argv[i],
           nic_is_dataplane(p));
    free(p);
  }
  return 0;
}

/* The descriptors open now, as a bit per descriptor below 1024. */
static void fds_open(unsigned char *set) {
  memset(set, 0, 1024 / 8);
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *e; d && (e = readdir(d));) {
    const int fd = atoi(e->d_name);
    if (e->d_name[0] != '.' && fd != dirfd(d) && fd < 1024) set[fd / 8] |= 1 << fd % 8;
  }
  if (d) closedir(d);
}

/* Threads other than the calling one that would take SIGTERM (not blocked): the program's
 * signals may be delivered there. Their names on stdout. */
static int threads_taking_sigterm(void) {
  char self[32];
  snprintf(self, sizeof self, "%ld", (long)syscall(SYS_gettid));
  int taking = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, self)) continue;
    char path[320], line[256], name[64] = "?";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f && fgets(name, sizeof name, f)) name[strcspn(name, "\n")] = '\0';
    if (f) fclose(f);
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
      unsigned long long blocked;
      if (sscanf(line, "SigBlk: %llx", &blocked) == 1 && !(blocked >> (SIGTERM - 1) & 1)) {
        printf("taking_sigterm_%s=%s\n", e->d_name, name);
        taking++;
      }
    }
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return taking;
}

/* open-backend [fds|signals]: with fds, how many descriptors the open added and how many of them
 * an exec'd program would inherit (no FD_CLOEXEC); with signals, how many threads besides this
 * one the program's SIGTERM could be delivered to. */
/* After the backend opened (and nic_event_fd made its set): a child of fork, which never uses
 * the parent's backend, keeps none of the descriptors the open added, and the parent's backend
 * still registers once the child has closed them. */
static int fork_fds(const unsigned char *before) {
  unsigned char after[1024 / 8];
  printf("event_fd=%d\n", nic_event_fd());
  fds_open(after);
  int added = 0;
  for (int fd = 0; fd < 1024; fd++)
    added += (after[fd / 8] >> fd % 8 & 1) && !(before[fd / 8] >> fd % 8 & 1);
  printf("fds_added=%d\n", added);
  fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    unsigned char in_child[1024 / 8];
    fds_open(in_child);
    int kept = 0;
    for (int fd = 0; fd < 1024; fd++)
      if ((in_child[fd / 8] >> fd % 8 & 1) && (after[fd / 8] >> fd % 8 & 1) &&
          !(before[fd / 8] >> fd % 8 & 1)) {
        char link[64], target[256] = "";
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        const ssize_t n = readlink(link, target, sizeof target - 1);
        printf("child_kept_%d=%s\n", fd, n > 0 ? target : "?");
        kept++;
      }
    printf("child_fds_kept=%d\n", kept);
    /* A mapping of a descriptor holds its file as the descriptor does: an io_uring ring
     * mapped in the child keeps the parent's instance, and the steps it registered pinned. */
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    int rings = 0;
    while (maps && fgets(line, sizeof line, maps))
      rings += strstr(line, "anon_inode:[io_uring]") != NULL;
    if (maps) fclose(maps);
    printf("child_ring_mappings=%d\n", rings);
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 3;
  void *p = nic_malloc(4096);
  struct nic_region_ref ref;
  printf("parent_register=%d\n", p ? nic_register(p, 4096, NIC_REG_LOCAL, &ref) : -ENOMEM);
  free(p);
  return 0;
}

/* The dataplane bytes the open of the backend left live (run it with a low
 * NICMALLOC_DP_MIN_SIZE): a backend's own blocks are never dataplane memory. */
static size_t dataplane_live(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s.dataplane_live;
}

int cmd_open_backend(int argc, char **argv) {
  unsigned char before[1024 / 8], after[1024 / 8];
  fds_open(before);
  printf("opening\n"); /* stdout's buffer exists before the count */
  const size_t live_before = dataplane_live();
  open_backend();
  printf("open_dataplane_live=%zu\n", dataplane_live() - live_before);
  if (argc >= 3 && !strcmp(argv[2], "signals")) {
    printf("threads_taking_sigterm=%d\n", threads_taking_sigterm());
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[2], "fork-fds")) return fork_fds(before);
  if (argc < 3 || strcmp(argv[2], "fds")) return 0;
  fds_open(after);
  int added = 0, inheritable = 0;
  for (int fd = 0; fd < 1024; fd++) {
    if (!(after[fd / 8] >> fd % 8 & 1) || (before[fd / 8] >> fd % 8 & 1)) continue;
    added++;
    if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
      inheritable++;
      char link[64], target[256] = "";
      snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
      const ssize_t n = readlink(link, target, sizeof target - 1);
      printf("inheritable_%d=%s\n", fd, n > 0 ? target : "?");
    }
  }
  printf("fds_added=%d\nfds_inheritable=%d\n", added, inheritable);
  return 0;
}

int cmd_stderr_reused(int argc, char **argv) { /* close fd 2; a file takes its number */
  close(STDERR_FILENO);
  const int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
  printf("file_fd=%d\n", fd);
  fflush(stdout);
  if (write(fd, "data\n", 5) != 5) return 1;
  char on_stack[32];
  free(on_stack); /* an error line, which must not land in the file */
  if (argc >= 4 && !strcmp(argv[3], "open-backend")) open_backend(); /* a plugin's lines */
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("dropped=%llu\n", (unsigned long long)s.log_lines_dropped);
  return 0;
}

/* wait-unopened: nic_event_fd, nic_thread_event_fd and nic_wait(0) in a program that opened no
 * backend: none opens one (a ring and its thread, DPDK's EAL); nic_event_fd and nic_wait say
 * -ENODEV, so that a nic_wait(-1) there returns rather than wait for good. */
int cmd_wait_unopened(int argc, char **argv) {
  (void)argc, (void)argv;
  printf("event_fd=%d\n", nic_event_fd());
  printf("thread_event_fd=%d\n", nic_thread_event_fd());
  printf("wait=%d\n", nic_wait(0));
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("backend_after=%s\nother_api_errors=%llu\n", s.backend,
         (unsigned long long)s.other_api_errors);
  return 0;
}
