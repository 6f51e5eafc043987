#define _GNU_SOURCE
#include "map.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

uint64_t nic_map_bytes;

void *nic_map_anon(size_t bytes, int prot, bool noreserve) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0);
  long r = syscall(SYS_mmap, NULL, bytes, prot, flags, -1, 0);
  if (r == -1) return NULL;
  __atomic_add_fetch(&nic_map_bytes, bytes, __ATOMIC_RELAXED);
  return (void *)r;
}

void nic_unmap(void *p, size_t bytes) {
  if (syscall(SYS_munmap, p, bytes) == 0)
    __atomic_sub_fetch(&nic_map_bytes, bytes, __ATOMIC_RELAXED);
}

bool nic_map_writable(void *p, size_t bytes) {
  return syscall(SYS_mprotect, p, bytes, PROT_READ | PROT_WRITE) == 0;
}
