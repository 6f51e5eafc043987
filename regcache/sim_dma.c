/* The sim NIC's DMA engine: one thread that takes posts in order, waits until each is due, and
 * only then reads the bytes, so the receiver sees memory as it is at DMA time. */
#define _GNU_SOURCE
#include "sim_dma.h"

#include "clock.h"
#include "fence.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

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
  s->st.completions++;
  if (w->status == -ECANCELED) s->st.cancelled++;
  nic_completion_fn done = w->done;
  void *arg = w->arg;
  int status = w->status;
  pthread_mutex_unlock(&s->lock); /* done may post, poll or dereg */
  if (done) done(arg, status);
  pthread_mutex_lock(&s->lock);
  w->next = s->free_work;
  s->free_work = w;
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

/* Lock held on entry and exit; dropped while copying and calling the receiver. The held counts
 * keep every registration (and the endpoint) alive meanwhile. */
static void perform(struct sim_nic *s, struct sim_work *w) {
  int64_t total = check_entries(s, w);
  if (total < 0) {
    w->status = (int)total;
    s->st.protection_errors++;
    return;
  }
  pthread_mutex_unlock(&s->lock);
  if ((size_t)total > s->msg_cap) {
    const size_t cap = ((size_t)total + 4095) & ~(size_t)4095;
    char *bigger = sim_map(cap);
    if (bigger) {
      sim_unmap(s->msg, s->msg_cap);
      s->msg = bigger;
      s->msg_cap = cap;
    }
  }
  if ((size_t)total <= s->msg_cap) {
    char *p = s->msg;
    void (*hook)(void *, unsigned, const void *, size_t) =
        __atomic_load_n(&nic_sim_read_hook, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < w->n; i++) {
      memcpy(p, w->sge[i].addr, w->sge[i].len);
      if (hook) hook(w->arg, i, p, w->sge[i].len); /* what was read, before anyone sees it */
      p += w->sge[i].len;
    }
    if (w->ep->receive) w->ep->receive(w->ep->arg, s->msg, (size_t)total);
  } else {
    w->status = -ENOMEM;
  }
  pthread_mutex_lock(&s->lock);
  if (!w->status) {
    s->st.delivered++;
    s->st.bytes += (uint64_t)total;
  }
}

static void *engine(void *arg) {
  struct sim_nic *s = arg;
  prctl(PR_SET_TIMERSLACK, 1ul); /* the default 50 us slack would swamp microsecond delays */
  nic_fence_thread_is_nic();     /* the DMA itself: write protection must never hold it */
  pthread_mutex_lock(&s->lock);
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
    sim_queue_pop(&s->pending);
    s->st.late_ns += nic_now_ns() - w->due_ns;
    perform(s, w);
    if (w->ep->flags & NIC_SIM_EP_ENGINE_COMPLETIONS)
      sim_complete(s, w);
    else
      sim_queue_push(&s->completed, w);
  }
  pthread_mutex_unlock(&s->lock);
  nic_fence_thread_gone();
  return NULL;
}

int sim_dma_start(struct sim_nic *s) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  int rc = pthread_cond_init(&s->wake, &attr);
  pthread_condattr_destroy(&attr);
  if (rc) return rc;
  /* The application's signal handlers must not run on our thread; faults must reach their
   * handler (the mprotect fence's) rather than kill the process, as completions run here. */
  sigset_t all, old;
  sigfillset(&all);
  sigdelset(&all, SIGSEGV);
  sigdelset(&all, SIGBUS);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = pthread_create(&s->thread, NULL, engine, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc) {
    pthread_cond_destroy(&s->wake);
    return rc;
  }
  pthread_setname_np(s->thread, "nicmalloc-sim");
  return 0;
}

void sim_dma_stop(struct sim_nic *s) {
  pthread_mutex_lock(&s->lock);
  s->stop = true;
  pthread_cond_signal(&s->wake);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->wake);
}
