/* The fixed-buffer table: one sparse io_uring buffer table registered at open, whose slots are
 * filled and emptied one at a time (IORING_REGISTER_BUFFERS_UPDATE). The slot index is the
 * registration's handle, the index plus one its lkey.
 *
 * The registering syscall runs without the backend lock: pinning 1 GiB of 4 KiB pages takes
 * tens of milliseconds, and posts must not wait for it. A slot being filled or emptied is
 * neither free nor live, so no post validates against it meanwhile. */
#define _GNU_SOURCE
#include "uring_internal.h"

#include "log.h"

#include <errno.h>
#include <sys/mman.h>

static void *map_zeroed(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static size_t map_words(uint32_t nslots) {
  return (nslots + 63) / 64;
}

int nic_uring_table_init(struct uring_backend *ub) {
  /* 16384 is the kernel's limit; a smaller one (an older or patched kernel) is taken as is. */
  uint32_t n = URING_MAX_SLOTS;
  int rc;
  while ((rc = io_uring_register_buffers_sparse(&ub->ring, n)) < 0 && n > 64)
    n /= 2;
  if (rc < 0) return rc;
  ub->nslots = n;
  ub->slots = map_zeroed(n * sizeof *ub->slots);
  ub->free_map = map_zeroed(map_words(n) * sizeof *ub->free_map);
  if (!ub->slots || !ub->free_map) {
    nic_uring_table_fini(ub);
    return -ENOMEM;
  }
  for (uint32_t i = 0; i < n; i++)
    ub->free_map[i / 64] |= 1ull << (i % 64);
  return 0;
}

void nic_uring_table_fini(struct uring_backend *ub) {
  if (ub->slots) munmap(ub->slots, ub->nslots * sizeof *ub->slots);
  if (ub->free_map) munmap(ub->free_map, map_words(ub->nslots) * sizeof *ub->free_map);
  ub->slots = NULL;
  ub->free_map = NULL;
}

static bool take_slot_locked(struct uring_backend *ub, uint32_t slot) {
  uint64_t bit = 1ull << (slot % 64);
  if (!(ub->free_map[slot / 64] & bit)) return false;
  ub->free_map[slot / 64] &= ~bit;
  return true;
}

/* Lowest free slot first, so that a freed slot is the next one reused. */
static int64_t take_any_slot_locked(struct uring_backend *ub) {
  for (size_t w = 0; w < map_words(ub->nslots); w++)
    if (ub->free_map[w]) {
      uint32_t slot = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(ub->free_map[w]));
      take_slot_locked(ub, slot);
      return slot;
    }
  return -1;
}

static void give_slot_locked(struct uring_backend *ub, uint32_t slot) {
  ub->free_map[slot / 64] |= 1ull << (slot % 64);
}

static int check_request(void *base, size_t len, unsigned access) {
  const unsigned remote = NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE;
  if (access & ~(NIC_ACCESS_LOCAL_WRITE | remote)) return -EINVAL;
  /* Nothing remote can reach an io_uring buffer: granting it silently would be a lie. */
  if (access & remote) return -EOPNOTSUPP;
  if (!base || len == 0 || len > URING_MAX_BYTES || (uintptr_t)base + len < (uintptr_t)base)
    return -EINVAL;
  return 0;
}

/* The slot has been taken off the free map; fills it, or gives it back on failure. */
static int fill_slot(struct uring_backend *ub, uint32_t slot, void *base, size_t len,
                     unsigned access, struct nic_registration *out) {
  struct iovec iov = {base, len};
  __u64 tag = 0; /* no tag: in-flight use is tracked here, per post */
  int rc = io_uring_register_buffers_update_tag(&ub->ring, slot, &iov, &tag, 1);
  pthread_mutex_lock(&ub->lock);
  if (rc < 0) {
    give_slot_locked(ub, slot);
    pthread_mutex_unlock(&ub->lock);
    if (rc == -ENOMEM)
      nic_log_warn_once("io_uring cannot pin %zu bytes at %p (ENOMEM): without CAP_IPC_LOCK fixed "
                        "buffers count against RLIMIT_MEMLOCK (ulimit -l), else memory is short",
                        len, base);
    return rc;
  }
  ub->slots[slot] = (struct uring_slot){.base = (uintptr_t)base, .len = len, .live = true};
  ub->stats.slots_used++;
  pthread_mutex_unlock(&ub->lock);
  *out = (struct nic_registration){
      .base = base, .len = len, .access = access, .lkey = slot + 1, .rkey = 0, .handle = slot};
  return 0;
}

int nic_uring_reg(struct nic_backend *b, void *base, size_t len, unsigned access,
                  struct nic_registration *out) {
  struct uring_backend *ub = uring_of(b);
  int rc = check_request(base, len, access);
  if (rc) return rc;
  pthread_mutex_lock(&ub->lock);
  int64_t slot = take_any_slot_locked(ub);
  pthread_mutex_unlock(&ub->lock);
  if (slot < 0) return -ENOSPC;
  return fill_slot(ub, (uint32_t)slot, base, len, access, out);
}

int nic_uring_reg_at(struct nic_backend *b, uint32_t slot, void *base, size_t len, unsigned access,
                     struct nic_registration *out) {
  if (!nic_uring_is(b)) return -EINVAL;
  struct uring_backend *ub = uring_of(b);
  int rc = check_request(base, len, access);
  if (rc) return rc;
  if (slot >= ub->nslots) return -EINVAL;
  pthread_mutex_lock(&ub->lock);
  bool taken = take_slot_locked(ub, slot);
  pthread_mutex_unlock(&ub->lock);
  if (!taken) return -EBUSY;
  return fill_slot(ub, slot, base, len, access, out);
}

int nic_uring_dereg(struct nic_backend *b, struct nic_registration *reg) {
  struct uring_backend *ub = uring_of(b);
  if (!reg || reg->handle >= ub->nslots) return -EINVAL;
  uint32_t slot = (uint32_t)reg->handle;
  struct uring_slot *s = &ub->slots[slot];
  pthread_mutex_lock(&ub->lock);
  if (!s->live || s->base != (uintptr_t)reg->base || s->len != reg->len) {
    pthread_mutex_unlock(&ub->lock);
    return -EINVAL;
  }
  if (s->inflight) {
    pthread_mutex_unlock(&ub->lock);
    return -EBUSY;
  }
  s->live = false;
  pthread_mutex_unlock(&ub->lock);
  struct iovec empty = {NULL, 0}; /* back to a sparse hole: the pages are unpinned */
  __u64 tag = 0;
  int rc = io_uring_register_buffers_update_tag(&ub->ring, slot, &empty, &tag, 1);
  pthread_mutex_lock(&ub->lock);
  if (rc < 0) {
    s->live = true; /* still registered in the kernel: keep it usable */
  } else {
    give_slot_locked(ub, slot);
    ub->stats.slots_used--;
    rc = 0;
  }
  pthread_mutex_unlock(&ub->lock);
  return rc;
}

int64_t nic_uring_check_locked(struct uring_backend *ub, const struct nic_sge *sge) {
  if (sge->handle >= ub->nslots || sge->lkey != sge->handle + 1) return -1;
  const struct uring_slot *s = &ub->slots[sge->handle];
  uintptr_t addr = (uintptr_t)sge->addr;
  if (!s->live || addr < s->base || addr - s->base > s->len || sge->len > s->len - (addr - s->base))
    return -1;
  return (int64_t)sge->handle;
}
