/* dpdk backend: EAL (the application's, or started here), extmem registrations, posts as
 * extbuf mbuf chains (dpdk_mbuf.c). Built as libnicmalloc-dpdk.so. See dpdk.h. */
#define _GNU_SOURCE
#define NIC_DPDK_INTERNAL
#include "dpdk.h"

#include "plugin_services.h"

#include <errno.h>
#include <fcntl.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Handed over by libnicmalloc before it opens the plugin (backend.h). */
static struct nic_plugin_settings settings;
NIC_EXPORT void nic_backend_dpdk_settings(const struct nic_plugin_settings *s) {
  settings = *s;
}

/* EAL is per process and cannot restart: what we start lives until exit. */
static struct {
  bool started_eal, attached;
  /* Our rte_eal_init failed, or a port it brought would not start: EAL stays half up, and
   * cannot start again, so every later open is refused for good (not as a shortage). */
  bool broken;
  uint16_t port, queue; /* the default endpoint */
  bool have_port;
  struct rte_mempool *hdr_pool, *rx_pool;
} g;

/* Our EAL must not pin the application's thread to one CPU: lcore 0 gets every allowed CPU. */
static void lcores_arg(char *buf, size_t cap) {
  cpu_set_t set;
  size_t n = (size_t)snprintf(buf, cap, "--lcores=0@(");
  if (sched_getaffinity(0, sizeof set, &set)) CPU_ZERO(&set);
  for (int c = 0; c < RTE_MAX_LCORE && n + 8 < cap; c++)
    if (CPU_ISSET(c, &set)) n += (size_t)snprintf(buf + n, cap - n, "%d,", c);
  if (buf[n - 1] == ',') n--;
  snprintf(buf + n, cap - n, n > 12 ? ")" : "0)");
}

/* A copy the caller may cut into tokens, in the host's memory. */
static char *copy(const char *s) {
  size_t len = strlen(s) + 1;
  char *c = nic_plugin_calloc(1, len);
  return c ? memcpy(c, s, len) : NULL;
}

/* Room for EAL's arguments after the program's name: NICMALLOC_DPDK_EAL_ARGS's words (or the
 * defaults) and two for each vdev of NICMALLOC_DPDK_VDEV. A list past it is refused whole: EAL
 * started without some of its arguments would run, silently, as nobody asked. */
#define EAL_ARGS_MAX 62

/* EAL 22.11 opens 5 descriptors as it starts (its memory's memfd, the interrupt thread's pipe and
 * epoll set, the alarm's timerfd; the dsa bus scan one more for a moment), with net_ring and
 * net_null vdevs alike, and keeps 4. Short of them it fails half way, its interrupt thread
 * already running: the thread, finding no descriptor for its epoll set, panics and aborts the
 * program, or (one short) ~1000 mappings and a descriptor stay behind. So EAL starts only where
 * this many can be had: its 5, and a few for the ports and nicmalloc's event set after it. */
#define EAL_FDS 8

/* Whether EAL_FDS descriptors can be opened now (RLIMIT_NOFILE, the system's table): opened and
 * closed again, which asks the kernel itself, /proc or not. */
static bool eal_fds_free(void) {
  int fds[EAL_FDS], n = 0;
  int fd = open("/", O_PATH | O_CLOEXEC);
  while (fd >= 0) {
    fds[n++] = fd;
    fd = n < EAL_FDS ? fcntl(fds[0], F_DUPFD_CLOEXEC, 0) : -1;
  }
  const int err = errno;
  for (int i = 0; i < n; i++)
    close(fds[i]);
  errno = err;
  return n == EAL_FDS;
}

