/* The registration backends behind one ops table: sim (a software NIC that enforces
 * registrations and models the NIC's translation cache), uring (io_uring fixed buffers and
 * SEND_ZC), verbs (rdma-core), dpdk (external memory + extbuf mbufs). Several may run at once,
 * each started by the first endpoint of its kind; NICMALLOC_BACKEND picks the default one (auto =
 * the first started, else verbs when a device exists, else uring, else sim).
 *
 * Internal interface: the scatter-gather API in nicmalloc.h is built on it. */
#ifndef NIC_BACKEND_H
#define NIC_BACKEND_H

#include "registry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Access rights asked for at registration. Local read is always granted; anything remote is
 * granted only when asked for, and only then does a registration carry a nonzero rkey. */
enum nic_access {
  NIC_ACCESS_LOCAL = 0,
  NIC_ACCESS_LOCAL_WRITE = 1u << 0, /* the NIC may write (receive buffers) */
  NIC_ACCESS_REMOTE_READ = 1u << 1,
  NIC_ACCESS_REMOTE_WRITE = 1u << 2,
};

/* One registered region, as the backend returned it. */
struct nic_registration {
  void *base;
  size_t len;
  unsigned access;
  uint32_t lkey;
  uint32_t rkey;   /* 0 unless remote access was asked for */
  uint64_t handle; /* backend's own: fixed-buffer slot, registration slot index... */
};

/* One scatter-gather entry, already translated. */
struct nic_sge {
  const void *addr;
  uint32_t len;
  uint32_t lkey;
  uint64_t handle;
};

struct nic_backend_caps {
  uint32_t max_sge;        /* entries per post */
  size_t max_region_bytes; /* largest single registration */
  uint32_t max_regions;    /* registrations alive at once */
  /* Of those, registrations of memory outside the dataplane range alive at once, where each
   * takes a scarcer resource of its own (dpdk: an extmem area); 0: max_regions. The
   * registration caches keep fewer regions than this (rcache.c). */
  uint32_t max_separate_regions;
  bool zero_copy; /* false where the transport copies (uring over loopback) */
  /* A registration refers to memory by address and holds no page references: pages dropped
   * and faulted in again under it stay valid (the sim NIC; DPDK with only virtual ports in
   * IOVA-as-VA mode). false (the safe default) where the kernel or the device keeps the pages it
   * was given (io_uring fixed buffers, verbs MRs without on-demand paging, DPDK in IOVA-as-PA
   * mode or with a physical port); the heap then keeps a registered step's pages whole
   * (alloc/heap/step_pages.h). */
  bool pages_follow;
  /* Bytes one post may carry, its entries together (io_uring: the most one send takes, Linux's
   * MAX_RW_COUNT; dpdk: a packet's 32-bit length); 0: no limit but its entries'. */
  size_t max_message;
};

/* Where posted data goes: a socket (uring), a queue pair (verbs), a port and queue (dpdk), or the
 * sim NIC's receiver. Created by the backend's own constructor; opaque to the rest. */
struct nic_endpoint;

/* A message the backend received for an endpoint, handed over in its own buffer: 0, or -errno
 * when the receiver could not take it (dropped; the sender's post completes with that error). */
typedef int (*nic_endpoint_receive_fn)(void *arg, const void *data, size_t len);
/* What an endpoint is made from; each backend reads its own members. */
struct nic_endpoint_params {
  int sockfd;                      /* uring: a connected TCP or UDP socket */
  uint16_t port, queue;            /* dpdk: a started port's tx queue */
  void *qp;                        /* verbs: the application's queue pair */
  nic_endpoint_receive_fn receive; /* sim: where its messages go, with arg */
  void *arg;
  unsigned sim_flags; /* sim: NIC_SIM_EP_* */
};

/* A received message for the layer above: data lies in one of the backend's receive buffers
 * (dataplane memory the NIC or the kernel wrote); the buffer is the receiver's until the
 * backend's rx_recycle(token). data NULL and len 0: receiving ended, with status 1 (the peer
 * ended the stream) or -errno; no call follows. */
typedef void (*nic_endpoint_rx_fn)(void *arg, void *data, size_t len, int status, uint64_t token);

/* Runs once per post when the NIC no longer needs the memory: status 0, or -EFAULT for a
 * protection error (an entry not covered by a registration), or another -errno. */
typedef void (*nic_completion_fn)(void *arg, int status);
/* poll()'s max when nicmalloc polls for itself (a fence waiting for completions, the protect
 * poller thread): the program's receive functions run only from its nic_poll and nic_wait, on
 * its own threads, and in the order its messages came. */
