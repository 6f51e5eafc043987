/* nic_probe: the readings and set-up its scenarios share. */
#define _GNU_SOURCE
#include "probe_common.h"
#include "nicmalloc.h"
#include "proc_kb.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

long vmlck_kb(void) {
  return nic_proc_kb("/proc/self/status", "VmLck:");
}

void print_stats(const char *prefix) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  printf("%schunks_live=%u\n%schunks_created=%llu\n%schunks_released=%llu\n", prefix, s.chunks_live,
         prefix, (unsigned long long)s.chunks_created, prefix,
         (unsigned long long)s.chunks_released);
  printf("%spinned=%zu\n%smapped=%zu\n%slive=%zu\n%scontrol=%zu\n", prefix, s.dataplane_pinned,
         prefix, s.dataplane_mapped, prefix, s.dataplane_live, prefix, s.control_committed);
  printf("%svmlck_kb=%ld\n%sdp_dropped=%zu\n", prefix, vmlck_kb(), prefix, s.dataplane_dropped);
  printf("%spage_kind=%s\n%spage_fallbacks=%llu\n%spin_failures=%llu\n", prefix,
         nic_page_kind_name(s.page_kind), prefix, (unsigned long long)s.page_fallbacks, prefix,
         (unsigned long long)s.pin_failures);
  printf("%sdp_fallbacks=%llu\n%sdp_failures=%llu\n%schunk_size=%zu\n%schunks_max=%u\n", prefix,
         (unsigned long long)s.dataplane_fallbacks, prefix,
         (unsigned long long)s.dataplane_failures, prefix, s.chunk_size, prefix, s.chunks_max);
  printf("%spin_step=%zu\n%ssteps_pinned=%u\n%ssteps_backed=%llu\n%sbacked=%zu\n", prefix,
         s.pin_step, prefix, s.steps_pinned, prefix, (unsigned long long)s.steps_backed, prefix,
         s.dataplane_backed);
}

long long read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  if (!f) return -1;
  char line[128];
  long long n = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "rchar:", 6)) n = strtoll(line + 6, NULL, 10);
  fclose(f);
  return n;
}

long long smaps_bytes(void) {
  int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[65536];
  long long total = 0;
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    total += n;
  close(fd);
  return total;
}

/* Where no such uid can be had (a user namespace that maps few), root drops CAP_IPC_LOCK alone,
 * and shares the count. */
static int drop_ipc_lock(void) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &header, data)) return -1;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  return (int)syscall(SYS_capset, &header, data);
}

bool memlock_limit_set(rlim_t bytes) {
  const struct rlimit lim = {bytes, bytes};
  const uid_t own = 0x40000000u + (uid_t)getpid();
  if (setrlimit(RLIMIT_MEMLOCK, &lim) == 0) {
    if (setgroups(0, NULL) == 0 && setresgid(own, own, own) == 0 && setresuid(own, own, own) == 0 &&
        prctl(PR_SET_DUMPABLE, 1) == 0)
      return true;
    if (drop_ipc_lock() == 0) return true;
  }
  printf("setup_failed=%d\n", errno);
  return false;
}

bool map_pages_apart(unsigned count) {
  for (unsigned i = 0; i < count; i++)
    if (mmap(NULL, 4096, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0) == MAP_FAILED)
      return false;
  return true;
}

uint64_t probe_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct nic_stats stats_now(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}
