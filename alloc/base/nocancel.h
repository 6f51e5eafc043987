/* File I/O for code reachable from malloc, free and thread exit. glibc's open, read, write and
 * close are cancellation points: a thread with a pending pthread_cancel would unwind out of one
 * of them while it holds one of our locks (a chunk being mapped, a line being logged), and every
 * other thread would then wait for that lock forever. glibc's syscall() never acts on
 * cancellation, as its own malloc never does. */
#ifndef NIC_NOCANCEL_H
#define NIC_NOCANCEL_H

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static inline int nic_open_nocancel(const char *path, int flags) {
  return (int)syscall(SYS_openat, AT_FDCWD, path, flags, 0);
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

#endif
