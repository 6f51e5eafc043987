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

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
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
  return read(fd, buf, len);
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
    const ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (got > 0) return got;
    errno = EFAULT;
    return -1;
  }
  return syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

struct import {
  const char *name;
  void *to;
  bool done;
};

struct object {
  uintptr_t base;
  uintptr_t relro_start, relro_end;
};

static int find_relro(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct object *o = arg;
  if (info->dlpi_addr != o->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
      o->relro_start = o->base + info->dlpi_phdr[i].p_vaddr;
      o->relro_end = o->relro_start + info->dlpi_phdr[i].p_memsz;
    }
  return 1;
}

/* A dynamic entry's address: the C library relocates some in place, others stay offsets. */
static uintptr_t dyn_address(const struct object *o, uintptr_t value) {
  return value < o->base ? value + o->base : value;
}

static void set_slot(const struct object *o, void **slot, void *to) {
  const uintptr_t a = (uintptr_t)slot;
  const bool read_only = a >= o->relro_start && a < o->relro_end;
  const uintptr_t page = a & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
  if (read_only) syscall(SYS_mprotect, page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE);
  __atomic_store_n(slot, to, __ATOMIC_RELEASE);
  if (read_only) syscall(SYS_mprotect, page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ);
}

static void patch_table(const struct object *o, const ElfW(Rela) * rela, size_t bytes,
                        const ElfW(Sym) * symbols, const char *strings, struct import *imports,
                        unsigned n) {
  for (size_t i = 0; rela && i < bytes / sizeof *rela; i++) {
    const unsigned type = ELF64_R_TYPE(rela[i].r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
    const char *name = strings + symbols[ELF64_R_SYM(rela[i].r_info)].st_name;
    for (unsigned k = 0; k < n; k++)
      if (!strcmp(name, imports[k].name)) {
        set_slot(o, (void **)(o->base + rela[i].r_offset), imports[k].to);
        imports[k].done = true;
      }
  }
}

bool nic_unwind_redirect_imports(void *handle) {
  struct link_map *map;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) || !map) return false;
  struct object o = {.base = map->l_addr};
  dl_iterate_phdr(find_relro, &o);
  const ElfW(Sym) *symbols = NULL;
  const char *strings = NULL;
  const ElfW(Rela) *plt = NULL, *rela = NULL;
  size_t plt_bytes = 0, rela_bytes = 0;
  for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++)
    switch (d->d_tag) {
    case DT_SYMTAB:
      symbols = (const ElfW(Sym) *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_STRTAB:
      strings = (const char *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_JMPREL:
      plt = (const ElfW(Rela) *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_PLTRELSZ:
      plt_bytes = d->d_un.d_val;
      break;
    case DT_RELA:
      rela = (const ElfW(Rela) *)dyn_address(&o, d->d_un.d_ptr);
      break;
    case DT_RELASZ:
      rela_bytes = d->d_un.d_val;
      break;
    }
  if (!symbols || !strings) return false;
  struct import imports[] = {{"pipe2", (void *)unwind_pipe2, false},
                             {"read", (void *)unwind_read, false},
                             {"syscall", (void *)unwind_syscall, false}};
  const unsigned n = sizeof imports / sizeof imports[0];
  patch_table(&o, plt, plt_bytes, symbols, strings, imports, n);
  patch_table(&o, rela, rela_bytes, symbols, strings, imports, n);
  for (unsigned k = 0; k < n; k++)
    if (!imports[k].done) return false;
  return true;
}
