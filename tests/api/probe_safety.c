/* nic_probe: safety: write fences around posted blocks, and the free key. */
#define _GNU_SOURCE
#include "nicmalloc.h"
#include "probe_common.h"
#include "proc_kb.h"
#include "refuse_syscall.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* NICMALLOC_FENCE=protect: a fresh thread's first nicmalloc bookkeeping (the heap mimalloc
 * keeps it in) lands among the program's blocks; one message posts all of them, and the post
 * itself must not wait for its own DMA. */
static int post_done;
static void count_done(void *arg, int status) {
  (void)arg;
  (void)status;
  __atomic_add_fetch(&post_done, 1, __ATOMIC_RELEASE);
}

static void *post_beside_bookkeeping(void *arg) {
  (void)arg;
  static char *blocks[NIC_SGA_CAPACITY];
  const unsigned half = 8, size = 3000; /* the size class of mimalloc's heap struct */
  for (unsigned i = 0; i < half; i++)
    memset(blocks[i] = malloc(size), (int)i, size);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0); /* first internal block */
  struct nic_sga sga;
  if (!ep || nic_sga_init(&sga, 0)) return (void *)1;
  for (unsigned i = half; i < sga.max; i++)
    memset(blocks[i] = malloc(size), (int)i, size);
  for (unsigned i = 0; i < sga.max; i++)
    if (nic_sga_add(&sga, blocks[i], size)) return (void *)1;
  if (nic_sga_post(&sga, ep, count_done, NULL)) return (void *)1;
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  return NULL;
}

static int post_beside(void) {
  pthread_t t;
  void *failed = (void *)1;
  if (pthread_create(&t, NULL, post_beside_bookkeeping, NULL) || pthread_join(t, &failed) || failed)
    return 1;
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("held_writes=%llu\nposts_done=%d\n", (unsigned long long)s.fence_held_writes, post_done);
  return 0;
}

/* NICMALLOC_FENCE=protect on the sim backend: one dataplane block posted, and while its DMA
 * is under way (NICMALLOC_SIM_DELAYS holds it) a write to a second block 64 KiB further on, in
 * no page the post covers. Prints whether the post was in flight before and after that write,
 * whether the write was held, and the backing page kind. */
static int protect_neighbour(void) {
  const size_t size = 64 << 10;
  char *sent = nic_malloc(size), *beside = nic_malloc(size);
  if (!sent || !beside || !nic_is_dataplane(sent) || !nic_is_dataplane(beside)) return 1;
  memset(sent, 1, size);
  memset(beside, 2, size);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  struct nic_sga sga;
  if (!ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, sent, 4096) ||
      nic_sga_post(&sga, ep, count_done, NULL))
    return 1;
  struct nic_stats before = NIC_STATS_INIT, after = NIC_STATS_INIT;
  nic_get_stats(&before);
  const int in_flight_before = !__atomic_load_n(&post_done, __ATOMIC_ACQUIRE);
  memset(beside, 3, size);
  const int in_flight_after = !__atomic_load_n(&post_done, __ATOMIC_ACQUIRE);
  nic_get_stats(&after);
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);
  printf("in_flight_before=%d\nin_flight_after=%d\nheld_writes=%llu\npage_kind=%s\n",
         in_flight_before, in_flight_after,
         (unsigned long long)(after.fence_held_writes - before.fence_held_writes),
         nic_page_kind_name(after.page_kind));
  return 0;
}

/* NICMALLOC_FENCE=protect with mprotect: a SIGSEGV sent with raise (or kill) reaches the
 * fence's handler, which is not where it belongs. The program's own disposition, set before the
 * fence starts (its first post): "default", "ignore", or "handler" (SA_SIGINFO | SA_RESETHAND,
 * SIGUSR1 in its sa_mask), which prints what it got. Then the signal, twice. */
static volatile sig_atomic_t handled, handler_code, handler_usr1_blocked;

static void segv_handler(int sig, siginfo_t *si, void *context) {
  (void)sig, (void)context;
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  handler_code = si->si_code;
  handler_usr1_blocked = sigismember(&now, SIGUSR1) == 1;
  handled++;
}

static int segv_sent(const char *disposition, bool by_kill) {
  struct sigaction sa = {0};
  sigemptyset(&sa.sa_mask);
  if (!strcmp(disposition, "ignore")) {
    sa.sa_handler = SIG_IGN;
  } else if (!strcmp(disposition, "handler")) {
    sa.sa_sigaction = segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaddset(&sa.sa_mask, SIGUSR1);
  } else {
    sa.sa_handler = SIG_DFL;
  }
  const struct rlimit no_core = {0, 0}; /* the default action would dump one */
  if (sigaction(SIGSEGV, &sa, NULL) || setrlimit(RLIMIT_CORE, &no_core)) return 1;
  char *p = nic_malloc(8192);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  struct nic_sga sga;
  if (!p || !ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, memset(p, 1, 8192), 8192) ||
      nic_sga_post(&sga, ep, count_done, NULL))
    return 1;
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  for (int i = 1; i <= 2; i++) {
    if (by_kill)
      kill(getpid(), SIGSEGV);
    else
      raise(SIGSEGV);
    printf("survived_%d=1\nhandled=%d\nhandler_code=%d\nhandler_usr1_blocked=%d\n", i, (int)handled,
           (int)handler_code, (int)handler_usr1_blocked);
    fflush(stdout);
  }
  return 0;
}

