/* The free key (block.h), drawn once per process. A key derived from the load address was the
 * same in every process of one build on one layout, and a peer that ever saw a freed block's
 * second word could put it in a buffer of its own; now every exec draws a new one. A forked
 * child keeps its parent's: its heap, freed blocks and all, is a copy of the parent's. */
#include "block.h"
#include "startup.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Until set-up: no block is allocated, let alone freed, before nic_free_key_init runs. */
uintptr_t nic_free_key_value = 0x6e69636d616c6c6fULL; /* "nicmallo" */

/* splitmix64's finaliser: every input bit reaches every output bit. */
static uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* Without getrandom (a seccomp filter, a kernel before 3.17) the key mixes what differs from
 * one exec to the next: the clocks, the pid and two ASLR addresses. Weaker, but a key match is
 * confirmed before a free is refused anyway (alloc.c); the key only keeps that path rare. */
static uint64_t fallback_key(void) {
  struct timespec mono = {0, 0}, real = {0, 0};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  uint64_t x = mix((uint64_t)mono.tv_sec * 1000000000u + (uint64_t)mono.tv_nsec);
  x = mix(x ^ ((uint64_t)real.tv_sec * 1000000000u + (uint64_t)real.tv_nsec));
  x = mix(x ^ (uint64_t)getpid());
  x = mix(x ^ (uint64_t)(uintptr_t)&mono);
  return mix(x ^ (uint64_t)(uintptr_t)&nic_free_key_value);
}

static void free_key_init(void) {
  uint64_t key = 0;
  /* The raw system call: glibc's wrapper is a cancellation point, and this runs inside malloc.
   * GRND_NONBLOCK: a process started before the kernel's pool is ready must not block in its
   * first malloc. */
  if (syscall(SYS_getrandom, &key, sizeof key, 0x1 /* GRND_NONBLOCK */) != (long)sizeof key)
    key = fallback_key();
  /* Word 1 of a live block is 0 after malloc and calloc: the key must never be. */
  __atomic_store_n(&nic_free_key_value, key ? key : 0x6e69636d616c6c6fULL, __ATOMIC_RELAXED);
}
NIC_STARTUP_STEP(free_key, NIC_START_FREE_KEY, free_key_init);
