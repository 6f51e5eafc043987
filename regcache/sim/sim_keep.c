/* Pages that leave the address space while a post still has to read them. A NIC pins the pages
 * of a registration: when the process unmaps them (or drops them with madvise, or maps something
 * else over them) the NIC still holds the same physical pages, and as no one can write them any
 * more their bytes are frozen at that moment. The sim reads through the process's addresses, so
 * it copies those bytes aside at that moment and its DMA reads the copy: the receiver gets what
 * a NIC would send, never the pages mapped there later. Until pages leave, nothing is copied, so
 * a write between post and DMA still reaches the receiver (which is what the fences are for).
 *
 * Lock order: sims_lock (read) before a sim's lock. sims_lock prefers readers (glibc's default),
 * so a DMA whose own frees unmap memory (the receiver, the detect hook) never waits behind a
 * closing sim while another thread waits for that DMA here. */
#define _GNU_SOURCE
#include "events.h"
#include "sim_dma.h"

#include "forklock.h"
#include "nocancel.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_rwlock_t sims_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct sim_nic *sims;
/* Posts of every sim whose DMA has not finished: the one load an unmap pays otherwise. */
static uint64_t sim_dma_ahead;
/* Sim locks this thread holds. Nothing under a sim's lock allocates, frees or unmaps through the
 * interposed calls (the translation-cache model maps its tables by system call: tcache_model.c;
 * a free there could wait on the registration cache, which waits on this sim); should anything
 * come to, its unmap must not wait for the very sim it interrupts. */
static __thread unsigned locks_held __attribute__((tls_model("initial-exec")));

void sim_lock(struct sim_nic *s) {
  pthread_mutex_lock(&s->lock);
  locks_held++;
}

void sim_unlock(struct sim_nic *s) {
  locks_held--;
  pthread_mutex_unlock(&s->lock);
}

void sim_keep_track(struct sim_nic *s) {
  pthread_rwlock_wrlock(&sims_lock);
  s->next_sim = sims;
  sims = s;
  pthread_rwlock_unlock(&sims_lock);
}

void sim_keep_untrack(struct sim_nic *s) {
  pthread_rwlock_wrlock(&sims_lock);
  for (struct sim_nic **p = &sims; *p; p = &(*p)->next_sim)
    if (*p == s) {
      *p = s->next_sim;
      break;
    }
  pthread_rwlock_unlock(&sims_lock);
}

void sim_keep_ahead(struct sim_work *w, bool ahead) {
  if (w->ahead == ahead) return;
  w->ahead = ahead;
  if (ahead)
    __atomic_add_fetch(&sim_dma_ahead, 1, __ATOMIC_ACQ_REL);
  else
    __atomic_sub_fetch(&sim_dma_ahead, 1, __ATOMIC_ACQ_REL);
}

/* Raw system calls: this runs inside an interposed munmap, possibly inside the allocator. */
void sim_keep_drop(struct sim_work *w) {
  for (unsigned i = 0; i < w->n; i++) {
    if (w->kept[i] && w->kept[i] != SIM_KEEP_FAILED) syscall(SYS_munmap, w->kept[i], w->sge[i].len);
    w->kept[i] = NULL;
  }
}

static bool overlaps(const struct nic_sge *e, uintptr_t start, uintptr_t end) {
  const uintptr_t a = (uintptr_t)e->addr;
  return a < end && (start <= a || start - a < e->len);
}

/* The whole entry, not only its part that leaves: a write to the rest after this is then not
 * seen, which only a program that unmaps part of what it posted and rewrites the rest would
 * notice. */
static void keep(struct sim_nic *s, struct sim_work *w, uintptr_t start, uintptr_t end) {
  for (unsigned i = 0; i < w->n; i++) {
    const struct nic_sge *e = &w->sge[i];
    if (w->kept[i] || !overlaps(e, start, end)) continue;
    long p =
        syscall(SYS_mmap, NULL, e->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == -1) {
      w->kept[i] = SIM_KEEP_FAILED;
    } else if (sim_read(s, (void *)p, e->addr, e->len)) {
      syscall(SYS_munmap, p, e->len);
      w->kept[i] = SIM_KEEP_FAILED;
    } else {
      w->kept[i] = (void *)p;
    }
    s->st.kept_entries++;
  }
}

static bool work_overlaps(const struct sim_work *w, uintptr_t start, uintptr_t end) {
  for (unsigned i = 0; i < w->n; i++)
    if (overlaps(&w->sge[i], start, end)) return true;
  return false;
}

void nic_sim_pages_leaving(uintptr_t start, size_t len) {
  if (!__atomic_load_n(&sim_dma_ahead, __ATOMIC_ACQUIRE) || !len || locks_held) return;
  const uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
  const int cancel = nic_cancel_off(); /* munmap is no cancellation point: the wait below is none */
  pthread_rwlock_rdlock(&sims_lock);
  for (struct sim_nic *s = sims; s; s = s->next_sim) {
    sim_lock(s);
    /* A DMA reading the range finishes first, as the NIC's read of pinned pages would. Its own
     * unmaps (the engine thread's) cannot wait for it: it reads the copies made now. */
    const bool engine = pthread_equal(pthread_self(), s->thread);
    while (!engine && s->performing && work_overlaps(s->performing, start, end))
      pthread_cond_wait(&s->dma_done, &s->lock);
    if (engine && s->performing) keep(s, s->performing, start, end);
    for (struct sim_work *w = s->pending.head; w; w = w->next)
      keep(s, w, start, end);
    sim_unlock(s);
  }
  pthread_rwlock_unlock(&sims_lock);
  nic_cancel_restore(cancel);
}

/* fork: the child has no engine, and a sim lock a parent thread held would stay taken. */
static void after_fork_reset(void) {
  sims = NULL;
  __atomic_store_n(&sim_dma_ahead, 0, __ATOMIC_RELEASE);
  sims_lock = (pthread_rwlock_t)PTHREAD_RWLOCK_INITIALIZER;
}
NIC_FORKLOCK_CUSTOM(sim_keep, NIC_FORK_SIM_KEEP, NULL, NULL, after_fork_reset, NULL);

/* The interposed munmap family (alloc/os/interpose*.c) says when pages leave. */
NIC_MEMORY_WATCHER(sim_kept_pages, .pages_leaving = nic_sim_pages_leaving);
