/* protect with userfaultfd write-protect, synchronous mode: a write to a protected page parks
 * the writer in the kernel until the page is made writable, and the kernel's own writes (read(2)
 * into the page, say) wait the same way instead of failing with EFAULT as under mprotect (not
 * where only a descriptor of user-mode faults is allowed: open_uffd).
 * UFFD_FEATURE_WP_ASYNC is not used: it resolves the fault in the kernel at once, so it records
 * that a page was written but never holds the writer.
 *
 * Releases do not come from here: the completion's UFFDIO_WRITEPROTECT (mode 0) wakes the
 * writers parked on the range. This thread reads the faults to count the held writers, wake the
 * poller (fence_threads.c), let the NIC's own threads through at once, and release a page whose
 * writer has waited NICMALLOC_FENCE_TIMEOUT_MS. It never touches user memory, so it can never
 * be parked itself. Regions are registered whole (a chunk, the control arena) on their first
 * protect, so that VMAs are not split per entry. */
#define _GNU_SOURCE
#include "clock.h"
#include "fence.h"
#include "log.h"
#include "nocancel.h"
#include "thread.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Debian 12's headers predate these. */
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define HELD_MAX 1024 /* writers tracked for the timeout; more are held all the same */

struct held {
  pid_t tid;
  uintptr_t addr;
  uint64_t since_ms;
  uint64_t epoch; /* the release epoch before its fault was read */
  bool let_go;    /* its page is to be made writable (a NIC thread's, or past the timeout) */
};

static int uffd = -1;
static struct held held[HELD_MAX]; /* the handler thread's own */
static unsigned nheld;

static bool user_mode_only; /* the descriptor handles faults of user mode only */

static int open_uffd(void) {
  user_mode_only = false;
  int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0 || errno != EPERM) return fd;
  /* vm.unprivileged_userfaultfd=0: the device may still be open to this user. */
  int dev = nic_open_nocancel("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    nic_close_nocancel(dev);
    if (fd >= 0) return fd;
  }
  /* Else faults of user mode only, which any process may handle (Linux 5.11): the program's
   * writes are held as ever, the kernel's own (read(2) into the page) fail with EFAULT, as under
   * mprotect, which this still beats: no SIGSEGV handler shared with the program, no mapping
   * split (and no vm.max_map_count met) per protect, no page held whole per mapping change. */
  fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (fd < 0) {
    errno = EPERM; /* the reason, rather than an older kernel's EINVAL for the flag */
    return -1;
  }
  user_mode_only = true;
  return fd;
}

bool nic_fence_uffd_kernel_writes_wait(void) {
  return !user_mode_only;
}

static int writeprotect(uintptr_t start, size_t len, bool on) {
  struct uffdio_writeprotect wp = {.range = {.start = start, .len = len},
                                   .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
  return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) ? -errno : 0;
}

static int register_range(uintptr_t start, size_t len) {
  struct uffdio_register reg = {.range = {.start = start, .len = len},
                                .mode = UFFDIO_REGISTER_MODE_WP};
  return ioctl(uffd, UFFDIO_REGISTER, &reg) ? -errno : 0;
}

static int uffd_protect(uintptr_t start, size_t len) {
  int rc = writeprotect(start, len, true);
  if (rc != -ENOENT) return rc;
  /* Not registered: the region's first protect since it was mapped. The whole region if it can
   * be, else the range alone (a region with a hole in it). */
  uintptr_t base;
  size_t size;
  if (!(nic_fence_region(start, &base, &size) && register_range(base, size) == 0) &&
      (rc = register_range(start, len)) != 0)
    return rc;
  return writeprotect(start, len, true);
}

static int uffd_unprotect(uintptr_t start, size_t len) {
  return writeprotect(start, len, false); /* wakes the writers parked on the range */
}

static void on_fault(uintptr_t addr, pid_t tid, uint64_t epoch) {
  if (!nic_fence_still_protected(addr)) return; /* released meanwhile: the writer is awake */
  /* Only the NIC's threads go through; a posting thread is held like any writer, inside its
   * post too, which is safe while the backend writes no heap memory there (safety/README.md). */
  const bool exempt = nic_fence_thread_exempt(tid);
  if (exempt) {
    const bool released = nic_fence_release(addr);
    NIC_SAFETY_COUNT(fence_bypasses, 1);
    nic_log_warn_once("NICMALLOC_FENCE=protect: thread %d, which the NIC or the completions need, "
                      "wrote to %#lx while the NIC may still read that page; the page is made "
                      "writable rather than hold it (counted in fence_bypasses)",
                      (int)tid, (unsigned long)addr);
    if (released) return;
    /* The kernel refused: the thread waits in the kernel, and the sweep tries again. */
  } else {
    NIC_SAFETY_COUNT(fence_held_writes, 1);
  }
  const struct held h = {
      .tid = tid, .addr = addr, .since_ms = nic_now_ms(), .epoch = epoch, .let_go = exempt};
  unsigned i = 0;
  while (i < nheld && held[i].tid != tid)
    i++;
  if (i < nheld) { /* the same writer again, re-protected after its wake-up: counted once */
    held[i] = h;
  } else if (nheld < HELD_MAX) { /* more are held all the same, but never timed out */
    held[nheld++] = h;
    __atomic_add_fetch(&nic_safety_ctr.fence_writers_held, 1, __ATOMIC_SEQ_CST);
  }
  nic_fence_poller_kick(); /* after the count it looks at */
}

void (*nic_fence_sweep_hook)(void);

