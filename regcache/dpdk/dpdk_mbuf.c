/* The data path: scatter-gather list -> mbuf chain of external-buffer segments, posts,
 * completions, endpoints.
 *
 * Every segment of a chain points into registered memory (rte_pktmbuf_attach_extbuf, no copy)
 * and shares one rte_mbuf_ext_shared_info whose refcount is the segment count: DPDK calls its
 * free_cb once, when the driver (after TX) or the receiving peer (net_ring hands over the very
 * mbufs) frees the last segment. That may be inside rte_eth_tx_burst, inside
 * rte_eth_tx_done_cleanup, or on another thread, so free_cb only queues the completion; done()
 * runs from poll(). */
#define _GNU_SOURCE
#define NIC_DPDK_INTERNAL
#include "dpdk.h"
#include "plugin_services.h"

#include <errno.h>
#include <rte_ethdev.h>

/* The registration an entry names (lkey = slot), if it covers the entry. Under use_lock. */
static struct dreg *covering(struct dbackend *be, const struct nic_sge *s) {
  if (s->lkey >= NIC_DPDK_MAX_REGS) return NULL;
  struct dreg *r = &be->regs[s->lkey];
  if (!r->used) return NULL;
  uintptr_t a = (uintptr_t)s->addr, lo = (uintptr_t)r->base;
  if (a < lo || a - lo > r->len || s->len > r->len - (a - lo)) return NULL;
  return r;
}

/* Finds the registration of each entry (into regs) and counts it in flight, in one hold of
 * use_lock: from then on none can be deregistered, nor its slot given to another, until the
 * post lets go of it. -EFAULT, nothing counted, when a registration does not cover its entry. */
static int count_in(struct dbackend *be, const struct nic_sge *sge, unsigned n,
                    struct dreg **regs) {
  int rc = 0;
  pthread_mutex_lock(&be->use_lock);
  for (unsigned i = 0; i < n && !rc; i++)
    if (!(regs[i] = covering(be, &sge[i]))) rc = -EFAULT;
  for (unsigned i = 0; i < n && !rc; i++)
    atomic_fetch_add(&regs[i]->inflight, 1);
  pthread_mutex_unlock(&be->use_lock);
  return rc;
}

static void count_out(struct dreg *const *regs, unsigned n) {
  for (unsigned i = 0; i < n; i++)
    atomic_fetch_sub(&regs[i]->inflight, 1);
}

/* Longest segment starting at addr: 16-bit buf_len, and in IOVA-as-PA mode no page crossing
 * (the pages need not be physically contiguous). */
static uint32_t seg_len(const struct dreg *r, uintptr_t addr, uint32_t left) {
  uint32_t max = NIC_DPDK_SEG_MAX;
  if (r->iovas) {
    size_t to_page_end = r->page_sz - (addr - (uintptr_t)r->map_base) % r->page_sz;
    if (to_page_end < max) max = (uint32_t)to_page_end;
  }
  return left < max ? left : max;
}

static rte_iova_t iova_of(const struct dreg *r, uintptr_t addr) {
  if (!r->iovas) return (rte_iova_t)addr;
  size_t off = addr - (uintptr_t)r->map_base;
  return r->iovas[off / r->page_sz] + off % r->page_sz;
}

static void enqueue(struct dbackend *be, struct dpost *p) {
  p->next = NULL;
  pthread_mutex_lock(&be->cq_lock);
  if (be->cq_tail)
    be->cq_tail->next = p;
  else
    be->cq_head = p;
  be->cq_tail = p;
  pthread_mutex_unlock(&be->cq_lock);
}

/* The memory is free again as soon as the last segment is: release the registrations now (so
 * dereg succeeds), run done() later from poll. A chain post() refused was never the caller's
 * post: it goes without a completion. */
