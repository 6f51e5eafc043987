/* Child process for test_profile.cc: two allocation sites, one whose buffers are sent over a
 * socketpair with sendmsg, one whose buffers are never sent. Prints how many blocks of each site
 * were dataplane memory, and the sent-bytes figures of struct nic_stats, as key=value lines. */
#define _GNU_SOURCE /* pipe2 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <nicmalloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kBlocks = 400, kSize = 8192 };

__attribute__((noinline)) static char *sending_site(size_t n) {
  char *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

__attribute__((noinline)) static char *quiet_site(size_t n) {
  char *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

/* Reads back the kSize bytes just sent to fd's peer, so that sends never wait. */
static bool drained(int fd) {
  static char sink[kSize];
  for (size_t got = 0; got < kSize;) {
    ssize_t r = read(fd, sink, kSize - got);
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static int send_blocks(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
  int sent_dp = 0, quiet_dp = 0;
  for (int i = 0; i < kBlocks; i++) {
    char *p = sending_site(kSize), *q = quiet_site(kSize);
    memset(p, 'a', kSize);
    memset(q, 'b', kSize);
    sent_dp += nic_is_dataplane(p);
    quiet_dp += nic_is_dataplane(q);
    struct iovec iov = {p, kSize};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (sendmsg(sv[0], &msg, 0) != kSize) return 3;
    if (!drained(sv[1])) return 4;
    free(p);
    free(q);
  }
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("sending_dataplane=%d\nquiet_dataplane=%d\n", sent_dp, quiet_dp);
  printf("sent_dataplane_bytes=%llu\nsent_other_bytes=%llu\n",
         (unsigned long long)s.sent_dataplane_bytes, (unsigned long long)s.sent_other_bytes);
  printf("sites_over_budget=%llu\n", (unsigned long long)s.sites_over_budget);
  return 0;
}

static void leave_now(int sig) {
  (void)sig;
  _exit(0);
}

static volatile sig_atomic_t stop;
static void stop_soon(int sig) {
  (void)sig;
  stop = 1;
}

/* A daemon: sends, says "ready", then waits to be stopped. "daemon" leaves SIGTERM at its
 * default; "daemon-handler" installs a handler that ends the process with _exit, as a daemon
 * careful about async-signal safety does; "daemon-exit" one that makes main send once more and
 * return. */
static int daemon_like(const char *mode) {
  if (!strcmp(mode, "daemon-handler")) signal(SIGTERM, leave_now);
  if (!strcmp(mode, "daemon-exit")) signal(SIGTERM, stop_soon);
  if (send_blocks()) return 2;
  printf("ready=1\n");
  fflush(stdout);
  while (!stop)
    pause();
  return send_blocks(); /* after the periodic write: counted by the write at exit */
}

/* A master that stays root and a worker that drops to uid (as nginx's do); both send. */
static int drop_privileges(uid_t uid) {
  if (send_blocks()) return 2;
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    if (setgroups(0, NULL) || setgid((gid_t)uid) || setuid(uid)) _exit(5);
    exit(send_blocks());
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

enum { kOwnPipes = 16 };

static void *allocate_in_a_new_thread(void *arg) {
  for (int i = 0; i < 200; i++)
    free(quiet_site(64 + (size_t)i));
  return arg;
}

/* A daemon's start: it closes the descriptors it inherited and makes its own (pipes, each
 * holding one byte), then threads allocate (a new thread's walks test the addresses of its
 * stack). Prints how many of its pipes were closed under it or lost or gained bytes, and how many
 * descriptors it holds that it never made. */
static int own_descriptors(void) {
  for (int i = 0; i < 100; i++) /* the first walks, before the program's own descriptors */
    free(quiet_site(kSize));
  for (int fd = 3; fd < 256; fd++)
    close(fd);
  int pipes[kOwnPipes][2];
  for (int i = 0; i < kOwnPipes; i++)
    if (pipe2(pipes[i], O_NONBLOCK) || write(pipes[i][1], "x", 1) != 1) return 2;
  for (int t = 0; t < 4; t++) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, allocate_in_a_new_thread, NULL)) return 3;
    pthread_join(thread, NULL);
  }
  int closed = 0, changed = 0, foreign = 0;
  for (int i = 0; i < kOwnPipes; i++) {
    char bytes[4];
    if (fcntl(pipes[i][0], F_GETFD) < 0 || fcntl(pipes[i][1], F_GETFD) < 0)
      closed++;
    else if (read(pipes[i][0], bytes, sizeof bytes) != 1 || bytes[0] != 'x')
      changed++;
  }
  DIR *dir = opendir("/proc/self/fd");
  if (!dir) return 4;
  for (struct dirent *e; (e = readdir(dir));) {
    const int fd = atoi(e->d_name);
    bool mine = e->d_name[0] == '.' || fd <= 2 || fd == dirfd(dir);
    for (int i = 0; i < kOwnPipes && !mine; i++)
      mine = fd == pipes[i][0] || fd == pipes[i][1];
    foreign += !mine;
  }
  closedir(dir);
  printf("closed=%d\nchanged=%d\nforeign=%d\n", closed, changed, foreign);
  return 0;
}

__attribute__((noinline)) static char *first_site(size_t n) {
  char *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

/* A worker whose very first malloc is its I/O buffer, sent whole: prints how many bytes went. */
static void *send_first_buffer(void *arg) {
  const int fd = *(const int *)arg;
  enum { kBuffer = 1 << 20 };
  char *p = first_site(kBuffer);
  memset(p, 'f', kBuffer);
  ssize_t sent = send(fd, p, kBuffer, MSG_DONTWAIT);
  free(p);
  return (void *)(intptr_t)sent;
}

static int thread_first(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
  int big = 4 << 20; /* room for the whole buffer: send never waits for a reader */
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  pthread_t thread;
  void *sent = NULL;
  if (pthread_create(&thread, NULL, send_first_buffer, &sv[0]) || pthread_join(thread, &sent))
    return 3;
  printf("first_sent=%ld\n", (long)(intptr_t)sent);
  return 0;
}

/* One sending site per allocation call: the exported malloc and calloc pass the program's return
 * address down, the others leave it to a walk. */
enum { kEntryBlocks = 50 };
static const char *const kEntries[] = {"malloc", "calloc", "realloc", "aligned_alloc",
                                       "posix_memalign"};

/* Each case is a call site of its own (its own return address). */
__attribute__((noinline)) static char *by_entry(size_t entry, size_t n) {
  void *p = NULL;
  switch (entry) {
  case 0:
    p = malloc(n);
    break;
  case 1:
    p = calloc(1, n);
    break;
  case 2:
    p = realloc(NULL, n);
    break;
  case 3:
    p = aligned_alloc(64, n);
    break;
  default:
    p = posix_memalign(&p, 64, n) ? NULL : p;
    break;
  }
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

static int entries(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
  for (size_t e = 0; e < sizeof kEntries / sizeof kEntries[0]; e++) {
    int dataplane = 0;
    for (int i = 0; i < kEntryBlocks; i++) {
      char *p = by_entry(e, kSize);
      if (!p) return 3;
      memset(p, 'e', kSize);
      dataplane += nic_is_dataplane(p);
      if (send(sv[0], p, kSize, 0) != kSize || !drained(sv[1])) return 4;
      free(p);
    }
    printf("%s_dataplane=%d\n", kEntries[e], dataplane);
  }
  return 0;
}

/* "plugin PATH": loads the library at PATH (profile_plugin.c) after start-up and has it send. */
static int plugin(const char *path) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 2;
  void *lib = dlopen(path, RTLD_NOW);
  int (*send_from)(int, int, int (*)(const void *)) =
      lib ? (int (*)(int, int, int (*)(const void *)))dlsym(lib, "plugin_send") : NULL;
  if (!send_from) return 3;
  printf("plugin_dataplane=%d\n", send_from(sv[0], sv[1], nic_is_dataplane));
  return 0;
}

/* "wrap": this program runs itself as a child that sends, as timeout or a shell would, and
 * exits after it; "fork": this program sends, then a forked child sends, and the parent exits
 * after it. */
int main(int argc, char **argv) {
  if (argc < 2) return send_blocks();
  if (!strncmp(argv[1], "daemon", 6)) return daemon_like(argv[1]);
  if (!strcmp(argv[1], "descriptors")) return own_descriptors();
  if (!strcmp(argv[1], "thread-first")) return thread_first();
  if (!strcmp(argv[1], "plugin") && argc > 2) return plugin(argv[2]);
  if (!strcmp(argv[1], "entries")) return entries();
  if (!strcmp(argv[1], "setuid") && argc > 2) return drop_privileges((uid_t)atoi(argv[2]));
  if (!strcmp(argv[1], "fork") && send_blocks()) return 2; /* counts the child must not repeat */
  fflush(stdout);
  pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    if (!strcmp(argv[1], "wrap")) {
      execl("/proc/self/exe", argv[0], (char *)NULL);
      _exit(127);
    }
    exit(send_blocks());
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 2;
  for (int i = 0; i < 100; i++) /* the parent's own (quiet) sites */
    free(quiet_site(kSize));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}
