/* The dpdk backend's own API, exported by libnicmalloc-dpdk.so (link it, or dlsym the loaded
 * plugin). Registrations are rte_extmem_register + rte_dev_dma_map; a post becomes one mbuf
 * chain of rte_pktmbuf_attach_extbuf segments pointing into the registered memory (zero-copy),
 * sent with rte_eth_tx_burst. The post completes when the driver frees the last segment.
 *
 * EAL: when the application already runs it (nic_dpdk_attach, or EAL found initialised), the
 * backend uses it and starts no port. Otherwise open() starts it with
 *   --no-huge -m 256 --no-pci --no-shconf --no-telemetry --log-level=notice --lcores=0@(cpus)
 * (NICMALLOC_DPDK_EAL_ARGS, split at spaces, replaces that list), adds --vdev for each
 * ';'-separated entry of NICMALLOC_DPDK_VDEV (e.g. "net_ring0" or
 * "net_af_packet0,iface=veth0"), and configures and starts every port with one rx and one tx
 * queue. The first port, queue 0, is the default endpoint. EAL lives until the process exits.
 *
 * Registrations: local access only (remote access is -EOPNOTSUPP, rkey always 0); lkey and
 * handle are the registration's slot, of NIC_DPDK_MAX_REGS. Each lies in an extmem area, of
 * NIC_DPDK_MAX_AREAS (a memseg list each): in IOVA-as-VA mode with only CPU ports (below), one
 * area over the whole dataplane range serves every dataplane step; other memory, and every
 * registration in IOVA-as-PA mode or with any other port, takes an area of its own
 * (dpdk_areas.c). A completion's 0 means the driver let go of the memory: like any Ethernet
 * NIC, a driver may drop a frame it cannot send (too long for the port).
 *
 * CPU ports: those whose driver reaches packet memory only through this process's CPU or the
 * kernel's copy inside a system call: net_ring, net_null, net_pcap, net_af_packet, net_tap and
 * net_tun (dpdk_ports.c says why each). Every other port is taken as a NIC that DMAs, the vdevs
 * among them too (net_bonding, net_failsafe, net_af_xdp, net_virtio_user, net_vhost, net_memif):
 * with one at open, registrations keep their pages (caps.pages_follow false). */
#ifndef NIC_DPDK_H
#define NIC_DPDK_H

#include "backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rte_mbuf;

/* Applications reach this through libnicmalloc's nic_dpdk_attach (include/nicmalloc.h,
 * safety/endpoint_dpdk.c), which loads the plugin without opening the backend and calls this;
 * the host table is handed over only at the open, so errors before it are said by libnicmalloc.
 * The application owns EAL and has configured and started port_id with tx queue queue_id:
 * the backend never starts EAL and uses that queue as its default endpoint. Call before the
 * backend opens (after, it replaces the default endpoint; endpoints handed out before stay on
 * their queue). 0, -EINVAL (no such port), or once the backend is open nic_dpdk_endpoint's
 * -errno for the queue (-EINVAL: no such tx queue), the default endpoint unchanged; errors are
 * counted in endpoint_errors and said once. */
int nic_dpdk_attach(uint16_t port_id, uint16_t queue_id);

/* An endpoint on a started port's tx queue. Every registration is DMA-mapped for the port's
 * device. Posts to one endpoint may come from several threads (a lock serialises tx_burst).
 * Asking again for the same port and queue gives the same endpoint, counted (two locks on one
 * queue would let two tx_bursts race): each call needs its own close. NULL with errno: EINVAL
 * (no such port, or no such tx queue on it), EOPNOTSUPP (a port that is not a CPU port, when
 * the backend opened with CPU ports only: caps.pages_follow; or a port or queue
 * configured with RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE, whose driver frees sent mbufs without
 * running their external buffers' free callback), ENOMEM, or the DMA mapping's error. */
struct nic_endpoint *nic_dpdk_endpoint(struct nic_backend *b, uint16_t port_id, uint16_t queue_id);
/* The port nicmalloc started (or the attached one), or NULL when there is none. */
struct nic_endpoint *nic_dpdk_default_endpoint(struct nic_backend *b);
/* 0, or -EBUSY while posts on it are in flight (unless another holder keeps it open), those
 * waiting in its backlog for the tx queue included (polls send them). The backend's own hold on
 * the default endpoint cannot be closed (-EINVAL). */
int nic_dpdk_endpoint_close(struct nic_backend *b, struct nic_endpoint *ep);
/* Which port and queue an endpoint sends on. */
void nic_dpdk_endpoint_port(const struct nic_endpoint *ep, uint16_t *port_id, uint16_t *queue_id);
/* Whether this backend started EAL itself. */
bool nic_dpdk_owns_eal(struct nic_backend *b);