static void chain_freed(void *addr, void *opaque) {
  (void)addr;
  struct dpost *p = opaque;
  for (unsigned i = 0; i < p->n; i++)
    atomic_fetch_sub(&p->be->regs[p->slots[i]].inflight, 1);
  if (!p->refused) {
    enqueue(p->be, p);
    return;
  }
  atomic_fetch_sub(&p->ep->inflight, 1);
  nic_plugin_free(p);
}

bool nic_dpdk_chain_refused(const struct rte_mbuf *m, int status) {
  const struct rte_mbuf_ext_shared_info *sh = RTE_MBUF_HAS_EXTBUF(m) ? m->shinfo : NULL;
  if (!sh || sh->free_cb != chain_freed) return false;
  struct dpost *p = sh->fcb_opaque;
  if (!p->status) p->status = status; /* read by run_completions after the last free */
  return true;
}

static struct dpost *new_post(struct dbackend *be, struct nic_endpoint *ep, unsigned n,
                              nic_completion_fn done, void *arg) {
  struct dpost *p = nic_plugin_calloc(1, sizeof *p + n * sizeof p->slots[0]);
  if (!p) return NULL;
  *p = (struct dpost){.be = be, .ep = ep, .done = done, .arg = arg};
  p->shinfo.free_cb = chain_freed;
  p->shinfo.fcb_opaque = p;
  if (ep) atomic_fetch_add(&ep->inflight, 1);
  return p;
}

static int fail(struct dbackend *be, struct nic_endpoint *ep, nic_completion_fn done, void *arg,
                int status) {
  struct dpost *p = new_post(be, ep, 0, done, arg);
  if (!p) return -ENOMEM;
  p->status = status;
  enqueue(be, p);
  return 0;
}

unsigned nic_dpdk_endpoint_max_entries(struct nic_backend *b, const struct nic_endpoint *ep) {
  return ep && ep->max_segs < b->caps.max_sge ? ep->max_segs : b->caps.max_sge;
}

/* The chain of the entries, whose registrations regs are counted in flight: NULL with *err when
 * it cannot be made (those counts are then the caller's to give back). */
static struct rte_mbuf *chain(struct dbackend *be, struct nic_endpoint *ep,
                              const struct nic_sge *sge, unsigned n, struct dreg *const *regs,
                              nic_completion_fn done, void *arg, int *err) {
  uint32_t max_segs = ep ? ep->max_segs : RTE_MBUF_MAX_NB_SEGS, segs = 0;
  uint64_t total = 0;
  for (unsigned i = 0; i < n; i++) { /* count before touching anything */
    for (uintptr_t a = (uintptr_t)sge[i].addr, left = sge[i].len; left; segs++) {
      uint32_t l = seg_len(regs[i], a, (uint32_t)left);
      a += l;
      left -= l;
    }
    total += sge[i].len;
  }
  if (total > UINT32_MAX) return *err = -EINVAL, NULL;
  /* The port's own limit, below max_sge on some: an entry over 64 KiB is several segments. */
  if (segs > max_segs) return *err = -E2BIG, NULL;
  struct dpost *p = new_post(be, ep, n, done, arg);
  if (!p) return *err = -ENOMEM, NULL;
  /* Take every header first: a half-built chain could not be freed without firing free_cb. */
  struct rte_mbuf *head = NULL, **link = &head;
  for (uint32_t i = 0; i < segs; i++, link = &(*link)->next)
    if (!(*link = rte_pktmbuf_alloc(be->hdr_pool))) {
      rte_pktmbuf_free(head);
      if (ep) atomic_fetch_sub(&ep->inflight, 1);
      nic_plugin_free(p);
      return *err = -ENOBUFS, NULL;
    }
  rte_mbuf_ext_refcnt_set(&p->shinfo, (uint16_t)segs);
  struct rte_mbuf *m = head;
  for (unsigned i = 0; i < n; i++) {
    const struct dreg *r = regs[i];
    p->slots[p->n++] = (uint16_t)sge[i].lkey;
    for (uintptr_t a = (uintptr_t)sge[i].addr, left = sge[i].len; left; m = m->next) {
      uint32_t l = seg_len(r, a, (uint32_t)left);
      rte_pktmbuf_attach_extbuf(m, (void *)a, iova_of(r, a), (uint16_t)l, &p->shinfo);
      m->data_len = (uint16_t)l;
      a += l;
      left -= l;
    }
  }
  head->nb_segs = (uint16_t)segs;
  head->pkt_len = (uint32_t)total;
  *err = 0;
  return head;
}

