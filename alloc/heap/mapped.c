/* The table is open addressing with linear probing in memory of its own (mmap, never malloc),
 * under one lock: mapped blocks are few and each costs a system call anyway. Mappings are made
 * and removed with the lock dropped. */
#define _GNU_SOURCE
#include "mapped.h"

#include "forklock.h"
#include "map.h"
#include "page.h"
#include "released.h"

#include <pthread.h>
#include <sys/mman.h>

#define FIRST_CAPACITY ((size_t)256)

struct entry {
  uintptr_t start; /* 0: empty */
  size_t len;
  void *base; /* an offset block's mimalloc block; NULL for a mapping */
};

unsigned long nic_mapped_blocks;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;
static size_t capacity; /* a power of two */

static size_t home(uintptr_t start) {
  return (size_t)(((start / NIC_PAGE_SIZE) * 0x9e3779b97f4a7c15ull) >> 17) & (capacity - 1);
}

static struct entry *find_locked(uintptr_t start) {
  if (!capacity) return NULL;
  for (size_t i = home(start);; i = (i + 1) & (capacity - 1)) {
    if (table[i].start == start) return &table[i];
    if (!table[i].start) return NULL;
  }
}

static void put_locked(struct entry e) {
  size_t i = home(e.start);
  while (table[i].start)
    i = (i + 1) & (capacity - 1);
  table[i] = e;
}

/* Room for one more at most half full, so that probes stay short. */
static bool make_room_locked(void) {
  if (2 * (nic_mapped_blocks + 1) <= capacity) return true;
  const size_t bigger = capacity ? 2 * capacity : FIRST_CAPACITY;
  /* By system call: the interposed munmap could take the registration cache's lock under ours
   * (forklock.h ranks this lock after it). */
  struct entry *fresh = nic_map_anon(bigger * sizeof(struct entry), PROT_READ | PROT_WRITE, false);
  if (!fresh) return false;
  struct entry *old = table;
  const size_t old_capacity = capacity;
  table = fresh;
  capacity = bigger;
  for (size_t i = 0; i < old_capacity; i++)
    if (old[i].start) put_locked(old[i]);
  if (old) nic_unmap(old, old_capacity * sizeof(struct entry));
  return true;
}

/* Removes e, moving later entries of its probe run back so that no search stops short. */
static void remove_locked(struct entry *e) {
  size_t hole = (size_t)(e - table);
  for (size_t i = (hole + 1) & (capacity - 1); table[i].start; i = (i + 1) & (capacity - 1)) {
    const size_t h = home(table[i].start);
    /* An entry may fill the hole unless its home lies cyclically in (hole, i]. */
    const bool stays = hole <= i ? (hole < h && h <= i) : (hole < h || h <= i);
    if (stays) continue;
    table[hole] = table[i];
    hole = i;
  }
  table[hole].start = 0;
  __atomic_store_n(&nic_mapped_blocks, nic_mapped_blocks - 1, __ATOMIC_RELAXED);
}

void *nic_mapped_alloc(size_t size, size_t alignment) {
  const size_t align = alignment > NIC_PAGE_SIZE ? alignment : NIC_PAGE_SIZE;
  if (size > SIZE_MAX - NIC_PAGE_SIZE) return NULL;
  const size_t len = size ? (size + NIC_PAGE_SIZE - 1) & ~(NIC_PAGE_SIZE - 1) : NIC_PAGE_SIZE;
  if (len > SIZE_MAX - (align - NIC_PAGE_SIZE)) return NULL;
  const size_t span = len + (align - NIC_PAGE_SIZE);
  /* The span is only address space (PROT_NONE, not accounted), so an alignment's padding
   * costs nothing; the block itself is mapped over it accounted, as glibc maps its large
   * blocks: under the kernel's default overcommit heuristic a request larger than memory and
   * swap together is refused here and malloc returns NULL where glibc's does (with
   * MAP_NORESERVE it succeeded, and writing it called the OOM killer instead: a program that
   * tries a size and falls back on NULL was killed). Pages still cost only once written. */
  char *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  if (mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
      MAP_FAILED) {
    munmap(raw, span);
    return NULL;
  }
  if (p > raw) munmap(raw, (size_t)(p - raw));
  if (raw + span > p + len) munmap(p + len, (size_t)(raw + span - (p + len)));
  if (!nic_mapped_add(p, len, NULL)) {
    munmap(p, len);
    return NULL;
  }
  return p;
}

bool nic_mapped_add(void *p, size_t usable, void *base) {
  pthread_mutex_lock(&lock);
  const bool room = make_room_locked();
  if (room) {
    put_locked((struct entry){(uintptr_t)p, usable, base});
    __atomic_store_n(&nic_mapped_blocks, nic_mapped_blocks + 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&lock);
  return room;
}

size_t nic_mapped_usable(const void *p) {
  pthread_mutex_lock(&lock);
  const struct entry *e = find_locked((uintptr_t)p);
  const size_t len = e ? e->len : 0;
  pthread_mutex_unlock(&lock);
  return len;
}

bool nic_mapped_contains(const void *p) {
  bool found = false;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < capacity && !found; i++)
    found = table[i].start && (uintptr_t)p - table[i].start < table[i].len;
  pthread_mutex_unlock(&lock);
  return found;
}

size_t nic_mapped_take(const void *p, void **base) {
  pthread_mutex_lock(&lock);
  struct entry *e = find_locked((uintptr_t)p);
  const size_t len = e ? e->len : 0;
  *base = e ? e->base : NULL;
  if (e) remove_locked(e);
  pthread_mutex_unlock(&lock);
  return len;
}

void nic_mapped_unmap(void *p, size_t len) {
  nic_released_note(p);
  munmap(p, len);
}

void *nic_mapped_resize(void *p, size_t size) {
  if (size > SIZE_MAX - NIC_PAGE_SIZE) return NULL;
  const size_t len = size ? (size + NIC_PAGE_SIZE - 1) & ~(NIC_PAGE_SIZE - 1) : NIC_PAGE_SIZE;
  /* The entry leaves the table while the block moves, so that no other thread finds a block
   * that is not there; the caller owns p, so nobody frees it meanwhile. */
  pthread_mutex_lock(&lock);
  struct entry *e = find_locked((uintptr_t)p);
  const bool mapping = e && !e->base;
  const size_t old_len = mapping ? e->len : 0;
  if (mapping) remove_locked(e);
  pthread_mutex_unlock(&lock);
  if (!mapping) return NULL;
  void *q = mremap(p, old_len, len, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) q = NULL;
  if (q && q != p) nic_released_note(p);
  pthread_mutex_lock(&lock);
  /* The removal above left room for one. */
  put_locked(q ? (struct entry){(uintptr_t)q, len, NULL}
               : (struct entry){(uintptr_t)p, old_len, NULL});
  __atomic_store_n(&nic_mapped_blocks, nic_mapped_blocks + 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
  return q;
}

void nic_mapped_totals(size_t *blocks, size_t *bytes) {
  *blocks = *bytes = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < capacity; i++)
    if (table[i].start && !table[i].base) ++*blocks, *bytes += table[i].len;
  pthread_mutex_unlock(&lock);
}

/* Held across fork (alloc/base/forklock.h). */
NIC_FORKLOCK_MUTEX(mapped, NIC_FORK_MAPPED, &lock, NULL);