/* Forgets writers whose page was released since their fault was read (the kernel woke them; one
 * still waiting faulted again and is seen anew), releases the pages no posted entry covers any
 * more (a release the kernel refused) and those whose writer has waited too long. A page
 * released and protected again by a new post between two looks is marked both times: a writer
 * long gone was kept as held, and its timeout made the page writable under the new post (a
 * write could reach the wire, and was counted as a bypass and a mismatch). */
static void sweep(void) {
  void (*hook)(void) = __atomic_load_n(&nic_fence_sweep_hook, __ATOMIC_ACQUIRE);
  if (hook) hook();
  const unsigned timeout = nic_safety_config()->fence_timeout_ms;
  const uint64_t now = nic_now_ms();
  for (unsigned i = 0; i < nheld;) {
    struct held *h = &held[i];
    bool done = !nic_fence_marked(h->addr) || nic_fence_released_since(h->addr, h->epoch) ||
                nic_fence_release_if_done(h->addr);
    if (!done && !h->let_go && now - h->since_ms >= timeout) {
      nic_log_error_once("NICMALLOC_FENCE=protect: thread %d waited %u ms "
                         "(NICMALLOC_FENCE_TIMEOUT_MS) to write %#lx, which the NIC may still "
                         "read; the page is made writable and the write goes on (does a "
                         "completion it waits for need a lock it holds?) (said once; "
                         "fence_bypasses counts them all)",
                         (int)h->tid, timeout, (unsigned long)h->addr);
      NIC_SAFETY_COUNT(fence_bypasses, 1);
      h->let_go = true;
    }
    if (!done && h->let_go) done = nic_fence_release(h->addr); /* the kernel may refuse again */
    if (!done) {
      i++;
      continue;
    }
    held[i] = held[--nheld];
    __atomic_sub_fetch(&nic_safety_ctr.fence_writers_held, 1, __ATOMIC_RELEASE);
  }
}

static void *handler(void *arg) {
  (void)arg;
  struct uffd_msg msg[32];
  for (;;) {
    struct pollfd p = {.fd = uffd, .events = POLLIN};
    /* While writers are held, look at their pages every millisecond. */
    if (poll(&p, 1, nheld ? 1 : -1) < 0 && errno != EINTR) break;
    if (p.revents & (POLLERR | POLLNVAL)) break;
    for (;;) {
      /* Before the read: a release that woke a writer whose fault is read here stamps its unit
       * later than this, as the kernel drops the fault of a writer woken before the read. */
      const uint64_t epoch = nic_fence_release_epoch();
      const ssize_t got = read(uffd, msg, sizeof msg);
      if (got <= 0) break;
      for (size_t i = 0; i < (size_t)got / sizeof *msg; i++)
        if (msg[i].event == UFFD_EVENT_PAGEFAULT)
          on_fault((uintptr_t)msg[i].arg.pagefault.address, (pid_t)msg[i].arg.pagefault.feat.ptid,
                   epoch);
    }
    if (nheld) sweep();
  }
  nic_log_error("NICMALLOC_FENCE=protect: the userfaultfd failed (%d); held writers are released "
                "only by their completions from now on",
                errno);
  return NULL;
}

/* What the failed start could not do: its errno alone (EAGAIN from a thread that could not
 * start) read as if the kernel had no userfaultfd. */
static const char *failed_step = "not started";

const char *nic_fence_uffd_failed_step(void) {
  return failed_step;
}

/* The API handshake is once per descriptor, and a request for a feature the kernel lacks fails:
 * a first descriptor asks what is offered, a second one takes it. */
static int uffd_start(void) {
  failed_step = "no userfaultfd descriptor could be opened";
  int probe = open_uffd();
  if (probe < 0) return -errno;
  failed_step = "the kernel refused the userfaultfd API";
  struct uffdio_api api = {.api = UFFD_API};
  int rc = ioctl(probe, UFFDIO_API, &api) ? -errno : 0;
  nic_close_nocancel(probe);
  if (rc) return rc;
  failed_step = "the kernel has no userfaultfd write-protect";
  const uint64_t need = UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_THREAD_ID;
  if ((api.features & need) != need) return -ENOTSUP;
  failed_step = "no userfaultfd descriptor could be opened";
  int fd = open_uffd();
  if (fd < 0) return -errno;
  failed_step = "the kernel refused the userfaultfd API";
  api = (struct uffdio_api){
      .api = UFFD_API,
      .features = need | (api.features & (UFFD_FEATURE_WP_HUGETLBFS_SHMEM | /* hugetlb chunks */
                                          UFFD_FEATURE_WP_UNPOPULATED))};
  if (ioctl(fd, UFFDIO_API, &api)) {
    rc = -errno;
    nic_close_nocancel(fd);
    return rc;
  }
  uffd = fd;
  pthread_t t;
  failed_step = "its fault thread could not be started";
  rc = -nic_own_thread_create(&t, "nicmalloc-uffd", handler, NULL,
                              NULL); /* no signal handler may run on it */
  if (rc) {
    nic_close_nocancel(fd);
    uffd = -1;
    return rc;
  }
  pthread_detach(t);
  return 0;
}

static void uffd_after_fork_child(void) {
  nic_close_nocancel(uffd); /* it still acts on the parent's memory */
  uffd = -1;
  nheld = 0;
}

const struct nic_fence_mech nic_fence_uffd = {.name = "uffd",
                                              .start = uffd_start,
                                              .protect = uffd_protect,
                                              .unprotect = uffd_unprotect,
                                              .after_fork_child = uffd_after_fork_child};