static int start_eal(void) {
  char *argv[EAL_ARGS_MAX + 2], lcores[1024], *own = NULL, *vdevs = NULL, *save;
  int argc = 0, wanted = 0; /* arguments after the name: given room, and asked for */
  argv[argc++] = "nicmalloc";
  const char *env = settings.dpdk_eal_args;
  if (env && *env) {
    if (!(own = copy(env))) return -ENOMEM;
    for (char *t = strtok_r(own, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
      if (++wanted <= EAL_ARGS_MAX) argv[argc++] = t;
  } else {
    lcores_arg(lcores, sizeof lcores);
    static char *defaults[] = {"--no-huge",         "-m",          "256",
                               "--no-pci",          "--no-shconf", "--no-telemetry",
                               "--log-level=notice"};
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
      argv[argc++] = defaults[i];
    argv[argc++] = lcores;
    wanted = argc - 1;
  }
  if ((env = settings.dpdk_vdev) && *env) {
    if (!(vdevs = copy(env))) {
      nic_plugin_free(own);
      return -ENOMEM;
    }
    for (char *t = strtok_r(vdevs, ";", &save); t; t = strtok_r(NULL, ";", &save))
      if ((wanted += 2) <= EAL_ARGS_MAX) {
        argv[argc++] = "--vdev";
        argv[argc++] = t;
      }
  }
  if (wanted > EAL_ARGS_MAX) {
    static int said;
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &said,
                   "dpdk: NICMALLOC_DPDK_EAL_ARGS and NICMALLOC_DPDK_VDEV (two words a vdev) make "
                   "%d EAL arguments, more than the %d nicmalloc passes: EAL not started",
                   wanted, EAL_ARGS_MAX);
    nic_plugin_free(own);
    nic_plugin_free(vdevs);
    return -E2BIG;
  }
  argv[argc] = NULL;
  if (!eal_fds_free()) {
    const int err = errno == EMFILE || errno == ENFILE ? errno : EMFILE;
    static int said;
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &said,
                   "dpdk: EAL needs about %d free file descriptors as it starts, and fewer are "
                   "left (%s; see ulimit -n): EAL not started, rather than let it fail half way "
                   "and end the program",
                   EAL_FDS, strerror(err));
    nic_plugin_free(own);
    nic_plugin_free(vdevs);
    return -err;
  }
  int rc = rte_eal_init(argc, argv);
  int err = rte_errno;
  nic_plugin_free(own); /* EAL copies what it keeps (vdev arguments included) */
  nic_plugin_free(vdevs);
  if (rc < 0) {
    g.broken = true;
    return -(err ? err : EINVAL);
  }
  nic_plugin_quiet_env(); /* the drivers EAL loaded, before the ports start */
  g.started_eal = true;
  return 0;
}

/* A pool of DPDK memory, for drivers that take mbufs at queue setup or start. */
static struct rte_mempool *dpdk_rx_pool(void) {
  if (!g.rx_pool)
    g.rx_pool =
        rte_pktmbuf_pool_create("nic_rx", 2047, 64, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return g.rx_pool;
}

/* One rx and one tx queue, multi-segment tx when offered. The rx queue takes the dataplane pool
 * (dpdk_rx.c), empty until an endpoint receives; a driver that wants mbufs at once gets DPDK's. */
static int start_port(uint16_t port) {
  struct rte_eth_dev_info info;
  struct rte_eth_conf conf = {0};
  int rc = rte_eth_dev_info_get(port, &info);
  if (rc) return rc;
  conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  int socket = rte_eth_dev_socket_id(port);
  struct rte_mempool *pool = nic_dpdk_rx_pool();
  if ((rc = rte_eth_dev_configure(port, 1, 1, &conf)) ||
      (rc = rte_eth_tx_queue_setup(port, 0, 512, socket, NULL)))
    return rc;
  if (!pool || rte_eth_rx_queue_setup(port, 0, 512, socket, NULL, pool) ||
      rte_eth_dev_start(port)) {
    if (!(pool = dpdk_rx_pool())) return -rte_errno;
    if ((rc = rte_eth_rx_queue_setup(port, 0, 512, socket, NULL, pool)) ||
        (rc = rte_eth_dev_start(port)))
      return rc;
  }
  nic_dpdk_rx_port_started(port, pool);
  return 0;
}

/* Maps (or unmaps) r once for every device that has an endpoint. */
static int dma_all(struct dbackend *be, struct dreg *r, bool map) {
  for (struct nic_endpoint *ep = be->eps; ep; ep = ep->next) {
    bool seen = false;
    for (struct nic_endpoint *o = be->eps; o != ep && !seen; o = o->next)
      seen = o->dev == ep->dev;
    int rc = seen ? 0 : nic_dpdk_dma(ep->dev, r, map);
    if (rc && map) return rc;
  }
  return 0;
}

static int d_reg(struct nic_backend *b, void *base, size_t len, unsigned access,
                 struct nic_registration *out) {
  struct dbackend *be = (struct dbackend *)b;
  if (!base || !len || !out || access & ~7u) return -EINVAL;
  if (access & (NIC_ACCESS_REMOTE_READ | NIC_ACCESS_REMOTE_WRITE))
    return -EOPNOTSUPP; /* an Ethernet port has no remote access, so no rkey to expose */
  pthread_mutex_lock(&be->reg_lock);
  int rc = -ENOSPC;
  bool no_area = false;
  for (uint32_t k = 0; k < NIC_DPDK_MAX_REGS; k++) {
    const uint32_t i = (be->free_hint + k) % NIC_DPDK_MAX_REGS;
    struct dreg *r = &be->regs[i];
    if (r->used) continue;
    pthread_mutex_lock(&be->use_lock); /* posts read used (false) meanwhile */
    *r = (struct dreg){.base = base, .len = len};
    pthread_mutex_unlock(&be->use_lock);
    if ((rc = nic_dpdk_area_take(be, r))) {
      no_area = rc == -ENOSPC;
      break;
    }
    pthread_mutex_lock(&be->lock);
    if ((rc = dma_all(be, r, true))) dma_all(be, r, false);
    pthread_mutex_unlock(&be->lock);
    if (rc) {
      nic_dpdk_area_drop(be, r);
      break;
    }
    pthread_mutex_lock(&be->use_lock);
    r->used = true;
    pthread_mutex_unlock(&be->use_lock);
    be->free_hint = i + 1;
    *out = (struct nic_registration){
        .base = base, .len = len, .access = access, .lkey = i, .handle = i};
    break;
  }
  pthread_mutex_unlock(&be->reg_lock);
  static int said_full, said_no_area;
  if (no_area)
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &said_no_area,
                   "dpdk: all %u extmem areas are in use (each takes one of DPDK's 128 memseg "
                   "lists): a registration that needs its own area (a registration-cache region; "
                   "a dataplane step in IOVA-as-PA mode or with a physical port) cannot reach "
                   "the port until one is let go (a larger NICMALLOC_PIN_STEP makes fewer steps)",
                   NIC_DPDK_MAX_AREAS);
  else if (rc == -ENOSPC)
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &said_full,
                   "dpdk: all %u registrations are in use: a dataplane step, or a "
                   "registration-cache region, past them cannot reach the port (a larger "
                   "NICMALLOC_PIN_STEP makes fewer steps)",
                   NIC_DPDK_MAX_REGS);
  return rc;
}