/* Receiving (backend ops endpoint_receive / rx_recycle, dpdk_rx.c). An endpoint receives from
 * the rx queue of its number; poll() takes bursts and hands each packet over with its mbuf as
 * the token; rx_recycle frees the mbuf (a nic_hold keeps it). A packet is handed over whole when
 * its segments' data lie end to end; a chain whose segments do not is copied into one mbuf of
 * the queue's pool when it fits one, else into a block of its length of the memory libnicmalloc
 * lends (below; the block's address, bit 0 set, is the token), and dropped only when neither can
 * be had: said once, counted through the host (dpdk_recv_dropped), and a chain this backend made
 * (on net_ring, the sender's own) completes its post with -ENOMEM. An mbuf is handed over as the
 * driver gave it: on net_ring that is the sender's very mbuf, pointing wherever its data was
 * (memory the sender had registered): zero-copy, not necessarily dataplane memory. Such an mbuf
 * outside nicmalloc's memory (an application's pool of DPDK memory) cannot be kept: nic_hold
 * refuses it, and it goes back when the receive function returns.
 *
 * Ports nicmalloc starts: their rx queue takes mbufs from one pool of NIC_DPDK_RX_MBUFS mbufs,
 * each one 4 KiB page of dataplane memory (header and data; a hold on one never keeps another),
 * carved when an endpoint first receives, from memory libnicmalloc hands over (below). Until then
 * the pool is empty: frames wait in the driver (or the kernel) as if every buffer were held. A
 * driver that takes mbufs at queue setup or start (net_tap; physical NICs, which fill their ring)
 * refuses the empty pool and gets a pool of DPDK memory instead: its packets are not in
 * dataplane memory (said once when it receives). net_ring never takes from the pool, and
 * net_af_packet takes one mbuf per frame as it arrives.
 *
 * A port the application started: its rx queue uses the application's pool. For received data to
 * be dataplane memory, build that pool over it before setting up the queue: a block from
 * nic_aligned_alloc(4096, n * 4096), nic_register(block, len, NIC_REG_LOCAL_WRITE, &ref) (its
 * chunk becomes DPDK external memory), then rte_pktmbuf_pool_create_extbuf over it (buf_iova:
 * rte_mem_virt2iova(block)), or rte_mempool_create_empty + rte_mempool_populate_virt.
 *
 * Stalls: an endpoint with as many mbufs out as its cap, or whose pool nicmalloc made is empty,
 * takes no burst and says -ENOBUFS once, until a recycle makes room. The cap on the ports
 * nicmalloc starts whose driver fills its queue from its one pool is the endpoint's share of it
 * (the pool's size over the receiving endpoints of such ports), so that what one holds never
 * leaves another none; on a port whose driver takes nothing from it (net_ring, whose receiver
 * holds its sender's mbufs) the pool's size, counting no share, and its scattered packets are
 * gathered into lent memory rather than the pool while an endpoint of the first kind receives;
 * on the application's ports, the queue's descriptor count, or 512. A burst from nicmalloc's pool
 * asks for no more mbufs than the pool has free: a driver may take a burst's all at once
 * (net_null does). The driver keeps the frames meanwhile, and drops what its queue (or the
 * kernel's ring) cannot hold. */
#define NIC_DPDK_RX_MBUFS 511u
/* What libnicmalloc lends for receive buffers (safety/endpoint_dpdk.c hands it over before it
 * makes an endpoint): alloc gives len bytes, 4 KiB aligned, of dataplane memory whose chunk is
 * registered with this backend, or NULL; free gives them back. Over 2 MiB (the shortest pin
 * step) the memory is not registered: the plugin asks that much only for a packet it gathers,
 * which no NIC writes. */
struct nic_dpdk_rx_memory {
  void *(*alloc)(size_t len);
  void (*free)(void *p);
};
void nic_dpdk_rx_memory(const struct nic_dpdk_rx_memory *m);

/* The helper under post(): an mbuf chain over the n entries (one extbuf segment per entry,
 * entries over 64 KiB - 1 split), which the caller may send however it likes. When the last
 * segment is freed, done(arg, 0) is queued; it runs from the backend's poll(), never from the
 * free. NULL with errno: EINVAL (bad entry), E2BIG (more entries than max_sge, or segments than a
 * chain holds), EFAULT (an entry not covered by the registration its lkey names), ENOBUFS (no mbuf
 * headers), ENOMEM. */
struct rte_mbuf *nic_dpdk_chain(struct nic_backend *b, const struct nic_sge *sge, unsigned n,
                                nic_completion_fn done, void *arg);

#ifdef __cplusplus
}
#endif

