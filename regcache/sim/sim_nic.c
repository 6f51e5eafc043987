/* The sim backend's table, post, poll and close; the engine thread is in sim_dma.c. */
#define _GNU_SOURCE
#include "sim_dma.h"

#include "clock.h"
#include "config.h"
#include "log.h"
#include "maps.h"
#include "nocancel.h"
#include "open_fds.h"
#include "proc_own.h"
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_SGE_LIMIT 256
#define MAX_REGIONS_LIMIT 65536 /* the slot index is the lkey's low 16 bits */
#define REMOTE (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE)

void nic_sim_config_defaults(struct nic_sim_config *c) {
  *c = (struct nic_sim_config){.max_sge = 32,
                               .max_regions = MAX_REGIONS_LIMIT,
                               .max_region_bytes = (size_t)1 << 30,
                               .fixed_delay_ns = -1,
                               .seed = 1};
  c->tcache = nic_tcache_preset_find(NIC_TCACHE_DEFAULT_PRESET)->params;
}

void nic_sim_config_from_env(struct nic_sim_config *c) {
  nic_sim_config_defaults(c);
  c->max_sge = (uint32_t)nic_setting_number(NIC_S_SIM_MAX_SGE); /* 1 to MAX_SGE_LIMIT */
  c->seed = nic_setting_number(NIC_S_SIM_SEED);
  /* fixed:<microseconds>, or a file read (and complained about) by nic_sim_open. */
  if (nic_setting_choice(NIC_S_SIM_DELAYS) == 0)
    c->fixed_delay_ns = (int64_t)nic_setting_number(NIC_S_SIM_DELAYS) * 1000;
  else
    c->delays_path = nic_setting_text(NIC_S_SIM_DELAYS);
  nic_tcache_params_from_env(&c->tcache);
}

/* ---- internals shared with sim_dma.c ---- */
struct sim_reg *sim_lookup(struct sim_nic *s, uint32_t lkey) {
  uint32_t i = lkey & 0xffff;
  if (!lkey || i >= s->unused_slot) return NULL;
  return s->regs[i].lkey == lkey ? &s->regs[i] : NULL;
}

/* A NIC given write access pins the pages for writing, and the kernel refuses that on memory the
 * process may not write (ibv_reg_mr and io_uring's buffer registration say EFAULT): so does the
 * sim, lest a program that works here fail on a device. */
struct writable_walk {
  uintptr_t next;
  bool ok;
};

static bool writable_one(const struct nic_maps_entry *e, void *arg) {
  struct writable_walk *w = arg;
  w->ok = e->start <= w->next && e->writable;
  w->next = e->end;
  return w->ok;
}

/* 0, -EFAULT where a page of the range is not writable (or not mapped), or the error that kept
 * the maps from being read (-EMFILE): memory not known to be bad is not called so, and the
 * caller copies it or asks again. */
static int range_writable(const void *base, size_t len) {
  struct writable_walk w = {.next = (uintptr_t)base};
  const uintptr_t end = (uintptr_t)base + len;
  const int rc = nic_maps_walk(w.next, end, writable_one, &w);
  return rc ? rc : w.ok && w.next >= end ? 0 : -EFAULT;
}

/* ---- the ops table ---- */
static int sim_reg(struct nic_backend *b, void *base, size_t len, unsigned access,
                   struct nic_registration *out) {
  struct sim_nic *s = b->priv;
  unsigned known = NIC_ACCESS_LOCAL_WRITE | REMOTE;
  if (!base || !len || len > b->caps.max_region_bytes || (uintptr_t)base + len < (uintptr_t)base ||
      (access & ~known) || !out)
    return -EINVAL;
  const int writable =
      access & (NIC_ACCESS_LOCAL_WRITE | NIC_ACCESS_REMOTE_WRITE) ? range_writable(base, len) : 0;
  if (writable) return writable;
  sim_lock(s);
  uint32_t i = s->free_slot;
  if (i != SIM_NO_SLOT) {
    s->free_slot = s->regs[i].next_free;
  } else if (s->unused_slot < b->caps.max_regions) {
    i = s->unused_slot++;
  } else {
    sim_unlock(s);
    return -ENOMEM; /* what ibv_reg_mr says when the NIC's table is full */
  }
  struct sim_reg *r = &s->regs[i];
  const unsigned last = r->gen ? r->gen : s->first_gen;
  uint16_t gen = (uint16_t)(last % 0xffff + 1); /* 1..65535: the lkey is never 0 */
  uint32_t lkey = (uint32_t)gen << 16 | i;
  *r = (struct sim_reg){
      .lkey = lkey, .gen = gen, .base = (uintptr_t)base, .len = len, .access = access};
  s->st.regions++;
  s->st.registered_bytes += len;
  s->st.entries_needed += nic_tcache_entries_for(nic_tcache_params_of(s->tcache), r->base, len);
  sim_unlock(s);
  /* As on mlx5, rkey = lkey, but only when remote access was asked for. */
  *out = (struct nic_registration){.base = base,
                                   .len = len,
                                   .access = access,
                                   .lkey = lkey,
                                   .rkey = (access & REMOTE) ? lkey : 0,
                                   .handle = lkey};
  return 0;
}