#define NIC_POLL_COMPLETIONS_ONLY (-1)

/* The layout of struct nic_backend and the meaning of its members, between the host and a plugin
 * (which hands the host its table): bumped with every change to either. Each plugin exports its
 * build's value as nic_backend_abi (plugin_services.c), and the host loads none of another, such
 * as an older plugin found along the library path, whose table it would read wrong. */
#define NIC_BACKEND_ABI 2u

struct nic_backend {
  const char *name;
  struct nic_backend_caps caps;
  int (*reg)(struct nic_backend *b, void *base, size_t len, unsigned access,
             struct nic_registration *out);
  /* Returns 0, or -EBUSY while posts that use the registration are in flight. */
  int (*dereg)(struct nic_backend *b, struct nic_registration *reg);
  /* Queues n entries to ep as one message; done(arg, status) runs exactly once afterwards,
   * from poll() or from the backend's own thread, never from inside post(). Returns 0, or
   * without calling done: -E2BIG (n over max_sge, or over ep's own limit where it has a lower
   * one: a verbs QP's max_send_sge, a dpdk port's segments per packet), -EINVAL (bad entry) or
   * -ENOMEM (no room to queue).
   * An entry not covered by a registration, or a full device queue, completes with -EFAULT or
   * -EAGAIN. A registration must not be deregistered while posts that use it are in flight. */
  int (*post)(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge, unsigned n,
              nic_completion_fn done, void *arg);
  /* Runs up to max ready completions and received messages (all of them when max is 0);
   * returns how many ran. max NIC_POLL_COMPLETIONS_ONLY runs every ready completion and no
   * receive function: a receive waits for the program's own nic_poll / nic_wait. */
  int (*poll)(struct nic_backend *b, int max);
  /* A file descriptor that polls readable while poll() has work (completions, receives), for
   * nic_wait and nic_event_fd. The backend owns it and clears it from poll() once nothing is
   * left; readers only wait on it. -ENOSYS (or NULL) where the backend has none: waiting then
   * polls in short sleeps. Another -errno where it could not be made for now (EMFILE): asked
   * again later, under the backends' lock. */
  int (*event_fd)(struct nic_backend *b);
  void (*close)(struct nic_backend *b);
  /* Endpoints, what posts go out on, made from the members of params that are the backend's
   * (below). NULL with errno set when it cannot make one; destroy: 0 or -errno (-EBUSY while
   * posts on it are in flight). The public constructors (safety/endpoint*.c) check and count;
   * these make and unmake. */
  struct nic_endpoint *(*endpoint_create)(struct nic_backend *b,
                                          const struct nic_endpoint_params *params);
  int (*endpoint_destroy)(struct nic_backend *b, struct nic_endpoint *ep);
  /* Receiving, where the backend can (NULL otherwise). endpoint_receive starts handing ep's
   * messages to rx from poll(), each in a receive buffer of dataplane memory: 0 or -errno.
   * rx_recycle gives the buffer of token back to the NIC (any thread). While receive buffers
   * are out, endpoint_destroy answers -EBUSY. */
  int (*endpoint_receive)(struct nic_backend *b, struct nic_endpoint *ep, nic_endpoint_rx_fn rx,
                          void *arg);
  void (*rx_recycle)(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token);
  /* The most entries one post to ep takes where ep has a lower limit of its own than
   * caps.max_sge (a verbs QP's max_send_sge, a dpdk port's segments per packet, an entry counted
   * as one segment); NULL where every endpoint takes caps.max_sge. For nic_endpoint_limits. */
  unsigned (*endpoint_max_entries)(struct nic_backend *b, const struct nic_endpoint *ep);
  /* The most bytes one post to ep carries that a nicmalloc receiver of ep's kind takes whole,
   * where ep has a lower limit than caps.max_message (a uring datagram socket: one datagram, in
   * one receive buffer); NULL where every endpoint takes caps.max_message. For
   * nic_endpoint_limits. */
  size_t (*endpoint_max_message)(struct nic_backend *b, const struct nic_endpoint *ep);
  void *priv;
};

/* Each backend's constructor. Returns NULL with errno set when it cannot run here (no device,
 * io_uring disabled, EAL refused): auto selection then tries the next one. The built-in ones
 * (sim, uring) register it with NIC_BACKEND_BUILTIN; the plugins (verbs, dpdk) export it. */
struct nic_backend_builtin {
  const char *name;
  struct nic_backend *(*open)(void);
};
#define NIC_BACKEND_BUILTIN(name_, open_)                                                          \
  static const struct nic_backend_builtin nic_backend_##name_ NIC_REGISTRY_ENTRY(nic_backends) = { \
      .name = #name_, .open = (open_)}