/* ---- Shared by dpdk.c and dpdk_mbuf.c only. ---- */
#ifdef NIC_DPDK_INTERNAL
#include "export.h"
#include "nicmalloc.h"
#include <pthread.h>
#include <rte_mbuf.h>
#include <rte_spinlock.h>
#include <stdatomic.h>

/* Registrations at once: as many as io_uring's fixed buffers (48 chunks of 4 MiB steps fit). */
#define NIC_DPDK_MAX_REGS 16384u
/* Extmem areas at once: each takes one of DPDK 22.11's 128 memseg lists; half stay the
 * application's. */
#define NIC_DPDK_MAX_AREAS 64u
#define NIC_DPDK_SEG_MAX UINT16_MAX /* extbuf buf_len is 16 bits */
#define NIC_DPDK_MAX_SGE 64u        /* entries per post (caps.max_sge) */

struct dreg {
  bool used;
  uint8_t area; /* index in dbackend.areas */
  void *base;   /* as asked for: entries are checked against it */
  size_t len;
  void *map_base; /* page-aligned range given to DPDK (DMA-mapped for each device) */
  size_t map_len;
  size_t page_sz;
  rte_iova_t *iovas; /* per page, IOVA-as-PA mode only; NULL means IOVA = VA */
  atomic_uint inflight;
};

/* An extmem area (rte_extmem_register): DPDK's record of memory that is not its own, which
 * rte_dev_dma_map and IOVA lookups require. Either one registration's own pages, or the whole
 * dataplane range, shared by every registration inside it (dpdk_areas.c says when). */
struct darea {
  void *base;
  size_t len;
  unsigned users; /* registrations on it; 0: the entry is free */
};

struct nic_endpoint {
  uint16_t port, queue;
  uint16_t max_segs;
  unsigned refs;       /* nic_dpdk_endpoint calls not closed yet (the default's: the backend) */
  bool no_cleanup;     /* driver has no tx_done_cleanup */
  rte_spinlock_t lock; /* tx_burst and tx_done_cleanup on one queue must not overlap */
  atomic_uint inflight;
  /* Posts the tx queue had no room for, oldest first, under lock: a ring of backlog_len chains
   * from backlog_head, which every post and poll hands to the queue before anything later
   * (dpdk_mbuf.c). backlog_len is read without the lock only to skip an empty one. */
  unsigned backlog_head;
  atomic_uint backlog_len;
  struct rte_device *dev;
  struct nic_endpoint *next;
  /* Receiving (dpdk_rx.c): set under the backend's lock; rx_out counts mbufs handed over and
   * not recycled (and a stall being said), which keeps the endpoint from being closed. */
  nic_endpoint_rx_fn rx;
  void *rx_arg;
  struct rte_mempool *rx_pool; /* the queue's pool when known: copies, stalls */
  bool rx_pool_ours;           /* nicmalloc's pool */
  bool rx_shares; /* ours, and the driver fills the queue from it: empty means every buffer out */
  bool rx_stalled;
  bool rx_delivering; /* a thread hands its packets over: no other takes a burst meanwhile */
  unsigned rx_cap;
  atomic_uint rx_out;
  /* NIC_DPDK_BACKLOG (nicmalloc.h): a quarter of the 8191 mbuf headers every post takes from, so
   * that one endpoint's backlog of one-segment packets leaves the rest to the queues and the other
   * endpoints. With net_ring's ring of 1024 (a NIC's queue: 512 to 4096 descriptors) some three
   * thousand packets in a row are taken before one is refused. */
  struct rte_mbuf *backlog[NIC_DPDK_BACKLOG];
};

/* One post or chain: its segments share this shinfo, whose refcount is the segment count, so
 * DPDK itself tells us (free_cb) when the last one is gone. */
struct dpost {
  struct rte_mbuf_ext_shared_info shinfo;
  struct dbackend *be;
  struct nic_endpoint *ep; /* NULL for nic_dpdk_chain */
  nic_completion_fn done;
  void *arg;
  int status;
  bool refused;       /* post() gave the chain back unsent: freed without a completion */
  struct dpost *next; /* on the completion queue */
  unsigned n;
  uint16_t slots[]; /* registration per entry, for in-flight counts */
};

struct dbackend {
  struct nic_backend pub;
  struct rte_mempool *hdr_pool; /* data-less mbufs that carry the extbufs */
  bool own_eal;
  pthread_mutex_t reg_lock; /* registrations: held across extmem registration, not by poll */
  /* A registration's used flag against the posts' in-flight counts on it: a post finds its
   * entries' registrations and counts them in flight under it, a deregistration clears used
   * only while none is counted, and a registration sets it once made. Taken last, briefly, and
   * never across a DPDK call: posts do not wait for a registration being made. */
  pthread_mutex_t use_lock;
  pthread_mutex_t lock; /* the endpoint list (taken after reg_lock) */
  struct nic_endpoint *eps, *default_ep;
  pthread_mutex_t cq_lock; /* completion queue: free_cb runs on any thread */
  struct dpost *cq_head, *cq_tail;
  uint32_t free_hint; /* where the search for a free registration starts */
  struct darea areas[NIC_DPDK_MAX_AREAS];
  struct dreg regs[NIC_DPDK_MAX_REGS];
};

