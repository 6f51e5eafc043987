/* arena_claim_probe: a fresh mimalloc segment whose first commit fails. With CAP_IPC_LOCK out of
 * the effective set and RLIMIT_MEMLOCK at one 4 MiB step, under NICMALLOC_ON_PIN_FAIL=fail the
 * main thread's segment takes chunk 0's first step; a second thread's first dataplane block
 * needs a segment of its own, whose first step cannot be pinned. Then the capability is put
 * back and a third thread asks for one block: where it lands says whether chunk 0's other
 * arena blocks are still free to mimalloc. Prints the offsets (MiB from the first block, -1 for
 * NULL) and whether the capability came back (it cannot without it in the permitted set).
 * "control" refuses nothing: each thread's segment takes the next block of chunk 0. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static int ipc_lock(int on) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d)) return -1;
  if (on && !(d[0].permitted & (1u << CAP_IPC_LOCK))) return -1;
  if (on)
    d[0].effective |= 1u << CAP_IPC_LOCK;
  else
    d[0].effective &= ~(1u << CAP_IPC_LOCK);
  return (int)syscall(SYS_capset, &h, d);
}

static char *first;

static void *one(void *arg) {
  (void)arg;
  char *p = nic_malloc(64);
  return (void *)(p ? (p - first) >> 20 : -1);
}

static long in_thread(void) {
  pthread_t t;
  void *r = (void *)-1;
  if (pthread_create(&t, NULL, one, NULL) || pthread_join(t, &r)) return -2;
  return (long)r;
}

int main(int argc, char **argv) {
  (void)argv;
  const int control = argc > 1; /* "control": nothing refused */
  struct rlimit lim;
  if (getrlimit(RLIMIT_MEMLOCK, &lim)) return 2;
  if (!control) {
    ipc_lock(0);
    lim.rlim_cur = 4u << 20;
    if (setrlimit(RLIMIT_MEMLOCK, &lim)) return 3;
  }
  if (!(first = nic_malloc(64))) return 4;
  printf("refused_off=%ld\n", in_thread());
  printf("restored=%d\n", ipc_lock(1) == 0);
  /* Until a block comes back (a refused chunk is tried again only after a while), or a bound. */
  long after = -1;
  for (int i = 0; i < 200 && after == -1; i++) {
    after = in_thread();
    if (after == -1) usleep(50 * 1000);
  }
  printf("after_off=%ld\n", after);
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("pin_failures=%llu\n", (unsigned long long)s.pin_failures);
  return 0;
}