static struct rte_mbuf *build(struct dbackend *be, struct nic_endpoint *ep,
                              const struct nic_sge *sge, unsigned n, nic_completion_fn done,
                              void *arg, int *err) {
  struct dreg *regs[NIC_DPDK_MAX_SGE];
  *err = -EINVAL;
  if (!sge || !n || !done) return NULL;
  if (n > be->pub.caps.max_sge) return *err = -E2BIG, NULL;
  for (unsigned i = 0; i < n; i++)
    if (!sge[i].addr || !sge[i].len) return NULL;
  /* The chain is built from the registrations found here, which stay while counted: a second
   * look could find one deregistered in between, or its slot another's. */
  if ((*err = count_in(be, sge, n, regs))) return NULL;
  struct rte_mbuf *m = chain(be, ep, sge, n, regs, done, arg, err);
  if (!m) count_out(regs, n);
  return m;
}

int nic_dpdk_run_completions(struct dbackend *be, int max) {
  int ran = 0;
  if (max <= 0) max = 1 << 30;
  while (ran < max) {
    pthread_mutex_lock(&be->cq_lock);
    struct dpost *p = be->cq_head;
    if (p && !(be->cq_head = p->next)) be->cq_tail = NULL;
    pthread_mutex_unlock(&be->cq_lock);
    if (!p) break;
    if (p->ep) atomic_fetch_sub(&p->ep->inflight, 1);
    p->done(p->arg, p->status);
    nic_plugin_free(p);
    ran++;
  }
  return ran;
}

static struct dpost *post_of(const struct rte_mbuf *m) {
  return m->shinfo->fcb_opaque;
}

/* Under ep->lock: what the driver has sent is freed, where it can tell (true). */
static bool cleanup_locked(struct nic_endpoint *ep) {
  if (ep->no_cleanup) return false;
  const int rc = rte_eth_tx_done_cleanup(ep->port, ep->queue, 0);
  if (rc == -ENOTSUP) ep->no_cleanup = true;
  return rc >= 0;
}

/* Under ep->lock: hands the backlog to the queue, oldest first, as far as the queue takes it (a
 * queue that takes less than offered gets one cleanup and one more try). true once it is empty. */
static bool flush_locked(struct nic_endpoint *ep) {
  unsigned len = atomic_load_explicit(&ep->backlog_len, memory_order_relaxed);
  bool cleaned = false;
  while (len) {
    const unsigned to_end = NIC_DPDK_BACKLOG - ep->backlog_head, run = len < to_end ? len : to_end;
    const uint16_t sent =
        rte_eth_tx_burst(ep->port, ep->queue, &ep->backlog[ep->backlog_head], (uint16_t)run);
    ep->backlog_head = (ep->backlog_head + sent) % NIC_DPDK_BACKLOG;
    len -= sent;
    if (sent < run && (cleaned || !cleanup_locked(ep))) break;
    cleaned |= sent < run;
  }
  atomic_store_explicit(&ep->backlog_len, len, memory_order_relaxed);
  return !len;
}

/* Under ep->lock: m to the queue when nothing waits before it and the queue takes it (after a
 * cleanup), else to the backlog's tail. false when the backlog is full: m is still the caller's. */
