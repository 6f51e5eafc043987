/* fork and private hugetlb steps.
 *
 * After fork a child shares the parent's private hugetlb pages copy-on-write, and each copy
 * needs a free huge page. When one is missing the kernel keeps the page for the parent (the
 * reservation owner): a parent's write takes the page from the child, which dies of SIGBUS at
 * its next touch of it (mm/hugetlb.c, unmap_ref_private), and a child's write gets SIGBUS at
 * once. The parent's other threads write on while the child runs its fork handlers, so nothing
 * the child does can close that race. Nor does a free page count at fork time: both processes
 * back new steps from the same pool afterwards, and so does every other program. And since
 * Linux 5.13 fork copies pinned pages (FOLL_PIN: io_uring fixed buffers, verbs MRs; not mlock)
 * for the child at once: on hugetlb with the pool empty, fork itself fails with ENOMEM.
 *
 * So a child never shares a hugetlb step. The prepare handler copies each one into ordinary
 * memory and marks the step MADV_DONTFORK for the length of the fork; the child gets the copy in
 * the step's place, before any other fork hook runs; the parent drops the copy and marks its
 * steps inheritable again. The copy is taken with every allocator lock held (the chunks lock
 * keeps steps and segments where they are), in address order as fork copies page tables; a
 * block another parent thread writes or frees during the copy (a write not ordered with the
 * fork) may reach the child in part, as with pages fork itself copies one after another while
 * other threads run, only over a longer window. The forking thread's own heap is consistent: it
 * is inside fork, not allocating. It costs each fork of a process with hugetlb steps one copy of
 * them, paid in the parent's fork (the child then owns that memory and copies nothing itself);
 * posix_spawn and vfork run no fork handlers and pay nothing. */
#define _GNU_SOURCE
#include "chunks.h"
#include "forklock.h"
#include "log.h"
#include "memcg.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* The copy of every hugetlb step, one after another in the order for_each_step visits them:
 * the chunk lock is held from before the copy until both sides of the fork are done with it,
 * so the steps do not change meanwhile. NULL when there is none. */
static char *copy;
static size_t copy_len;

typedef void (*step_fn)(unsigned index, unsigned step, void *arg);

static void for_each_step(step_fn fn, void *arg) {
  for (unsigned i = 0; i < nic_chunk_slots_used(); i++) {
    const struct nic_chunk *c = &nic_chunks[i];
    if (c->state != NIC_CHUNK_LIVE && c->state != NIC_CHUNK_DRAINING) continue;
    for (unsigned s = 0; s < nic_steps_per_chunk(); s++) {
      const struct nic_step *st = &c->steps[s];
      if (st->backed && st->mapping.kind >= NIC_PAGE_2M) fn(i, s, arg);
    }
  }
}

static void count_step(unsigned index, unsigned step, void *arg) {
  (void)index, (void)step;
  *(size_t *)arg += (size_t)1 << nic_dp.step_shift;
}

static void copy_step(unsigned index, unsigned step, void *arg) {
  size_t *off = arg;
  const size_t len = (size_t)1 << nic_dp.step_shift;
  void *base = nic_step_base(index, step);
  memcpy(copy + *off, base, len);
  /* Failing that, the child shares this step until it gets the copy over it, first thing. */
  syscall(SYS_madvise, base, len, MADV_DONTFORK);
  *off += len;
}

static void share_again(unsigned index, unsigned step, void *arg) {
  (void)arg;
  syscall(SYS_madvise, nic_step_base(index, step), (size_t)1 << nic_dp.step_shift, MADV_DOFORK);
}

static void before_fork(void) {
  copy = NULL;
  copy_len = 0;
  size_t len = 0;
  for_each_step(count_step, &len);
  if (len == 0) return;
  const size_t room = nic_memcg_headroom_now();
  /* Straight system calls: nothing else of the runtime needs to hear of this mapping. */
  void *p = room < len + len / 8 ? MAP_FAILED
                                 : (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
                                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    nic_log_warn_once("fork: no room for a copy of the %zu MiB of hugetlb dataplane pages (%s); "
                      "the child shares them, and gets SIGBUS if a copy-on-write of one finds "
                      "the hugetlb pool empty",
                      len >> 20,
                      room < len + len / 8 ? "the memory cgroup's limit" : strerror(errno));
    return;
  }
  /* Transparent huge pages where the system allows them, and faulted in at once: fewer faults
   * than the copy would take page by page. The child owns them after the fork. */
  syscall(SYS_madvise, p, len, MADV_HUGEPAGE);
  syscall(SYS_madvise, p, len, MADV_POPULATE_WRITE);
  copy = p;
  copy_len = len;
  size_t off = 0;
  for_each_step(copy_step, &off);
}

static void after_fork_parent(void) {
  if (!copy) return;
  for_each_step(share_again, NULL);
  syscall(SYS_munmap, copy, copy_len);
  copy = NULL;
}

/* Puts the copy in a step's place: the step is not mapped in the child (MADV_DONTFORK), or, if
 * that advice failed, still shares the parent's pages. */
static void take_copy(unsigned index, unsigned step, void *arg) {
  size_t *off = arg;
  const size_t len = (size_t)1 << nic_dp.step_shift;
  void *base = nic_step_base(index, step);
  if ((void *)syscall(SYS_mremap, copy + *off, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, base) ==
      MAP_FAILED) {
    /* Then the bytes are copied once more, into memory of the child's own. */
    void *p = (void *)syscall(SYS_mmap, base, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
      nic_log_warn("fork child: cannot map dataplane chunk %u step %u (%s)", index, step,
                   strerror(errno));
    else
      memcpy(base, copy + *off, len);
    syscall(SYS_munmap, copy + *off, len);
  }
  nic_chunks[index].steps[step].mapping.kind = NIC_PAGE_4K;
  *off += len;
}

/* In the child, as the locks are made anew: before every child hook, none of which may then
 * meet a step that is not mapped. Single-threaded, so the steps' kinds change without a lock;
 * for_each_step still visits the same steps (it looks at a kind before it is changed). */
static void after_fork_child(void) {
  if (!copy) return;
  size_t off = 0;
  for_each_step(take_copy, &off);
  copy = NULL;
}

NIC_FORKLOCK_CUSTOM(hugetlb_fork, NIC_FORK_HUGETLB_COPY, before_fork, after_fork_parent,
                    after_fork_child, NULL);