/* NICMALLOC_FENCE=protect, with NICMALLOC_SIM_DELAYS keeping the post in flight: a read(2) into
 * the posted page (the kernel's write) and a thread's write there. Prints the kernel write's
 * errno (0: it went through, after the DMA under uffd), whether the thread was held before the
 * completion, and what the statistics report says of the mechanism. */
static char *kernel_write_page;
static void *write_page(void *arg) {
  (void)arg;
  kernel_write_page[7] = 'w';
  return NULL;
}

static int kernel_write(void) {
  char *p = kernel_write_page = nic_aligned_alloc(4096, 4096);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  struct nic_sga sga;
  int fds[2];
  if (!p || !ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, memset(p, 1, 4096), 4096) ||
      pipe(fds) || write(fds[1], "kern", 4) != 4 || nic_sga_post(&sga, ep, count_done, NULL))
    return 1;
  const ssize_t got = read(fds[0], p + 100, 4);
  const int err = got < 0 ? errno : 0;
  pthread_t t;
  if (pthread_create(&t, NULL, write_page, NULL)) return 1;
  int held = 0;
  while (!held && !__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    held = stats_now().fence_writers_held > 0;
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  pthread_join(t, NULL);
  char report[8192] = "";
  const int fd = memfd_create("report", 0);
  nic_print_stats(fd);
  const ssize_t n = pread(fd, report, sizeof report - 1, 0);
  report[n > 0 ? n : 0] = 0;
  const char *from = strstr(report, "protect ("), *to = from ? strstr(from, "); ") : NULL;
  printf("kernel_write_errno=%d\nwriter_held=%d\nfence=%.*s\n", err, held,
         to ? (int)(to - from - 9) : 0, to ? from + 9 : "");
  return 0;
}

/* The free key, learnt as a peer could learn it: from a freed block's second word. */
static int print_free_key(void) {
  uintptr_t *volatile block = malloc(48);
  free(block);
  printf("free_key=%llx\n", (unsigned long long)block[1]);
  return 0;
}

/* No thread can start once the sim is up (clone3 refused with EAGAIN, as under RLIMIT_NPROC),
 * then the first post starts protect: uffd's fault thread cannot start. */
static int protect_no_thread(void) {
  char *p = nic_aligned_alloc(4096, 4096);
  struct nic_endpoint *ep = nic_sim_endpoint_create(NULL, NULL, 0);
  struct nic_sga sga;
  if (!p || !ep || nic_sga_init(&sga, 0) || nic_sga_add(&sga, memset(p, 1, 4096), 4096)) return 1;
  if (nic_refuse_syscall(SYS_clone3, -1, EAGAIN)) return 1;
  printf("post=%d\n", nic_sga_post(&sga, ep, count_done, NULL));
  while (!__atomic_load_n(&post_done, __ATOMIC_ACQUIRE))
    nic_poll(0);
  free(p);
  return 0;
}

/* No backend can open (the address space limited to what is mapped, before the first is tried):
 * an array whose nic_sga_init failed, and one never set up, both full of what the stack held
 * before, are reset, added to and posted. Each step is printed as it is passed. */
static int sga_no_backend(void) {
  printf("started=1\n");
  fflush(stdout);
  const long kb = nic_proc_kb("/proc/self/status", "VmSize:");
  const struct rlimit lim = {(rlim_t)kb << 10, RLIM_INFINITY};
  if (kb <= 0 || setrlimit(RLIMIT_AS, &lim)) return 1;
  static struct nic_sga sga;
  static char bytes[4096];
  memset(&sga, 0x5a, sizeof sga);
  printf("init=%d\n", nic_sga_init(&sga, 0));
  fflush(stdout);
  nic_sga_reset(&sga);
  printf("reset_failed_init=1\nadd=%d\n", nic_sga_add(&sga, bytes, sizeof bytes));
  printf("post=%d\n", nic_sga_post(&sga, NULL, NULL, NULL));
  fflush(stdout);
  memset(&sga, 0x5a, sizeof sga);
  sga.max = 8; /* a limit that looks right, over a count that cannot be */
  nic_sga_reset(&sga);
  nic_sga_reset(&sga);
  printf("reset_never_set_up=1\npost_never_set_up=%d\n", nic_sga_post(&sga, NULL, NULL, NULL));
  return 0;
}

/* The commands: argv[1] names one, its arguments follow (usage in probe.c). */
int cmd_free_key(int argc, char **argv) {
  (void)argc, (void)argv;
  return print_free_key();
}

int cmd_post_beside_bookkeeping(int argc, char **argv) {
  (void)argc, (void)argv;
  return post_beside();
}

int cmd_protect_neighbour(int argc, char **argv) {
  (void)argc, (void)argv;
  return protect_neighbour();
}

int cmd_kernel_write(int argc, char **argv) {
  (void)argc, (void)argv;
  return kernel_write();
}

int cmd_segv_sent(int argc, char **argv) {
  return segv_sent(argv[2], argc > 3 && !strcmp(argv[3], "kill"));
}

int cmd_sga_no_backend(int argc, char **argv) {
  (void)argc, (void)argv;
  return sga_no_backend();
}

int cmd_protect_no_thread(int argc, char **argv) {
  (void)argc, (void)argv;
  return protect_no_thread();
}
