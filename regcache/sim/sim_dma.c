/* The sim NIC's DMA engine: one thread that takes posts in order, waits until each is due, and
 * only then reads the bytes, so the receiver sees memory as it is at DMA time. */
#define _GNU_SOURCE
#include "sim_dma.h"

#include "clock.h"
#include "events.h"
#include "nocancel.h"
#include "page.h"
#include "thread.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

void (*nic_sim_read_hook)(void *arg, unsigned index, const void *bytes, size_t len);

void sim_release(struct sim_nic *s, struct sim_work *w) {
  for (unsigned i = 0; i < w->n; i++)
    if (w->held[i] != SIM_NO_SLOT) {
      s->regs[w->held[i]].inflight--;
      w->held[i] = SIM_NO_SLOT;
    }
  w->ep->inflight--;
  s->st.in_flight--;
}

void sim_complete(struct sim_nic *s, struct sim_work *w) {
  sim_release(s, w);
  sim_keep_ahead(w, false); /* cancelled by close before its DMA */
  sim_keep_drop(w);
  s->st.completions++;
  if (w->status == -ECANCELED) s->st.cancelled++;
  nic_completion_fn done = w->done;
  void *arg = w->arg;
  int status = w->status;
  sim_unlock(s); /* done may post, poll or dereg */
  if (done) done(arg, status);
  sim_lock(s);
  nic_pool_put(&s->work, w);
}

void sim_queue_push(struct sim_queue *q, struct sim_work *w) {
  w->next = NULL;
  if (q->tail)
    q->tail->next = w;
  else
    q->head = w;
  q->tail = w;
}

struct sim_work *sim_queue_pop(struct sim_queue *q) {
  struct sim_work *w = q->head;
  if (w && !(q->head = w->next)) q->tail = NULL;
  return w;
}

/* Lock held. What the NIC does before reading: each entry against the registration its lkey
 * names now, stopping at the first that is not covered (as the NIC aborts the work request).
 * Checked entries go through the translation-cache model. Returns the message length or
 * -EFAULT. */
static int64_t check_entries(struct sim_nic *s, struct sim_work *w) {
  int64_t total = 0;
  for (unsigned i = 0; i < w->n; i++) {
    const struct nic_sge *e = &w->sge[i];
    struct sim_reg *r = sim_lookup(s, e->lkey);
    uintptr_t a = (uintptr_t)e->addr;
    if (!r || a < r->base || a - r->base > r->len || e->len > r->len - (a - r->base))
      return -EFAULT;
    if (w->held[i] == SIM_NO_SLOT) { /* registered after the post: hold it from now on */
      w->held[i] = (uint32_t)(r - s->regs);
      r->inflight++;
    }
    nic_tcache_access(s->tcache, e->lkey, r->base, a, e->len);
    total += e->len;
  }
  return total;
}

int sim_read(struct sim_nic *s, void *dst, const void *src, size_t len) {
  char *to = dst;
  uintptr_t from = (uintptr_t)src;
  while (len) {
    /* The kernel copies what the CPU may read, and says EFAULT instead of faulting. By the
     * calling thread's id: the leader getpid names has no memory once main left by pthread_exit. */
    struct iovec local = {to, len}, remote = {(void *)from, len};
    ssize_t n = process_vm_readv(gettid(), &local, 1, &remote, 1, 0);
    if (n < 0 && errno != EFAULT && errno != ENOSYS && errno != EPERM) return -EFAULT;
    /* A page the CPU may not read (PROT_NONE) the NIC reads all the same: /proc/self/mem reads
     * past the protection, as a debugger does, and says EIO where nothing is mapped. */
    if (n <= 0 && s->mem_fd >= 0) n = pread(s->mem_fd, to, len, (off_t)from);
    if (n < 0 && s->mem_fd < 0 && (errno == ENOSYS || errno == EPERM)) {
      memcpy(to, (const void *)from, len); /* neither is allowed here: as a plain read would */
      return 0;
    }
    if (n <= 0) return -EFAULT;
    to += n;
    from += (size_t)n;
    len -= (size_t)n;
  }
  return 0;
}

/* Copies every entry into the message: from memory, or from what was kept when its pages left.
 * Lock not held; s->performing = w keeps an unmap of w's memory waiting until this is done. */
static int read_entries(struct sim_nic *s, struct sim_work *w) {
  char *p = s->msg;
  for (unsigned i = 0; i < w->n; i++) {
    const void *kept = w->kept[i];
    if (kept == SIM_KEEP_FAILED) return -EFAULT;
    if (kept)
      memcpy(p, kept, w->sge[i].len);
    else if (sim_read(s, p, w->sge[i].addr, w->sge[i].len))
      return -EFAULT;
    p += w->sge[i].len;
  }
  return 0;
}

/* Lock held. The memory of w is read: nothing needs keeping for it any more. */
static void dma_finished(struct sim_nic *s, struct sim_work *w) {
  s->performing = NULL;
  pthread_cond_broadcast(&s->dma_done);
  sim_keep_ahead(w, false);
  sim_keep_drop(w);
}

