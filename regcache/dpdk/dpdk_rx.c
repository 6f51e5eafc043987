/* Receiving: the dataplane pool of the ports nicmalloc starts, and endpoint_receive /
 * rx_recycle (dpdk.h, "Receiving").
 *
 * The pool exists from the port's start (ethdev takes a queue's pool at setup, and a started
 * af_packet port cannot be stopped and started again: its stop closes its sockets), but its
 * memory comes from libnicmalloc, which can give dataplane memory only once the backend is open:
 * so the pool starts empty and is filled when an endpoint first receives. One object is one
 * 4 KiB page, mbuf header and data together, so that a hold (counted per page) on one buffer
 * never keeps a neighbour. */
#define _GNU_SOURCE
#define NIC_DPDK_INTERNAL
#include "dpdk.h"
#include "plugin_services.h"

#include <errno.h>
#include <limits.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf_pool_ops.h>
#include <string.h>

#define OBJ_SIZE 4096u
#define RX_BURST 32u
#define RX_ITEMS 64u
#define APP_QUEUE_CAP 512u /* an application's queue whose descriptor count is not known */

/* The token of a packet gathered into a block of lent memory (no mbuf): the block's address
 * with this bit set, which no mbuf's (cache-line-aligned) address has. */
#define TOKEN_BLOCK 1u

static struct nic_dpdk_rx_memory source;
static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rte_mempool *dp_pool; /* EAL lives until exit: so does the pool */
static bool dp_filled;
static struct rte_mempool *port_pool[RTE_MAX_ETHPORTS]; /* of the ports nicmalloc started */
static atomic_uint receiving;                           /* endpoints receiving now */
static atomic_uint sharing; /* of them, those whose driver fills its queue from dp_pool */

NIC_EXPORT void nic_dpdk_rx_memory(const struct nic_dpdk_rx_memory *m) {
  pthread_mutex_lock(&fill_lock);
  if (m) source = *m;
  pthread_mutex_unlock(&fill_lock);
}

/* What libnicmalloc lent, read under the lock: it is handed over again at every endpoint. */
static struct nic_dpdk_rx_memory lent(void) {
  pthread_mutex_lock(&fill_lock);
  const struct nic_dpdk_rx_memory m = source;
  pthread_mutex_unlock(&fill_lock);
  return m;
}

struct rte_mempool *nic_dpdk_rx_pool(void) {
  if (dp_pool) return dp_pool;
  /* Data room so that header, mbuf and data fill the page exactly. */
  unsigned room = OBJ_SIZE - 64 - (unsigned)sizeof(struct rte_mbuf);
  struct rte_mempool_objsz sz;
  while (rte_mempool_calc_obj_size((unsigned)sizeof(struct rte_mbuf) + room,
                                   RTE_MEMPOOL_F_NO_SPREAD, &sz) > OBJ_SIZE)
    room -= 64;
  struct rte_mempool *mp = rte_mempool_create_empty(
      "nic_rx_dataplane", NIC_DPDK_RX_MBUFS, (unsigned)sizeof(struct rte_mbuf) + room, 0,
      sizeof(struct rte_pktmbuf_pool_private), SOCKET_ID_ANY, RTE_MEMPOOL_F_NO_SPREAD);
  if (!mp) return NULL;
  struct rte_pktmbuf_pool_private priv = {.mbuf_data_room_size = (uint16_t)room};
  char none[8];
  /* Populating with room for no object creates the pool's ring and adds nothing: a driver
   * taking from it before the fill finds it empty rather than uncreated. */
  if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), NULL) ||
      (rte_pktmbuf_pool_init(mp, &priv), 0) ||
      rte_mempool_populate_iova(mp, none, RTE_BAD_IOVA, sizeof none, NULL, NULL) != 0 ||
      !(mp->flags & RTE_MEMPOOL_F_POOL_CREATED)) {
    rte_mempool_free(mp);
    rte_errno = ENOMEM;
    return NULL;
  }
  return dp_pool = mp;
}

void nic_dpdk_rx_port_started(uint16_t port, struct rte_mempool *pool) {
  if (port < RTE_MAX_ETHPORTS) port_pool[port] = pool;
}

