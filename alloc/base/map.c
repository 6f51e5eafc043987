#define _GNU_SOURCE
#include "map.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

void *nic_map_anon(size_t bytes, int prot, bool noreserve) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0);
  long r = syscall(SYS_mmap, NULL, bytes, prot, flags, -1, 0);
  return r == -1 ? NULL : (void *)r;
}

void nic_unmap(void *p, size_t bytes) {
  syscall(SYS_munmap, p, bytes);
}

bool nic_map_writable(void *p, size_t bytes) {
  return syscall(SYS_mprotect, p, bytes, PROT_READ | PROT_WRITE) == 0;
}