static bool send_or_queue_locked(struct nic_endpoint *ep, struct rte_mbuf *m) {
  if (flush_locked(ep) && (rte_eth_tx_burst(ep->port, ep->queue, &m, 1) ||
                           (cleanup_locked(ep) && rte_eth_tx_burst(ep->port, ep->queue, &m, 1))))
    return true;
  const unsigned len = atomic_load_explicit(&ep->backlog_len, memory_order_relaxed);
  if (len == NIC_DPDK_BACKLOG) return false;
  ep->backlog[(ep->backlog_head + len) % NIC_DPDK_BACKLOG] = m;
  atomic_store_explicit(&ep->backlog_len, len + 1, memory_order_relaxed);
  return true;
}

/* A post is sent, in post order, or refused at once: completing one with an error after later
 * ones were taken would leave a hole in what the peer receives (a stream's reader then frames
 * other messages' bytes), with every post() having returned 0. So a full tx queue keeps the post
 * in the endpoint's backlog, and a full backlog, or no free mbuf header, refuses it with -EAGAIN:
 * nothing posted, no done(). An entry no registration covers (-EFAULT) still completes with it,
 * as a NIC's protection error would: nothing of it is sent. */
int nic_dpdk_post(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge,
                  unsigned n, nic_completion_fn done, void *arg) {
  struct dbackend *be = (struct dbackend *)b;
  int err;
  if (!ep || !done) return -EINVAL;
  struct rte_mbuf *m = build(be, ep, sge, n, done, arg, &err);
  if (!m && err == -ENOBUFS) return -EAGAIN; /* headers come back as sent posts complete */
  if (!m)
    return err == -EINVAL || err == -E2BIG || err == -ENOMEM ? err : fail(be, ep, done, arg, err);
  rte_spinlock_lock(&ep->lock);
  const bool taken = send_or_queue_locked(ep, m);
  rte_spinlock_unlock(&ep->lock);
  if (taken) return 0;
  post_of(m)->refused = true;
  rte_pktmbuf_free(m);
  return -EAGAIN;
}

void nic_dpdk_backlog_cancel(struct nic_endpoint *ep, int status) {
  rte_spinlock_lock(&ep->lock);
  const unsigned len = atomic_load_explicit(&ep->backlog_len, memory_order_relaxed);
  for (unsigned i = 0; i < len; i++) {
    struct rte_mbuf *m = ep->backlog[(ep->backlog_head + i) % NIC_DPDK_BACKLOG];
    post_of(m)->status = status;
    rte_pktmbuf_free(m);
  }
  ep->backlog_head = 0;
  atomic_store_explicit(&ep->backlog_len, 0, memory_order_relaxed);
  rte_spinlock_unlock(&ep->lock);
}

/* Every endpoint's backlog goes to its queue; drivers that hold sent mbufs until the next tx
 * call get a cleanup, so completions do not wait for more traffic. A queue busy in another
 * thread's tx_burst is skipped: that thread's post sends the backlog first. */
int nic_dpdk_poll(struct nic_backend *b, int max) {
  struct dbackend *be = (struct dbackend *)b;
  pthread_mutex_lock(&be->lock);
  for (struct nic_endpoint *ep = be->eps; ep; ep = ep->next) {
    const bool waiting = atomic_load_explicit(&ep->backlog_len, memory_order_relaxed);
    if ((ep->no_cleanup && !waiting) || !rte_spinlock_trylock(&ep->lock)) continue;
    if (flush_locked(ep)) cleanup_locked(ep);
    rte_spinlock_unlock(&ep->lock);
  }
  pthread_mutex_unlock(&be->lock);
  if (max == NIC_POLL_COMPLETIONS_ONLY) return nic_dpdk_run_completions(be, 0);
  int ran = nic_dpdk_run_completions(be, max);
  if (max > 0 && ran >= max) return ran;
  return ran + nic_dpdk_rx_poll(be, max > 0 ? max - ran : 0);
}

