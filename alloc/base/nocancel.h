/* Calls that never act on a pending pthread_cancel, for code reachable from malloc, free, thread
 * exit and nicmalloc's own API. glibc's open, read, write, close, nanosleep and eventfd_read/write
 * are cancellation points: a thread with a pending cancel would unwind out of one of them while it
 * holds one of our locks (a chunk being mapped, a line being logged, a ring's lock while its event
 * descriptor is written), and every other thread would then wait for that lock forever; or out of
 * realloc or munmap, which POSIX does not let be cancellation points. glibc's syscall() never acts
 * on cancellation, as its own malloc never does.
 *
 * Foreign code (a backend's open, a device's registration) may reach cancellation points we cannot
 * replace: nic_cancel_off holds a cancel back until nic_cancel_restore, after which the program's
 * next cancellation point acts on it. */
#ifndef NIC_NOCANCEL_H
#define NIC_NOCANCEL_H

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static inline int nic_open_nocancel(const char *path, int flags) {
  return (int)syscall(SYS_openat, AT_FDCWD, path, flags, 0);
}
static inline int nic_openat_nocancel(int dirfd, const char *path, int flags, mode_t mode) {
  return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}
static inline ssize_t nic_read_nocancel(int fd, void *buf, size_t len) {
  return syscall(SYS_read, fd, buf, len);
}
static inline ssize_t nic_write_nocancel(int fd, const void *buf, size_t len) {
  return syscall(SYS_write, fd, buf, len);
}
static inline int nic_close_nocancel(int fd) {
  return (int)syscall(SYS_close, fd);
}
/* A pause of ns nanoseconds (under a second); a signal may end it early, as nanosleep's would. */
static inline void nic_pause_nocancel(long ns) {
  const struct timespec ts = {0, ns};
  (void)syscall(SYS_nanosleep, &ts, NULL);
}
/* An eventfd counter: add 1 (readable), or take what it holds (non-blocking ones: cleared). */
static inline void nic_eventfd_signal_nocancel(int fd) {
  const uint64_t one = 1;
  (void)!syscall(SYS_write, fd, &one, sizeof one);
}
static inline int nic_eventfd_take_nocancel(int fd) {
  uint64_t n;
  return syscall(SYS_read, fd, &n, sizeof n) == (long)sizeof n ? 0 : -1;
}

static inline int nic_cancel_off(void) {
  int old = PTHREAD_CANCEL_ENABLE;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  return old;
}
static inline void nic_cancel_restore(int old) {
  int ignored;
  pthread_setcancelstate(old, &ignored);
}
/* nic_cancel_off until the end of the enclosing block (an API call's body), at every return. */
static inline void nic_cancel_scope_end(const int *old) {
  nic_cancel_restore(*old);
}
#define NIC_CANCEL_OFF_SCOPE()                                                                     \
  __attribute__((cleanup(nic_cancel_scope_end))) const int nic_cancel_scope_ = nic_cancel_off()

#endif