struct nic_backend *nic_backend_sim_open(void);
struct nic_backend *nic_backend_uring_open(void);
/* The plugins' (plugin_host.h): they log, read settings and allocate through the host. */
struct nic_plugin_host;
struct nic_backend *nic_backend_verbs_open(const struct nic_plugin_host *host);
struct nic_backend *nic_backend_dpdk_open(const struct nic_plugin_host *host);

/* The settings a plugin backend takes, typed and checked by libnicmalloc (settings.h) and handed
 * over before it opens (nic_backend_<name>_settings): a plugin cannot reach libnicmalloc's hidden
 * functions, and reading the environment itself would skip the copy at start-up, secure
 * execution and first-entry-wins. The strings live as long as the process. NICMALLOC_VERBOSE is
 * not here: the host's logger (plugin_host.h) decides whether an info line is said. */
struct nic_plugin_settings {
  const char *verbs_device;              /* NICMALLOC_VERBS_DEVICE; NULL: the first device */
  bool verbs_odp;                        /* NICMALLOC_VERBS_ODP */
  const char *dpdk_vdev, *dpdk_eal_args; /* NICMALLOC_DPDK_VDEV, _EAL_ARGS; NULL: none */
};
void nic_backend_verbs_settings(const struct nic_plugin_settings *s);
void nic_backend_dpdk_settings(const struct nic_plugin_settings *s);

/* Several backends may run in one process, one of each kind at most: each endpoint names its
 * own (its public constructor starts it), and NICMALLOC_BACKEND names the default one, which
 * nic_register, nic_sga_add and the statistics use. The kinds index the per-backend tables
 * (chunk registrations, registration caches). */
enum nic_backend_kind {
  NIC_BACKEND_SIM,
  NIC_BACKEND_URING,
  NIC_BACKEND_VERBS,
  NIC_BACKEND_DPDK,
  NIC_BACKEND_KINDS
};
/* The default backend: NICMALLOC_BACKEND's, or under auto the first one started, or else verbs
 * when a device exists, else uring, else sim. Opened on first use; NULL when none could be
 * (the reason was printed once). */
struct nic_backend *nic_backend_active(void);
/* The default backend if one was chosen already, else NULL; never opens one. */
struct nic_backend *nic_backend_if_open(void);
/* Backend kind, started now unless it runs already (thread-safe; a kind that failed to start is
 * not tried again). NULL with errno set when it cannot run here (ENODEV for a kind a child of
 * fork cannot start: nic_backend_refused_why). */
struct nic_backend *nic_backend_start(enum nic_backend_kind kind);
/* A plugin kind's own function (verbs, dpdk), its library loaded as an open loads it but the
 * backend not opened: for what a program calls before the backend opens (nic_dpdk_attach). The
 * plugin stays loaded; its open later finds the same copy. NULL with errno ENODEV (not a plugin
 * kind, one a child of fork leaves to its parent, or its library cannot be loaded) or ENOSYS (the
 * plugin has no such symbol). */
void *nic_backend_plugin_symbol(enum nic_backend_kind kind, const char *symbol);
/* Backend kind if it runs, else NULL; never starts one. Lock-free. */
struct nic_backend *nic_backend_started(enum nic_backend_kind kind);
/* How many backends run (those of this process: not its parent's). One load. */
unsigned nic_backend_count(void);
/* The backend while exactly one runs, else NULL (none, or several). One
 * load, inline: every post asks which backend its endpoint belongs to. */
extern struct nic_backend *nic_backend_only_one __attribute__((visibility("hidden")));
static inline struct nic_backend *nic_backend_only(void) {
  return __atomic_load_n(&nic_backend_only_one, __ATOMIC_ACQUIRE);
}
/* The kind of a started backend, or NIC_BACKEND_KINDS for one that is not (a test's own). */
unsigned nic_backend_kind_of(const struct nic_backend *b);
/* poll() of every started backend: up to max (all when 0), or NIC_POLL_COMPLETIONS_ONLY. */
int nic_backends_poll(int max);
/* One descriptor that polls readable while a started backend's event_fd does: an epoll set
 * nicmalloc owns, holding each started backend's descriptor, those started later included. The
 * fd, or -ENOSYS when a started backend has none (verbs, dpdk), -ENODEV when none runs, another
 * -errno when the set or a backend's descriptor could not be made for now (EMFILE, ENFILE,
 * ENOMEM): not remembered, a later call tries again. */