static int sim_dereg(struct nic_backend *b, struct nic_registration *reg) {
  struct sim_nic *s = b->priv;
  if (!reg) return -EINVAL;
  sim_lock(s);
  struct sim_reg *r = sim_lookup(s, reg->lkey);
  int rc = 0;
  if (!r || r->base != (uintptr_t)reg->base || r->len != reg->len) {
    rc = -EINVAL;
  } else if (r->inflight) {
    rc = -EBUSY;
  } else {
    nic_tcache_forget(s->tcache, r->lkey); /* the NIC invalidates its cached entries */
    s->st.regions--;
    s->st.registered_bytes -= r->len;
    s->st.entries_needed -=
        nic_tcache_entries_for(nic_tcache_params_of(s->tcache), r->base, r->len);
    r->lkey = 0;
    r->next_free = s->free_slot;
    s->free_slot = (uint32_t)(r - s->regs);
  }
  sim_unlock(s);
  return rc;
}

void *sim_map(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void sim_unmap(void *p, size_t len) {
  if (p) munmap(p, len);
}

/* Lock held, dropped while mapping (the engine thread would wait on it). A node of pool (work
 * items, endpoints); NULL when no memory could be mapped. */
static void *take_node(struct sim_nic *s, struct nic_pool *pool) {
  void *node = nic_pool_try_get(pool);
  if (node) return node;
  sim_unlock(s);
  void *block = nic_pool_map_block(pool);
  sim_lock(s);
  if (!block) return NULL;
  nic_pool_add_block(pool, block);
  return nic_pool_try_get(pool);
}

static int sim_post(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge,
                    unsigned n, nic_completion_fn done, void *arg) {
  struct sim_nic *s = b->priv;
  const bool too_many = n > b->caps.max_sge;
  bool ok = ep && ep->sim == s && sge && n >= 1 && !too_many;
  for (unsigned i = 0; ok && i < n; i++)
    ok = sge[i].len > 0;
  sim_lock(s);
  if (!ok) {
    s->st.rejected++;
    sim_unlock(s);
    return too_many ? -E2BIG : -EINVAL;
  }
  /* The pool grows outside the lock; it is never shrunk before close. */
  struct sim_work *w = take_node(s, &s->work);
  if (!w) {
    sim_unlock(s);
    return -ENOMEM;
  }
  *w = (struct sim_work){.ep = ep, .done = done, .arg = arg, .n = n};
  w->kept = (void **)&w->sge[b->caps.max_sge];
  w->held = (uint32_t *)&w->kept[b->caps.max_sge];
  memset(w->kept, 0, n * sizeof *w->kept);
  sim_keep_ahead(w, true);
  memcpy(w->sge, sge, n * sizeof *sge); /* the caller's array may be on its stack */
  for (unsigned i = 0; i < n; i++) {    /* hold what the entries name, so dereg says EBUSY */
    struct sim_reg *r = sim_lookup(s, sge[i].lkey);
    w->held[i] = r ? (uint32_t)(r - s->regs) : SIM_NO_SLOT;
    if (r) r->inflight++;
  }
  uint64_t delay = nic_sim_delays_next(&s->delays), due = nic_now_ns() + delay;
  w->due_ns = s->last_due = due > s->last_due ? due : s->last_due; /* in post order */
  s->st.delay_ns += delay;
  bool was_idle = !s->pending.head;
  sim_queue_push(&s->pending, w);
  ep->inflight++;
  s->st.posts++;
  s->st.in_flight++;
  if (was_idle) pthread_cond_signal(&s->wake);
  sim_unlock(s);
  return 0;
}

/* max <= 0 runs every ready completion (the sim's receive functions run on its engine). */
static int sim_poll(struct nic_backend *b, int max) {
  struct sim_nic *s = b->priv;
  int ran = 0;
  sim_lock(s);
  for (struct sim_work *w; (max <= 0 || ran < max) && (w = sim_queue_pop(&s->completed)); ran++)
    sim_complete(s, w);
  if (!s->completed.head && s->work_signalled) {
    s->work_signalled = false;
    nic_eventfd_take_nocancel(s->work_efd); /* under the lock, on the program's threads */
  }
  sim_unlock(s);
  return ran;
}

/* An open that found no descriptor left (EMFILE) went on without one: made here, under the
 * backends' lock as every call of event_fd, once one can be had, rather than none for good. */
static int sim_event_fd(struct nic_backend *b) {
  struct sim_nic *s = b->priv;
  const int known = __atomic_load_n(&s->work_efd, __ATOMIC_ACQUIRE);
  if (known >= 0) return known;
  sim_lock(s);
  if (s->work_efd < 0) {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) {
      const int err = errno;
      sim_unlock(s);
      return -err;
    }
    nic_fds_adopt(fd); /* as the open's own: a child of fork closes its copy */
    __atomic_store_n(&s->work_efd, fd, __ATOMIC_RELEASE);
    /* Completions queued while there was no descriptor set work_signalled with nothing to
     * signal (the engine's write to -1): the new one must say they are there. */
    if (s->completed.head) {
      s->work_signalled = true;
      nic_eventfd_signal_nocancel(fd);
    }
  }
  const int fd = s->work_efd;
  sim_unlock(s);
  return fd;
}