/* Makes ep (a reference the caller holds, now the backend's) the default endpoint, under the
 * backend's locks, and drops the backend's reference to the one it replaces. */
void nic_dpdk_set_default(struct dbackend *be, struct nic_endpoint *ep);

/* dpdk_areas.c, under reg_lock: gives r (base and len set) its page-aligned range and an extmem
 * area over it (0, -ENOSPC when every area is in use, or the registration's error); and lets go
 * of r's area. */
int nic_dpdk_area_take(struct dbackend *be, struct dreg *r);
void nic_dpdk_area_drop(struct dbackend *be, struct dreg *r);
/* dpdk_ports.c: whether dev is a vdev whose driver reaches packet memory only through the CPU
 * (a CPU port, above; false for NULL), and whether every port's device is one, ports with an
 * owner included (a port probed later is not seen). */
bool nic_dpdk_cpu_device(const struct rte_device *dev);
bool nic_dpdk_only_cpu_ports(void);

/* dpdk_mbuf.c: the data path (chains, posts, completions, endpoints). A post goes to the tx
 * queue at once when nothing of the endpoint's waits and the queue takes it (after a cleanup of
 * what the driver sent, once); else it waits at the tail of the endpoint's backlog, which every
 * later post and every poll hands to the queue first, oldest first: the posts of one endpoint
 * reach the wire in post order, and a post taken is sent. -EAGAIN, nothing posted and no
 * done(), when the backlog holds NIC_DPDK_BACKLOG posts or every mbuf header is in use. */
int nic_dpdk_post(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge,
                  unsigned n, nic_completion_fn done, void *arg);
/* At the backend's close: the posts still in ep's backlog complete with status, unsent. */
void nic_dpdk_backlog_cancel(struct nic_endpoint *ep, int status);
int nic_dpdk_poll(struct nic_backend *b, int max);
int nic_dpdk_run_completions(struct dbackend *be, int max);
/* A receiver of ours drops m, a chain this backend made (net_ring hands over the sender's very
 * mbufs): its post is to complete with status once m is freed. false when m is not ours. */
bool nic_dpdk_chain_refused(const struct rte_mbuf *m, int status);
/* dpdk_rx.c: the pool for the rx queues of the ports nicmalloc starts (empty until an endpoint
 * receives; NULL with rte_errno), whether port is one of them, and the receive ops. */
struct rte_mempool *nic_dpdk_rx_pool(void);
void nic_dpdk_rx_port_started(uint16_t port, struct rte_mempool *pool);
int nic_dpdk_endpoint_receive(struct nic_backend *b, struct nic_endpoint *ep, nic_endpoint_rx_fn rx,
                              void *arg);
void nic_dpdk_rx_recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token);
/* dpdk_mbuf.c: the port's segments per packet where below max_sge (an entry over 64 KiB takes
 * several, so a post of that many may still be refused with -E2BIG). */
unsigned nic_dpdk_endpoint_max_entries(struct nic_backend *b, const struct nic_endpoint *ep);
/* From poll(): bursts from every receiving endpoint, handed over outside every lock, one thread
 * at a time per endpoint (an endpoint another thread hands packets of over is skipped), so each
 * endpoint's receive function runs on one thread at a time, in the order packets came. Returns
 * how many packets (and stalls) were handed over. */
int nic_dpdk_rx_poll(struct dbackend *be, int max);
/* Under lock, from a close: -EBUSY while mbufs are out or a thread hands the endpoint's packets
 * over, else stops receiving (0). */
int nic_dpdk_rx_close_locked(struct nic_endpoint *ep);
/* dpdk_dma.c: DMA-maps (or unmaps) r for dev: in IOVA-as-PA mode, each run of physically
 * contiguous pages on its own. 0 or -rte_errno (a failed map leaves nothing of r mapped); a
 * device without DMA mapping (ENOTSUP: its bus has none; a vdev whose driver has none, such as
 * net_bonding, maps nothing and answers 0) counts as success: its registrations' pages are held
 * all the same, which is what keeps the memory a member NIC was given. Callers hold reg_lock and
 * lock. */
int nic_dpdk_dma(struct rte_device *dev, struct dreg *r, bool map);
#endif

#endif