int nic_backends_event_fd(void);
/* That set even while no backend runs (empty until one starts), or -errno: -ENODEV in a child of
 * fork made while a backend opened. For a descriptor that also polls for other work. */
int nic_backends_event_set(void);
/* A descriptor of a layer above that joins that set too (its owner makes it readable while
 * nic_poll has work of its own, and clears it): one, set once; later calls are ignored. It is
 * nicmalloc's from then: closed in fork children, which make their own. */
void nic_backends_event_fd_join(int fd);
/* Starts refused for a shortage that may pass (EMFILE, ENFILE, ENOMEM, EAGAIN: not a failure for
 * good, tried again after 1 s, doubling up to 60 s), for the statistics. */
uint64_t nic_backend_start_refusals(void);
/* The errno of kind's last start, refused for such a shortage, while it is to be tried again
 * (not started, not failed for good since); 0 otherwise. */
int nic_backend_short_of(enum nic_backend_kind kind);
/* While no default backend is chosen because the kind it waits for (NICMALLOC_BACKEND's, or under
 * auto the first refused so) was refused for a shortage: that errno, and the kind's name in
 * *name; 0 otherwise (none could start for good, or one is chosen). */
int nic_backend_default_short_of(const char **name);
/* How a refusal for a shortage is said, with the kind's name and the errno's text: the same
 * words wherever a call finds no backend for it. */
#define NIC_BACKEND_SHORT_FMT                                                                      \
  "backend %s cannot start for now (%s), a shortage that may pass: it is tried again after a "     \
  "second, then after twice as long each time it is still refused, up to a minute"
/* The started backends' names, joined by '+' ("none" while none runs), for the statistics. */
const char *nic_backends_names(void);

/* Registers [base, base + len) with b, unless pages of it are write-protected now (a layer
 * above keeps posted memory so, regcache/cache/pin_guard.c): then -EAGAIN, nothing done. io_uring
 * and verbs pin what they register for writing, a write the kernel makes: to a protected page it
 * waits for the DMA, holding the ring's lock every completion needs. Every registration goes
 * through here. */
int nic_backend_reg(struct nic_backend *b, void *base, size_t len, unsigned access,
                    struct nic_registration *out);
/* Every deregistration goes through here. Both calls mark the thread as inside b
 * (backend_calls.c): a deregistration with b that a free or an unmap inside b's own call asks
 * for is deferred by the registration cache until the thread's outermost backend call returns,
 * instead of entering b again under the locks b holds. */
int nic_backend_dereg(struct nic_backend *b, struct nic_registration *reg);
/* True while the calling thread is inside b's reg or dereg (through the calls above). */
bool nic_backend_in_call(const struct nic_backend *b);
/* The calls above bracket each backend call with these; leaving the outermost makes the
 * deregistrations deferred meanwhile. */
void nic_backend_call_enter(const struct nic_backend *b);
void nic_backend_call_leave(void);
/* After -EAGAIN, with no lock held that a completion takes: returns once a retry can succeed
 * (true), or false when the pages stayed protected for NICMALLOC_FENCE_TIMEOUT_MS. */
bool nic_backend_reg_wait(void *base, size_t len);
/* Set once by the layer that write-protects pages. begin: false when a page of [start, end) is
 * protected now, else no page of it will be until end. wait: as nic_backend_reg_wait. */
struct nic_pin_guard {
  bool (*begin)(uintptr_t start, uintptr_t end);
  void (*end)(uintptr_t start, uintptr_t end);
  bool (*wait)(uintptr_t start, uintptr_t end);
};
void nic_backend_pin_guard_set(const struct nic_pin_guard *g);

/* A child of fork has none of its parent's backends: it shares their state with the parent (an
 * io_uring instance and its CQ ring, a NIC's queues), so a child that polled them would run the
 * parent's completions and lose them for the parent, and one that registered or deregistered
 * would change the parent's table. It forgets them and the registrations made with them, and
 * opens its own on first use, but for the plugin kinds the parent started. A child forked
 * while a backend opened keeps none at all: all of the above say NULL there, and this is why,
 * for messages (NULL elsewhere). */
const char *nic_backend_missing_why(void);
/* Why kind cannot start, where more is known than its errno, or NULL: in this child of fork, its
 * parent started it; or its plugin cannot be loaded (the path tried and the loader's reason). */
const char *nic_backend_refused_why(enum nic_backend_kind kind);
/* How many forks down from the first process of the program this one is, counting only those
 * whose child forgot its parent's backends: what the parent registered, with a different
 * generation, is not this process's. */
unsigned nic_backend_generation(void);

#ifdef __cplusplus
}
#endif
#endif