static void sim_close(struct nic_backend *b) {
  struct sim_nic *s = b->priv;
  sim_keep_untrack(s); /* first: an unmap may be waiting for the engine */
  sim_dma_stop(s);
  sim_lock(s);
  struct sim_work *w;
  while ((w = sim_queue_pop(&s->completed)))
    sim_complete(s, w); /* their real status */
  while ((w = sim_queue_pop(&s->pending))) {
    w->status = -ECANCELED;
    sim_complete(s, w);
  }
  sim_unlock(s);
  nic_pool_release(&s->work);
  nic_pool_release(&s->endpoint_pool); /* the endpoints still open too */
  nic_tcache_free(s->tcache);
  nic_sim_delays_release(&s->delays);
  pthread_mutex_destroy(&s->lock);
  if (s->mem_fd >= 0) close(s->mem_fd);
  if (s->work_efd >= 0) close(s->work_efd);
  sim_unmap(s->regs, s->regs_bytes);
  sim_unmap(s->msg, s->msg_cap);
  sim_unmap(s, sizeof *s);
}

bool nic_sim_is(const struct nic_backend *b) {
  return b && b->close == sim_close;
}

static void load_delays(struct sim_nic *s, const struct nic_sim_config *c) {
  if (c->fixed_delay_ns >= 0) {
    nic_sim_delays_fixed(&s->delays, (uint64_t)c->fixed_delay_ns);
    return;
  }
  nic_sim_delays_builtin(&s->delays, c->seed);
  if (!c->delays_path) return;
  unsigned line;
  int rc = nic_sim_delays_load(&s->delays, c->delays_path, c->seed, &line);
  if (rc == -EINVAL && line)
    nic_log_warn("NICMALLOC_SIM_DELAYS=%s: line %u is not a delay in microseconds (0 to 1e7); "
                 "using the built-in delays",
                 c->delays_path, line);
  else if (rc == -EINVAL)
    nic_log_warn("NICMALLOC_SIM_DELAYS=%s holds no delays; using the built-in delays",
                 c->delays_path);
  else if (rc == -ESPIPE)
    nic_log_warn("NICMALLOC_SIM_DELAYS=%s is not a regular file; using the built-in delays",
                 c->delays_path);
  else if (rc)
    nic_log_warn("NICMALLOC_SIM_DELAYS=%s cannot be read (%s); using the built-in delays",
                 c->delays_path, strerror(-rc));
}

static struct nic_endpoint *sim_endpoint_create(struct nic_backend *b,
                                                const struct nic_endpoint_params *p) {
  return nic_sim_endpoint_open_ex(b, p->receive, p->arg, p->sim_flags);
}

