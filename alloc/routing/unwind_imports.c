/* libunwind's address tests, made without a descriptor.
 *
 * libunwind's x86-64 port tests each address it reads while stepping (Debian builds it with
 * conservative checks, so every slow step does; results are cached per page) by reading a byte
 * from a pipe and writing the address's byte into it: the kernel's copy fails with EFAULT where
 * the address cannot be read. The pipe is opened on its first walk, at the lowest free
 * descriptors, and kept by number for the life of the process. A program does not know of it: a
 * daemon that closes the descriptors it inherited and opens its own files or sockets gets them at
 * those numbers, and libunwind's next test reads one byte of the program's input and writes a
 * byte of stack into its output (measured: under NICMALLOC_PROFILE, a Python program that closed
 * 3..63 and opened two files lost a byte of one and found a stray byte in the other; a byte of
 * stack written to a socket leaks memory to a peer). And any program sees two descriptors it
 * never opened (Python's test_subprocess counts them).
 *
 * So after loading libunwind, nicmalloc points three of its imports (its own GOT entries; nobody
 * else's calls change) at the functions below: pipe2 fails, so libunwind holds no descriptor; a
 * read of descriptor -1 says "empty", as its non-blocking pipe would; a write of bytes at an
 * address to descriptor -1 (it writes with syscall) copies them with process_vm_readv, which fails
 * with EFAULT exactly where the write into the pipe would (and where a seccomp filter refuses it:
 * walks then end early, nothing worse). A later libunwind that tests addresses some other way
 * would see its tests fail and end its walks early (the profile tests see that); one that does
 * not import all three is not used (unwind.c). */
#define _GNU_SOURCE
#include "unwind.h"

#include "imports.h"
#include "nocancel.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int unwind_pipe2(int fds[2], int flags) {
  (void)fds;
  (void)flags;
  errno = EMFILE;
  return -1;
}

static ssize_t unwind_read(int fd, void *buf, size_t len) {
  if (fd == -1) { /* the pipe it has not got: empty */
    errno = EAGAIN;
    return -1;
  }
  return nic_read_nocancel(fd, buf, len); /* it walks inside malloc: no cancellation point */
}

/* libunwind calls syscall for its test writes only, but any call is passed on whole. */
static long unwind_syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; i++)
    a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_write && (int)a[0] == -1) {
    char bytes[16];
    const size_t len = (size_t)a[2] < sizeof bytes ? (size_t)a[2] : sizeof bytes;
    struct iovec local = {bytes, len}, remote = {(void *)a[1], len};
    const ssize_t got = process_vm_readv(gettid(), &local, 1, &remote, 1, 0);
    if (got > 0) return got;
    errno = EFAULT;
    return -1;
  }
  return syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

bool nic_unwind_redirect_imports(void *handle) {
  struct link_map *map;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) || !map) return false;
  struct nic_import imports[] = {{"pipe2", (void *)unwind_pipe2, false},
                                 {"read", (void *)unwind_read, false},
                                 {"syscall", (void *)unwind_syscall, false}};
  const unsigned n = sizeof imports / sizeof imports[0];
  if (!nic_imports_redirect(map, imports, n)) return false;
  for (unsigned k = 0; k < n; k++)
    if (!imports[k].done) return false;
  return true;
}
