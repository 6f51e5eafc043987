/* nic_wait and nic_event_fd: waiting for completions and receives without spinning on nic_poll.
 * A backend's event_fd polls readable while its poll() has work and is cleared by poll(); with
 * several backends running, one epoll set holds them all (nic_backends_event_fd). Where a
 * backend has none (the verbs and dpdk plugins) waiting is sleeps of at most WAIT_STEP_MS
 * between polls. */
#include "api_errors.h"
#include "backend.h"
#include "clock.h"
#include "export.h"
#include "nicmalloc.h"
#include "nudge.h"
#include "thread.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#define WAIT_STEP_MS 1

/* Said when no backend runs: waiting would wait for nothing (nic_wait(-1), for good). Opening
 * one here would start a ring and its thread, or DPDK's EAL, for a program that posts nothing;
 * the first endpoint, registration or post opens it. */
#define NO_BACKEND_FMT "%s: no backend is open (%s)"
static const char *no_backend_why(void) {
  return nic_backend_missing_why()
             ? nic_backend_missing_why()
             : "none is opened for waiting: an endpoint, a registration or a post opens one";
}

/* fd, the backends' set or -errno, with the error said once (caller: the entry point's name).
 * -ENOSYS is a backend that has no descriptor, for good; any other error is one that could not
 * be made now (no descriptor left: EMFILE), which a later call makes. */
static int said(const char *caller, int fd) {
  if (fd == -ENODEV)
    nic_api_error_by(other, caller, ENODEV, NO_BACKEND_FMT, caller, no_backend_why());
  else if (fd == -ENOSYS)
    nic_api_error_by(other, caller, fd,
                     "%s: a backend in use (%s) has no event descriptor; nic_wait polls in short "
                     "sleeps",
                     caller, nic_backends_names());
  else if (fd < 0)
    nic_api_error_by(other, caller, fd,
                     "%s: nic_event_fd's epoll set, or a backend's eventfd for it, could not be "
                     "made (%s); nic_wait polls in short sleeps meanwhile, and a later call "
                     "makes it",
                     caller, strerror(-fd));
  return fd;
}

NIC_EXPORT int nic_event_fd(void) {
  return said("nic_event_fd", nic_backends_event_fd());
}

NIC_EXPORT int nic_thread_event_fd(void) {
  int backends = nic_backends_event_fd();
  /* The thread's own asks need no backend: with none open yet its descriptor holds the backends'
   * set empty, which those that start later join (none in a child of fork whose parent was
   * opening one: the asks alone). */
  if (backends == -ENODEV)
    backends = nic_backends_event_set(); /* -errno of making it, said below */
  else if (backends < 0)
    return said("nic_thread_event_fd", backends);
  /* Sets the thread up first, as an allocation would: the asks go to listed threads. */
  const int fd = backends < 0 && backends != -ENODEV ? backends
                 : nic_thread_ready()                ? nic_nudge_thread_event_fd(backends)
                                                     : -ESRCH;
  if (fd == -ESRCH)
    nic_api_error_by(other, "nic_thread_event_fd", fd,
                     "nic_thread_event_fd: the calling thread is exiting");
  else if (fd < 0)
    nic_api_error_by(
        other, "nic_thread_event_fd", fd,
        "nic_thread_event_fd: the thread's descriptor (an epoll set holding an eventfd "
        "of its own and nic_event_fd's set) could not be made (%s); a later call "
        "makes it",
        strerror(-fd));
  return fd;
}

NIC_EXPORT int nic_wait(int timeout_ms) {
  if (timeout_ms < -1) {
    nic_api_error(other, "nic_wait(%d): the timeout is milliseconds, or -1 for none", timeout_ms);
    return -EINVAL;
  }
  const int fd = nic_backends_event_fd();
  if (fd == -ENODEV) {
    nic_api_error(other, NO_BACKEND_FMT, "nic_wait", no_backend_why());
    return -ENODEV;
  }
  const uint64_t end = nic_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
  for (;;) {
    const int ran = nic_poll(0);
    if (ran) return ran;
    int left = -1;
    if (timeout_ms >= 0) {
      const uint64_t now = nic_now_ms();
      if (now >= end) return 0;
      left = (int)(end - now);
    }
    /* Asked for free pages by another thread (nudge.h): answered by the polls, a bounded
     * part each, so not blocked until they are done; asked while blocked: woken. */
    const int wake = nic_nudge_wait_begin();
    if (wake == -EAGAIN) continue;
    int rc;
    if (fd >= 0) {
      struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = wake, .events = POLLIN}};
      rc = poll(p, 2, left); /* a descriptor of -1 is passed over */
    } else {
      const int ms = left < 0 || left > WAIT_STEP_MS ? WAIT_STEP_MS : left;
      struct timespec ts = {0, (long)ms * 1000000L};
      rc = nanosleep(&ts, NULL);
    }
    const int err = errno;
    nic_nudge_wait_end();
    if (rc < 0 && err == EINTR) return -EINTR;
  }
}