static bool given_back;
static void give_back(struct rte_mempool_memhdr *hdr, void *opaque) {
  (void)opaque;
  given_back = true;
  if (source.free) source.free(hdr->addr);
}

/* Carves the dataplane pool out of libnicmalloc's memory, once. 0, or -ENOMEM. */
static int fill(void) {
  pthread_mutex_lock(&fill_lock);
  int rc = 0;
  if (!dp_filled) {
    const size_t len = (size_t)NIC_DPDK_RX_MBUFS * OBJ_SIZE;
    void *mem = source.alloc ? source.alloc(len) : NULL;
    /* IOVAs come from the memseg of the registration's extmem area (dpdk_areas.c). */
    int got = mem ? rte_mempool_populate_virt(dp_pool, mem, len, OBJ_SIZE, give_back, NULL) : 0;
    if (got > 0) {
      rte_mempool_obj_iter(dp_pool, rte_pktmbuf_init, NULL);
      dp_filled = true;
    } else {
      if (mem && !given_back) source.free(mem); /* a failed populate may have freed it */
      rc = -ENOMEM;
      nic_plugin_log(NIC_PLUGIN_LOG_WARN, &fill_lock,
                     "dpdk: no dataplane memory for the receive pool (%s)",
                     !source.alloc ? "libnicmalloc handed none over"
                     : !mem        ? "allocation failed"
                                   : rte_strerror(-got));
    }
  }
  pthread_mutex_unlock(&fill_lock);
  return rc;
}

/* Whether a port's driver fills its receive queue from the pool the queue was set up with.
 * ethdev does not say: rte_eth_rx_queue_info_get's mp is the pool given at setup, taken from or
 * not (and net_ring answers no queue information at all). net_ring is the driver known to take
 * none: its rx dequeues the very mbufs its peer's tx enqueued (drivers/net/ring in DPDK 22.11).
 * Any other is taken to fill from it, as NICs, net_null, net_af_packet and net_tap do: for one
 * that does not, its share only stops its receiver early. */
static bool fills_from_pool(const struct rte_eth_dev_info *info) {
  return !info->driver_name || strcmp(info->driver_name, "net_ring") != 0;
}

static bool listed_locked(struct dbackend *be, struct nic_endpoint *ep) {
  for (struct nic_endpoint *o = be->eps; o; o = o->next)
    if (o == ep) return true;
  return false;
}

int nic_dpdk_endpoint_receive(struct nic_backend *b, struct nic_endpoint *ep, nic_endpoint_rx_fn rx,
                              void *arg) {
  struct dbackend *be = (struct dbackend *)b;
  struct rte_eth_dev_info info;
  if (!be || !ep || !rx) return -EINVAL;
  if (rte_eth_dev_info_get(ep->port, &info) || ep->queue >= info.nb_rx_queues) return -EINVAL;
  struct rte_mempool *pool = ep->port < RTE_MAX_ETHPORTS ? port_pool[ep->port] : NULL;
  unsigned cap = 0;
  if (pool && pool == dp_pool) {
    int rc = fill();
    if (rc) return rc;
    cap = pool->size;
  } else if (pool) { /* a driver that wanted mbufs at setup got DPDK memory */
    static const char once;
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &once,
                   "dpdk: port %u takes receive buffers at setup: they are DPDK memory, not "
                   "dataplane memory",
                   ep->port);
    cap = pool->size;
  } else {
    struct rte_eth_rxq_info q;
    if (!rte_eth_rx_queue_info_get(ep->port, ep->queue, &q)) pool = q.mp, cap = q.nb_desc;
    if (!cap) cap = APP_QUEUE_CAP;
  }
  pthread_mutex_lock(&be->lock);
  int rc = !listed_locked(be, ep) ? -EINVAL : ep->rx ? -EALREADY : 0;
  if (!rc) {
    ep->rx_pool = pool;
    ep->rx_pool_ours = pool && pool == dp_pool;
    ep->rx_shares = ep->rx_pool_ours && fills_from_pool(&info);
    ep->rx_cap = cap;
    ep->rx_stalled = false;
    ep->rx_arg = arg;
    ep->rx = rx;
    atomic_fetch_add(&receiving, 1);
    if (ep->rx_shares) atomic_fetch_add(&sharing, 1);
  }
  pthread_mutex_unlock(&be->lock);
  return rc;
}