static int d_dereg(struct nic_backend *b, struct nic_registration *reg) {
  struct dbackend *be = (struct dbackend *)b;
  if (!reg || reg->handle >= NIC_DPDK_MAX_REGS) return -EINVAL;
  struct dreg *r = &be->regs[reg->handle];
  pthread_mutex_lock(&be->reg_lock);
  pthread_mutex_lock(&be->use_lock);
  int rc = !r->used || r->base != reg->base ? -EINVAL : atomic_load(&r->inflight) ? -EBUSY : 0;
  if (!rc)
    r->used = false; /* no post counts it from here; reg_lock keeps the slot till it is gone */
  pthread_mutex_unlock(&be->use_lock);
  if (!rc) {
    pthread_mutex_lock(&be->lock);
    dma_all(be, r, false);
    pthread_mutex_unlock(&be->lock);
    nic_dpdk_area_drop(be, r);
  }
  pthread_mutex_unlock(&be->reg_lock);
  return rc;
}

NIC_EXPORT bool nic_dpdk_owns_eal(struct nic_backend *b) {
  return b && ((struct dbackend *)b)->own_eal;
}

static struct dbackend *the_backend; /* for nic_dpdk_attach after open */

NIC_EXPORT int nic_dpdk_attach(uint16_t port, uint16_t queue) {
  if (!rte_eth_dev_is_valid_port(port)) {
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT, "nic_dpdk_attach(%u, %u): no such port", port,
                         queue);
    return -EINVAL;
  }
  /* The new endpoint first: one that cannot be made leaves the default as it was. */
  struct nic_endpoint *ep = the_backend ? nic_dpdk_endpoint(&the_backend->pub, port, queue) : NULL;
  if (the_backend && !ep) {
    const int err = errno;
    nic_plugin_api_error(NIC_PLUGIN_API_ENDPOINT, "nic_dpdk_attach(%u, %u): %s", port, queue,
                         err == EINVAL ? "no such tx queue on the port" : strerror(err));
    return -err;
  }
  g.attached = g.have_port = true;
  g.port = port;
  g.queue = queue;
  if (ep) nic_dpdk_set_default(the_backend, ep);
  return 0;
}

static void dclose(struct nic_backend *b) {
  struct dbackend *be = (struct dbackend *)b;
  /* Posts still waiting for a tx queue are never sent now: they complete, unsent, here. */
  for (struct nic_endpoint *ep = be->eps; ep; ep = ep->next)
    nic_dpdk_backlog_cancel(ep, -ECANCELED);
  nic_dpdk_run_completions(be, 0);
  for (uint32_t i = 0; i < NIC_DPDK_MAX_REGS; i++)
    if (be->regs[i].used) {
      struct nic_registration reg = {.base = be->regs[i].base, .handle = i};
      if (d_dereg(b, &reg)) nic_plugin_warn("dpdk: registration %u still in flight at close", i);
    }
  while (be->eps) {
    struct nic_endpoint *next = be->eps->next;
    nic_plugin_free(be->eps);
    be->eps = next;
  }
  the_backend = NULL;
  nic_plugin_free(be);
}