/* Lock held on entry and exit; dropped while copying and calling the receiver. The held counts
 * keep every registration (and the endpoint) alive meanwhile. From here until its bytes are
 * read, s->performing = w holds back an unmap of w's memory (nic_sim_pages_leaving). */
static void perform(struct sim_nic *s, struct sim_work *w) {
  s->performing = w;
  int64_t total = check_entries(s, w);
  if (total < 0) {
    w->status = (int)total;
    s->st.protection_errors++;
    dma_finished(s, w);
    return;
  }
  sim_unlock(s);
  int rc = (size_t)total <= s->msg_cap ? read_entries(s, w) : -ENOMEM;
  int refused = 0; /* the receiver's answer: it could not take the message */
  sim_lock(s);
  dma_finished(s, w);
  if (rc == -EFAULT) s->st.unreadable++;
  sim_unlock(s);
  if (!rc) {
    /* After the reads, not between them: the hook and the receiver may free, and so unmap,
     * memory, which must not wait for this DMA (nic_sim_pages_leaving). */
    void (*hook)(void *, unsigned, const void *, size_t) =
        __atomic_load_n(&nic_sim_read_hook, __ATOMIC_ACQUIRE);
    const char *p = s->msg;
    for (unsigned i = 0; hook && i < w->n; p += w->sge[i].len, i++)
      hook(w->arg, i, p, w->sge[i].len); /* what was read, before anyone sees it */
    if (w->ep->receive) refused = w->ep->receive(w->ep->arg, s->msg, (size_t)total);
  }
  sim_lock(s);
  w->status = rc ? rc : refused;
  if (refused) {
    s->st.refused++;
  } else if (!rc) {
    s->st.delivered++;
    s->st.bytes += (uint64_t)total;
  }
}

/* Lock not held. Grows the message buffer for w before its DMA starts: the old one's unmap
 * and an unmap may wait for the DMA in progress (nic_sim_pages_leaving). A failed grow leaves
 * the buffer short, and perform completes w with -ENOMEM. */
static void grow_msg(struct sim_nic *s, const struct sim_work *w) {
  size_t total = 0;
  for (unsigned i = 0; i < w->n; i++)
    total += w->sge[i].len;
  if (total <= s->msg_cap) return;
  const size_t cap = nic_page_up(total);
  char *bigger = sim_map(cap); /* pages of its own: see sim_map */
  if (!bigger) return;
  sim_unmap(s->msg, s->msg_cap);
  s->msg = bigger;
  s->msg_cap = cap;
}

static void *engine(void *arg) {
  struct sim_nic *s = arg;
  const struct sim_work *grown_for = NULL;
  prctl(PR_SET_TIMERSLACK, 1ul); /* the default 50 us slack would swamp microsecond delays */
  nic_publish_nic_thread(true);  /* the DMA itself: write protection must never hold it */
  sim_lock(s);
  while (!s->stop) {
    struct sim_work *w = s->pending.head;
    if (!w || s->paused) {
      pthread_cond_wait(&s->wake, &s->lock);
      continue;
    }
    if (w->due_ns > nic_now_ns()) {
      struct timespec until = {(time_t)(w->due_ns / 1000000000u), (long)(w->due_ns % 1000000000u)};
      pthread_cond_timedwait(&s->wake, &s->lock, &until);
      continue; /* re-check: woken for stop, pause or spuriously */
    }
    if (grown_for != w) { /* only the engine takes posts off pending: w stays the head */
      grown_for = w;
      sim_unlock(s);
      grow_msg(s, w);
      sim_lock(s);
      continue;
    }
    grown_for = NULL;
    sim_queue_pop(&s->pending);
    s->st.late_ns += nic_now_ns() - w->due_ns;
    perform(s, w);
    if (w->ep->flags & NIC_SIM_EP_ENGINE_COMPLETIONS)
      sim_complete(s, w);
    else
      sim_queue_push(&s->completed, w);
    if (s->completed.head && !s->work_signalled) { /* once per burst, until poll() empties it */
      s->work_signalled = true;
      nic_eventfd_signal_nocancel(s->work_efd);
    }
  }
  sim_unlock(s);
  nic_publish_nic_thread(false);
  return NULL;
}

int sim_dma_start(struct sim_nic *s) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&s->wake, &attr);
  pthread_condattr_destroy(&attr);
  if (rc) return rc;
  if ((rc = pthread_cond_init(&s->dma_done, NULL))) {
    pthread_cond_destroy(&s->wake);
    return rc;
  }
  /* The application's signal handlers must not run on our thread; faults must reach their
   * handler (the mprotect fence's) rather than kill the process, as completions run here. */
  sigset_t all;
  nic_signals_but_faults(&all);
  rc = nic_own_thread_create(&s->thread, "nicmalloc-sim", engine, s, &all);
  if (rc) {
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->dma_done);
    return rc;
  }
  return 0;
}

void sim_dma_stop(struct sim_nic *s) {
  sim_lock(s);
  s->stop = true;
  pthread_cond_signal(&s->wake);
  sim_unlock(s);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->wake);
  pthread_cond_destroy(&s->dma_done);
}