void nic_dpdk_rx_recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token) {
  (void)b;
  if (token & TOKEN_BLOCK)
    lent().free((void *)(uintptr_t)(token & ~(uint64_t)TOKEN_BLOCK));
  else
    rte_pktmbuf_free((struct rte_mbuf *)(uintptr_t)token);
  atomic_fetch_sub(&ep->rx_out, 1); /* after the free: a close may follow at once */
}

int nic_dpdk_rx_close_locked(struct nic_endpoint *ep) {
  /* A thread handing packets over clears rx_delivering afterwards, after the last recycle. */
  if (atomic_load(&ep->rx_out) || ep->rx_delivering) return -EBUSY;
  if (ep->rx) {
    ep->rx = NULL;
    atomic_fetch_sub(&receiving, 1);
    if (ep->rx_shares) atomic_fetch_sub(&sharing, 1);
  }
  return 0;
}

static bool contiguous(const struct rte_mbuf *m) {
  for (const struct rte_mbuf *s = m; s->next; s = s->next)
    if (s->next->data_len &&
        rte_pktmbuf_mtod(s->next, const char *) != rte_pktmbuf_mtod(s, const char *) + s->data_len)
      return false;
  return true;
}

static void copy_out(const struct rte_mbuf *m, char *to) {
  for (; m; m = m->next) {
    memcpy(to, rte_pktmbuf_mtod(m, const char *), m->data_len);
    to += m->data_len;
  }
}

/* A chain whose segments are scattered, copied into one buffer: an mbuf of the queue's pool when
 * it fits one, else a block of its length from the memory libnicmalloc lends. The buffer's
 * token, with its data in *data; 0 when none could be had. m stays the caller's. An endpoint
 * on nicmalloc's pool whose driver takes nothing from it (net_ring) copies into the pool only
 * while no endpoint whose driver does is receiving: its copies would eat into their shares. */
static uint64_t gathered(struct nic_endpoint *ep, const struct rte_mbuf *m, void **data) {
  const bool pool = ep->rx_pool && (!ep->rx_pool_ours || ep->rx_shares || !atomic_load(&sharing));
  struct rte_mbuf *c = pool ? rte_pktmbuf_alloc(ep->rx_pool) : NULL;
  if (c && m->pkt_len <= rte_pktmbuf_tailroom(c)) {
    copy_out(m, *data = rte_pktmbuf_append(c, (uint16_t)m->pkt_len));
    return (uint64_t)(uintptr_t)c;
  }
  rte_pktmbuf_free(c);
  const struct nic_dpdk_rx_memory mem = lent();
  const size_t page = OBJ_SIZE, len = ((size_t)m->pkt_len + page - 1) & ~(page - 1);
  char *block = mem.alloc ? mem.alloc(len) : NULL;
  if (!block) return 0;
  copy_out(m, block);
  *data = block;
  return (uint64_t)(uintptr_t)block | TOKEN_BLOCK;
}

struct item {
  struct nic_endpoint *ep;
  nic_endpoint_rx_fn rx;
  void *arg;
  struct rte_mbuf *m; /* NULL: the endpoint stalled */
};