/* Maps (or unmaps) every registration for dev, unless another endpoint already shares it. */
static int dma_dev(struct dbackend *be, struct nic_endpoint *self, bool map) {
  for (struct nic_endpoint *o = be->eps; o; o = o->next)
    if (o != self && o->dev == self->dev) return 0;
  int rc = 0, i = 0;
  for (; i < (int)NIC_DPDK_MAX_REGS && !rc; i++)
    if (be->regs[i].used) rc = nic_dpdk_dma(self->dev, &be->regs[i], map);
  while (rc && map && --i >= 0) /* undo a partial mapping */
    if (be->regs[i].used) nic_dpdk_dma(self->dev, &be->regs[i], false);
  return map ? rc : 0;
}

/* Under reg_lock and lock. */
static struct nic_endpoint *find_locked(struct dbackend *be, uint16_t port, uint16_t queue) {
  for (struct nic_endpoint *o = be->eps; o; o = o->next)
    if (o->port == port && o->queue == queue) return o;
  return NULL;
}

/* Whether the port, or its tx queue, frees sent mbufs straight into their pool
 * (MBUF_FAST_FREE): such a driver skips rte_pktmbuf_prefree_seg, so the free callback of a
 * chain's external buffers never runs, and no post on it would complete. */
static bool fast_free(uint16_t port, uint16_t queue) {
  struct rte_eth_conf conf;
  struct rte_eth_txq_info q;
  const uint64_t flag = RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
  return (!rte_eth_dev_conf_get(port, &conf) && conf.txmode.offloads & flag) ||
         (!rte_eth_tx_queue_info_get(port, queue, &q) && q.conf.offloads & flag);
}

NIC_EXPORT struct nic_endpoint *nic_dpdk_endpoint(struct nic_backend *b, uint16_t port,
                                                  uint16_t queue) {
  struct dbackend *be = (struct dbackend *)b;
  struct rte_eth_dev_info info;
  if (!be || !rte_eth_dev_is_valid_port(port) || rte_eth_dev_info_get(port, &info) ||
      queue >= info.nb_tx_queues) {
    errno = EINVAL; /* a queue not set up would crash tx_burst */
    return NULL;
  }
  if (be->pub.caps.pages_follow && !nic_dpdk_cpu_device(info.device)) {
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT,
                         "dpdk: port %u (driver %s) may DMA into the memory it sends: the "
                         "backend opened with only ports whose drivers reach memory through the "
                         "CPU, whose registrations let free dataplane pages go, and such a port "
                         "needs them held; start EAL with every port before the backend opens",
                         port, info.driver_name ? info.driver_name : "unknown");
    errno = EOPNOTSUPP;
    return NULL;
  }
  if (fast_free(port, queue)) {
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT,
                         "dpdk: port %u queue %u is configured with "
                         "RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE: its driver frees sent mbufs without "
                         "telling their external buffers, so no post on it would complete; "
                         "configure the port without it",
                         port, queue);
    errno = EOPNOTSUPP;
    return NULL;
  }
  struct nic_endpoint *ep = nic_plugin_calloc(1, sizeof *ep);
  if (!ep) return NULL;
  uint16_t segs = info.tx_desc_lim.nb_seg_max;
  /* nb_seg_max bounds a TSO packet's segments; one without TSO (no post asks for it) may take no
   * more than nb_mtu_seg_max where the driver gives one (i40e, ice: 8): the hardware cannot send
   * a longer chain. */
  const uint16_t mtu_segs = info.tx_desc_lim.nb_mtu_seg_max;
  if (mtu_segs && (!segs || mtu_segs < segs)) segs = mtu_segs;
  /* A port configured without multi-segment transmit may send a chain's first segment alone
   * (drivers trust the offloads and look no further): one segment per packet there. */
  struct rte_eth_conf conf;
  if (!rte_eth_dev_conf_get(port, &conf) && !(conf.txmode.offloads & RTE_ETH_TX_OFFLOAD_MULTI_SEGS))
    segs = 1;
  *ep = (struct nic_endpoint){.port = port,
                              .queue = queue,
                              .refs = 1,
                              .dev = info.device,
                              .max_segs = segs ? segs : RTE_MBUF_MAX_NB_SEGS};
  rte_spinlock_init(&ep->lock);
  pthread_mutex_lock(&be->reg_lock);
  pthread_mutex_lock(&be->lock);
  struct nic_endpoint *same = find_locked(be, port, queue);
  int rc = same ? 0 : dma_dev(be, ep, true);
  if (same)
    same->refs++;
  else if (!rc)
    ep->next = be->eps, be->eps = ep;
  pthread_mutex_unlock(&be->lock);
  pthread_mutex_unlock(&be->reg_lock);
  if (same || rc) nic_plugin_free(ep);
  if (rc) errno = -rc;
  return rc ? NULL : same ? same : ep;
}