static struct nic_endpoint *d_endpoint_create(struct nic_backend *b,
                                              const struct nic_endpoint_params *p) {
  return nic_dpdk_endpoint(b, p->port, p->queue);
}

NIC_EXPORT struct nic_backend *nic_backend_dpdk_open(const struct nic_plugin_host *host) {
  if (!nic_plugin_attach(host)) return NULL;
  static int said; /* "cannot start", once whatever the cause */
  if (g.broken) {
    nic_plugin_log(NIC_PLUGIN_LOG_WARN, &said,
                   "dpdk: cannot start: EAL failed to start earlier in this process (said then), "
                   "and EAL cannot start twice");
    errno = ENODEV;
    return NULL;
  }
  /* lcore_count is 0 until someone's rte_eal_init ran: then the application owns EAL. */
  bool app_eal = g.attached || (!g.started_eal && rte_lcore_count() > 0);
  int rc = app_eal || g.started_eal ? 0 : start_eal();
  if (!rc && g.started_eal && !g.have_port) {
    uint16_t port;
    RTE_ETH_FOREACH_DEV(port) {
      if ((rc = start_port(port))) break;
      if (!g.have_port) g.port = port, g.queue = 0, g.have_port = true;
    }
    if (rc) g.broken = true; /* the ports after it would never be started again */
  }
  if (!rc && !g.hdr_pool &&
      !(g.hdr_pool = rte_pktmbuf_pool_create("nic_extbuf_hdr", 8191, 256, 0, 0, SOCKET_ID_ANY)))
    rc = -rte_errno;
  struct dbackend *be = rc ? NULL : nic_plugin_calloc(1, sizeof *be);
  if (!be) {
    errno = rc ? -rc : ENOMEM;
    if (rc) {
      nic_plugin_log(NIC_PLUGIN_LOG_WARN, &said, "dpdk: cannot start: %s%s", strerror(-rc),
                     g.broken ? "; EAL cannot start again in this process" : "");
    }
    return NULL; /* the real errno; a later open, if any, is refused with ENODEV (g.broken) */
  }
  /* With IOVA = address and only ports whose drivers reach memory through the CPU
   * (dpdk_ports.c), a registration is a record of addresses: free pages under it may go back to
   * the OS and come back (alloc/heap/step_pages.h), as under the sim's. A port of another kind
   * (a NIC, or a vdev over one) may DMA into the pages it was given: nic_dpdk_endpoint refuses it
   * then. */
  const bool follow = rte_eal_iova_mode() != RTE_IOVA_PA && nic_dpdk_only_cpu_ports();
  be->pub = (struct nic_backend){.name = "dpdk",
                                 .caps = {.max_sge = NIC_DPDK_MAX_SGE,
                                          .max_region_bytes = SIZE_MAX,
                                          .max_regions = NIC_DPDK_MAX_REGS,
                                          .max_separate_regions = NIC_DPDK_MAX_AREAS,
                                          .max_message = UINT32_MAX, /* pkt_len */
                                          .zero_copy = true,
                                          .pages_follow = follow},
                                 .reg = d_reg,
                                 .dereg = d_dereg,
                                 .post = nic_dpdk_post,
                                 .poll = nic_dpdk_poll,
                                 .close = dclose,
                                 .endpoint_create = d_endpoint_create,
                                 .endpoint_destroy = nic_dpdk_endpoint_close,
                                 .endpoint_receive = nic_dpdk_endpoint_receive,
                                 .rx_recycle = nic_dpdk_rx_recycle,
                                 .endpoint_max_entries = nic_dpdk_endpoint_max_entries};
  be->hdr_pool = g.hdr_pool;
  be->own_eal = g.started_eal;
  pthread_mutex_init(&be->reg_lock, NULL);
  pthread_mutex_init(&be->use_lock, NULL);
  pthread_mutex_init(&be->lock, NULL);
  pthread_mutex_init(&be->cq_lock, NULL);
  the_backend = be;
  if (g.have_port && !(be->default_ep = nic_dpdk_endpoint(&be->pub, g.port, g.queue)))
    nic_plugin_warn("dpdk: port %u queue %u is not usable", g.port, g.queue);
  else if (g.have_port)
    nic_plugin_info("dpdk backend on port %u queue %u (EAL %s)", g.port, g.queue,
                    g.started_eal ? "started by nicmalloc" : "the application's");
  else
    nic_plugin_info("dpdk backend without a default port (EAL %s)",
                    g.started_eal ? "started by nicmalloc" : "the application's");
  return &be->pub;
}