static void hand_over(const struct item *it) {
  struct rte_mbuf *m = it->m;
  if (!m) {
    it->rx(it->arg, NULL, 0, -ENOBUFS, 0);
    atomic_fetch_sub(&it->ep->rx_out, 1);
    return;
  }
  void *data = rte_pktmbuf_mtod(m, void *);
  const uint32_t len = m->pkt_len;
  uint64_t token = (uint64_t)(uintptr_t)m;
  if (m->nb_segs > 1 && !contiguous(m)) {
    token = gathered(it->ep, m, &data);
    /* Dropped: a post of ours says so to its sender, as the sim's receiver does. */
    if (!token) nic_dpdk_chain_refused(m, -ENOMEM);
    rte_pktmbuf_free(m);
    if (!token) {
      static const char once;
      nic_plugin_count_rx_dropped();
      nic_plugin_log(NIC_PLUGIN_LOG_WARN, &once,
                     "dpdk: no buffer of %u bytes for a received packet in scattered segments: "
                     "dropped (port %u; counted in dpdk_recv_dropped)",
                     len, it->ep->port);
      atomic_fetch_sub(&it->ep->rx_out, 1);
      return;
    }
  }
  it->rx(it->arg, data, len, 0, token);
}

/* A receive function that polls gets no packet from inside: those after its own would reach it
 * before the rest of the burst it is part of. */
static __thread bool handing_over;

/* An endpoint whose packets a thread hands over is left alone by every other until that thread
 * is done: a second thread's burst from its queue would reach the receive function beside the
 * first one's, and before the rest of it. Its packets wait in the driver's queue meanwhile, which
 * is the endpoint's own (one endpoint per queue), so no queue of ours is needed to keep them. */
int nic_dpdk_rx_poll(struct dbackend *be, int max) {
  if (!atomic_load_explicit(&receiving, memory_order_relaxed) || handing_over) return 0;
  struct item items[RX_ITEMS];
  unsigned n = 0, limit = max > 0 && (unsigned)max < RX_ITEMS ? (unsigned)max : RX_ITEMS;
  pthread_mutex_lock(&be->lock); /* one burst at a time per queue; endpoints stay listed */
  for (struct nic_endpoint *ep = be->eps; ep && n < limit; ep = ep->next) {
    if (!ep->rx || ep->rx_delivering) continue;
    const unsigned out = atomic_load(&ep->rx_out);
    /* Every port nicmalloc starts has its one pool. Each endpoint whose driver fills its queue
     * from it may have its share out, so that another's held buffers never leave it none; and a
     * burst asks for no more than are free, since a driver may take a burst's mbufs all or
     * nothing (net_null), and would get none at all while fewer are left. An endpoint whose
     * driver takes none (net_ring: the sender's mbufs) holds up to the pool's size, as one
     * alone does. */
    unsigned cap = ep->rx_cap, pool_free = UINT_MAX;
    if (ep->rx_shares) {
      const unsigned endpoints = atomic_load(&sharing);
      if (endpoints > 1) cap /= endpoints;
      pool_free = rte_mempool_avail_count(ep->rx_pool);
    }
    if (out >= cap || !pool_free) {
      if (!ep->rx_stalled) { /* said once per stall; counted out while it is said */
        ep->rx_stalled = true;
        atomic_fetch_add(&ep->rx_out, 1);
        items[n++] = (struct item){ep, ep->rx, ep->rx_arg, NULL};
        ep->rx_delivering = true;
      }
      continue;
    }
    ep->rx_stalled = false;
    unsigned room = cap - out;
    if (room > pool_free) room = pool_free;
    if (room > limit - n) room = limit - n;
    if (room > RX_BURST) room = RX_BURST;
    struct rte_mbuf *ms[RX_BURST];
    const uint16_t got = rte_eth_rx_burst(ep->port, ep->queue, ms, (uint16_t)room);
    atomic_fetch_add(&ep->rx_out, got);
    for (uint16_t i = 0; i < got; i++)
      items[n++] = (struct item){ep, ep->rx, ep->rx_arg, ms[i]};
    ep->rx_delivering |= got > 0;
  }
  pthread_mutex_unlock(&be->lock);
  if (!n) return 0;
  /* Unlocked: the program's function may post, poll or close endpoints (a close is -EBUSY
   * while rx_delivering is set, so each endpoint here stays). */
  handing_over = true;
  for (unsigned i = 0; i < n; i++)
    hand_over(&items[i]);
  handing_over = false;
  pthread_mutex_lock(&be->lock);
  for (unsigned i = 0; i < n; i++)
    items[i].ep->rx_delivering = false;
  pthread_mutex_unlock(&be->lock);
  return (int)n;
}