NIC_EXPORT int nic_dpdk_endpoint_close(struct nic_backend *b, struct nic_endpoint *ep) {
  struct dbackend *be = (struct dbackend *)b;
  int rc = -EINVAL;
  bool last = false;
  if (!be || !ep) return -EINVAL;
  pthread_mutex_lock(&be->reg_lock);
  pthread_mutex_lock(&be->lock);
  for (struct nic_endpoint **pp = &be->eps; *pp; pp = &(*pp)->next) {
    if (*pp != ep) continue;
    /* Receiving stops at any holder's close: the receiver above is keyed by the endpoint
     * and goes with the first close that succeeds. */
    /* The backend's own reference to its default endpoint is not a caller's: the last caller
     * to close waits for the posts, as on any endpoint (their done() may use what it frees). */
    const unsigned callers = ep->refs - (ep == be->default_ep);
    if (ep->refs > 1) { /* the endpoint stays for its other holder */
      rc = callers == 1 && atomic_load(&ep->inflight) ? -EBUSY : nic_dpdk_rx_close_locked(ep);
      if (!rc) ep->refs--;
    } else if (ep != be->default_ep) {
      rc = atomic_load(&ep->inflight) ? -EBUSY : nic_dpdk_rx_close_locked(ep);
      if ((last = !rc)) *pp = ep->next, dma_dev(be, ep, false);
    }
    break;
  }
  pthread_mutex_unlock(&be->lock);
  pthread_mutex_unlock(&be->reg_lock);
  if (last) nic_plugin_free(ep);
  return rc;
}

void nic_dpdk_set_default(struct dbackend *be, struct nic_endpoint *ep) {
  pthread_mutex_lock(&be->reg_lock);
  pthread_mutex_lock(&be->lock);
  struct nic_endpoint *old = be->default_ep, *gone = NULL;
  be->default_ep = ep;
  if (old && old->refs > 1) {
    old->refs--;
  } else if (old && (atomic_load(&old->inflight) || nic_dpdk_rx_close_locked(old))) {
    old->refs = 0; /* held by no one, and busy: it stays listed until the backend closes */
  } else if (old) {
    for (struct nic_endpoint **pp = &be->eps; *pp; pp = &(*pp)->next)
      if (*pp == old) {
        *pp = old->next;
        dma_dev(be, old, false);
        gone = old;
        break;
      }
  }
  pthread_mutex_unlock(&be->lock);
  pthread_mutex_unlock(&be->reg_lock);
  nic_plugin_free(gone);
}

NIC_EXPORT struct nic_endpoint *nic_dpdk_default_endpoint(struct nic_backend *b) {
  return b ? ((struct dbackend *)b)->default_ep : NULL;
}
NIC_EXPORT void nic_dpdk_endpoint_port(const struct nic_endpoint *ep, uint16_t *port,
                                       uint16_t *queue) {
  if (port) *port = ep->port;
  if (queue) *queue = ep->queue;
}
NIC_EXPORT struct rte_mbuf *nic_dpdk_chain(struct nic_backend *b, const struct nic_sge *sge,
                                           unsigned n, nic_completion_fn done, void *arg) {
  int err = -EINVAL;
  struct rte_mbuf *m = b ? build((struct dbackend *)b, NULL, sge, n, done, arg, &err) : NULL;
  if (!m) errno = -err;
  return m;
}
