/* refused_steps_probe: steps refused for want of a lock. With CAP_IPC_LOCK out of the effective
 * set and RLIMIT_MEMLOCK at two steps, six dataplane requests of 3 MiB (the test runs it with
 * 4 MiB steps and NICMALLOC_ON_PIN_FAIL=fail): the first ones take the steps that can be locked,
 * the rest are refused. Prints, after the requests and again once every block was freed and the
 * reaper gave their steps back (dataplane_backed 0, or a bound), the bytes of the dataplane
 * chunks in memory (mincore) beside the stats, and how many steps were refused. "again": before
 * the frees, ten more requests, refused as the limit is taken, and the stats after them.
 * "retry": the same for 2.5 s, long enough for a refused chunk to be tried again. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <linux/capability.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { REQUESTS = 6, BLOCK = 3 << 20, CHUNKS_LOOKED_AT = 4 };

static int drop_ipc_lock(void) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d)) return -1;
  d[0].effective &= ~(1u << CAP_IPC_LOCK);
  return (int)syscall(SYS_capset, &h, d);
}

static struct nic_stats stats(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

/* Bytes in memory of the chunks from the one holding first on (the reservation's chunks are
 * aligned to their size; past its end mincore stops). */
static size_t dataplane_resident(const void *first, size_t chunk) {
  static unsigned char vec[(256u << 20) >> 12];
  const uintptr_t base = (uintptr_t)first & ~(uintptr_t)(chunk - 1);
  size_t bytes = 0;
  for (unsigned c = 0; c < CHUNKS_LOOKED_AT && (chunk >> 12) <= sizeof vec; c++) {
    if (mincore((void *)(base + c * chunk), chunk, vec)) break;
    for (size_t i = 0; i < chunk >> 12; i++)
      bytes += (vec[i] & 1u) << 12;
  }
  return bytes;
}

static void print(const char *tag, const void *first) {
  const struct nic_stats s = stats();
  printf("%s_resident=%zu\n%s_backed=%zu\n%s_pinned=%zu\n%s_pin_failures=%llu\n"
         "%s_page_fallbacks=%llu\n%s_steps_backed=%llu\n%s_chunk_refusals=%llu\n",
         tag, dataplane_resident(first, s.chunk_size), tag, s.dataplane_backed, tag,
         s.dataplane_pinned, tag, (unsigned long long)s.pin_failures, tag,
         (unsigned long long)s.page_fallbacks, tag, (unsigned long long)s.steps_backed, tag,
         (unsigned long long)s.chunk_refusals);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(int argc, char **argv) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_MEMLOCK, &lim)) return 2;
  lim.rlim_cur = 8u << 20;
  if ((lim.rlim_max != RLIM_INFINITY && lim.rlim_max < lim.rlim_cur) || drop_ipc_lock() ||
      setrlimit(RLIMIT_MEMLOCK, &lim)) {
    printf("setup_failed=1\n");
    return 0;
  }
  printf("setup_failed=0\n");
  char *b[REQUESTS];
  int got = 0;
  for (int i = 0; i < REQUESTS; i++) {
    b[i] = nic_malloc(BLOCK);
    if (b[i]) memset(b[i], i + 1, BLOCK), got++;
  }
  printf("got=%d\nrefused=%d\n", got, REQUESTS - got);
  if (!got) return 0;
  const char *first = b[0] ? b[0] : b[1];
  print("requested", first);
  if (argc > 1 && !strcmp(argv[1], "again")) {
    int again = 0;
    for (int i = 0; i < 10; i++) {
      char *p = nic_malloc(BLOCK);
      again += p != NULL;
      nic_free(p);
    }
    printf("again_got=%d\n", again);
    print("again", first);
  }
  /* Requests for 2.5 s: past the second a refused chunk waits before it is tried again. */
  if (argc > 1 && !strcmp(argv[1], "retry")) {
    int retried = 0;
    for (const uint64_t until = now_ms() + 2500; now_ms() < until; usleep(100 * 1000)) {
      char *p = nic_malloc(BLOCK);
      retried += p != NULL;
      nic_free(p);
    }
    printf("retry_got=%d\n", retried);
    print("retry", first);
  }
  for (int i = 0; i < REQUESTS; i++)
    nic_free(b[i]);
  /* The reaper gives the emptied steps back after the release delay: waited for, with a bound. */
  for (const uint64_t until = now_ms() + 20000; stats().dataplane_backed && now_ms() < until;) {
    nic_collect();
    usleep(20 * 1000);
  }
  print("freed", first);
  return 0;
}