struct nic_backend *nic_sim_open(const struct nic_sim_config *c) {
  if (!c || c->max_sge < 1 || c->max_sge > MAX_SGE_LIMIT || c->max_regions < 1 ||
      c->max_regions > MAX_REGIONS_LIMIT || !c->max_region_bytes ||
      !nic_tcache_params_valid(&c->tcache)) {
    errno = EINVAL;
    return NULL;
  }
  struct sim_nic *s = sim_map(sizeof *s);
  if (!s) return NULL;
  s->regs_bytes = (size_t)c->max_regions * sizeof *s->regs;
  s->regs = sim_map(s->regs_bytes);
  s->tcache = nic_tcache_new(&c->tcache);
  if (!s->regs || !s->tcache || pthread_mutex_init(&s->lock, NULL)) {
    nic_tcache_free(s->tcache);
    sim_unmap(s->regs, s->regs_bytes);
    sim_unmap(s, sizeof *s);
    errno = ENOMEM;
    return NULL;
  }
  load_delays(s, c);
  s->free_slot = SIM_NO_SLOT;
  s->first_gen = (uint16_t)((uint32_t)getpid() * 2654435761u >> 16);
  s->paused = c->start_paused;
  s->endpoint_pool.node_size = sizeof(struct nic_endpoint);
  s->endpoint_pool.block_bytes = 4096; /* a program opens a few */
  s->work.node_size = sizeof(struct sim_work) +
                      c->max_sge * (sizeof(struct nic_sge) + sizeof(void *) + sizeof(uint32_t));
  s->mem_fd = nic_proc_own_open("mem", O_RDONLY | O_CLOEXEC); /* -1: sim_read does without */
  s->work_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);       /* -1: event_fd makes it later */
  s->b = (struct nic_backend){.name = "sim",
                              .caps = {.max_sge = c->max_sge,
                                       .max_region_bytes = c->max_region_bytes,
                                       .max_regions = c->max_regions,
                                       .zero_copy = true, /* reads the caller's memory */
                                       .pages_follow = true /* by address, at post time */},
                              .reg = sim_reg,
                              .dereg = sim_dereg,
                              .post = sim_post,
                              .poll = sim_poll,
                              .event_fd = sim_event_fd,
                              .close = sim_close,
                              .endpoint_create = sim_endpoint_create,
                              .endpoint_destroy = nic_sim_endpoint_close,
                              .priv = s};
  int rc = sim_dma_start(s);
  if (rc) {
    if (s->mem_fd >= 0) close(s->mem_fd);
    if (s->work_efd >= 0) close(s->work_efd);
    nic_tcache_free(s->tcache);
    nic_sim_delays_release(&s->delays);
    pthread_mutex_destroy(&s->lock);
    sim_unmap(s->regs, s->regs_bytes);
    sim_unmap(s, sizeof *s);
    errno = rc;
    return NULL;
  }
  sim_keep_track(s);
  return &s->b;
}

struct nic_backend *nic_backend_sim_open(void) {
  struct nic_sim_config c;
  nic_sim_config_from_env(&c);
  return nic_sim_open(&c);
}
NIC_BACKEND_BUILTIN(sim, nic_backend_sim_open);

struct nic_endpoint *nic_sim_endpoint_open_ex(struct nic_backend *b, nic_sim_receive_fn receive,
                                              void *arg, unsigned flags) {
  struct nic_endpoint *ep;
  if (!nic_sim_is(b) || (flags & ~(unsigned)NIC_SIM_EP_ENGINE_COMPLETIONS)) {
    errno = EINVAL;
    return NULL;
  }
  struct sim_nic *s = b->priv;
  sim_lock(s);
  if (!(ep = take_node(s, &s->endpoint_pool))) {
    sim_unlock(s);
    errno = ENOMEM;
    return NULL;
  }
  *ep = (struct nic_endpoint){.sim = s, .receive = receive, .arg = arg, .flags = flags};
  ep->next = s->endpoints;
  s->endpoints = ep;
  sim_unlock(s);
  return ep;
}

struct nic_endpoint *nic_sim_endpoint_open(struct nic_backend *b, nic_sim_receive_fn receive,
                                           void *arg) {
  return nic_sim_endpoint_open_ex(b, receive, arg, 0);
}

int nic_sim_endpoint_close(struct nic_backend *b, struct nic_endpoint *ep) {
  if (!nic_sim_is(b) || !ep || ep->sim != b->priv) return -EINVAL;
  struct sim_nic *s = b->priv;
  sim_lock(s);
  int rc = ep->inflight ? -EBUSY : 0;
  for (struct nic_endpoint **p = &s->endpoints; !rc && *p; p = &(*p)->next)
    if (*p == ep) {
      *p = ep->next;
      ep->sim = NULL;
      nic_pool_put(&s->endpoint_pool, ep);
      break;
    }
  sim_unlock(s);
  return rc;
}

void nic_sim_pause(struct nic_backend *b, bool paused) {
  struct sim_nic *s = b->priv;
  sim_lock(s);
  s->paused = paused;
  pthread_cond_signal(&s->wake);
  sim_unlock(s);
}

void nic_sim_get_stats(struct nic_backend *b, struct nic_sim_stats *out) {
  struct sim_nic *s = b->priv;
  sim_lock(s);
  *out = s->st;
  nic_tcache_get(s->tcache, &out->tcache);
  out->tcache_params = *nic_tcache_params_of(s->tcache);
  out->delay_table_len = s->delays.n;
  out->delay_table_builtin = s->delays.builtin;
  sim_unlock(s);
  out->modeled_misses = out->tcache.misses;
  out->modeled_ns = out->tcache.modeled_ns;
}
