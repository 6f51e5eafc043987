/* System V shared memory leaves an address range through shmdt, or has its pages replaced by a
 * shmat with SHM_REMAP, without any munmap or mmap the program could see: both invalidate the
 * registration cache first, and again once the call returned, as interpose.c does for the
 * mapping calls. shmdt names only an address, so each attach's size is kept here; a segment
 * attached some other way (a raw system call) is not known, and its shmdt invalidates everything
 * from its address up, which is always safe and only costs registering again. */
#define _GNU_SOURCE
#include "commit_map.h"
#include "events.h"
#include "export.h"
#include "forklock.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ATTACH_SLOTS 256

struct attach {
  uintptr_t addr; /* 0: free slot */
  size_t len;
};

static struct attach attaches[ATTACH_SLOTS];
static pthread_mutex_t attaches_lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(shm_attaches, NIC_FORK_SHM_ATTACHES, &attaches_lock, NULL);

static size_t segment_bytes(int shmid) {
  struct shmid_ds ds;
  if (syscall(SYS_shmctl, shmid, IPC_STAT, &ds) != 0) return 0;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (ds.shm_segsz + page - 1) & ~(page - 1);
}

/* Returns the length recorded for addr and forgets it (forget) or keeps it; 0 when unknown. */
static size_t recorded(uintptr_t addr, bool forget) {
  size_t len = 0;
  pthread_mutex_lock(&attaches_lock);
  for (unsigned i = 0; i < ATTACH_SLOTS; i++) {
    if (attaches[i].addr != addr) continue;
    len = attaches[i].len;
    if (forget) attaches[i].addr = 0;
    break;
  }
  pthread_mutex_unlock(&attaches_lock);
  return len;
}

/* A full table only loses the exact size: that segment's shmdt falls back to the wide range. */
static void record(uintptr_t addr, size_t len) {
  pthread_mutex_lock(&attaches_lock);
  struct attach *slot = NULL;
  for (unsigned i = 0; i < ATTACH_SLOTS; i++) {
    if (attaches[i].addr == addr) { /* attached over itself (SHM_REMAP) */
      slot = &attaches[i];
      break;
    }
    if (!slot && !attaches[i].addr) slot = &attaches[i];
  }
  if (slot) *slot = (struct attach){addr, len};
  pthread_mutex_unlock(&attaches_lock);
}

NIC_EXPORT void *shmat(int shmid, const void *addr, int flags) {
  const size_t len = segment_bytes(shmid);
  /* Only a remap can replace pages the cache knows; without it the kernel refuses a busy range. */
  if (addr && (flags & SHM_REMAP)) nic_publish_pages_leaving((uintptr_t)addr, len);
  long r = syscall(SYS_shmat, shmid, addr, flags);
  if (addr && (flags & SHM_REMAP)) nic_publish_pages_left((uintptr_t)addr, len);
  if (r == -1) return (void *)-1;
  if (len) {
    if (!(flags & SHM_REMAP)) nic_publish_range_stale((uintptr_t)r, len); /* see interpose.c mmap */
    record((uintptr_t)r, len);
    nic_commit_map_note((void *)r, len, NIC_PAGES_GONE); /* no blocks of ours there now */
  }
  return (void *)r;
}

NIC_EXPORT int shmdt(const void *addr) {
  const uintptr_t start = (uintptr_t)addr;
  const size_t len = recorded(start, false);
  nic_publish_pages_leaving(start, len ? len : UINTPTR_MAX - start);
  int rc = (int)syscall(SYS_shmdt, addr);
  nic_publish_pages_left(start, len ? len : UINTPTR_MAX - start);
  if (rc == 0) recorded(start, true);
  return rc;
}
