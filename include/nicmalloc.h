/* nicmalloc: a malloc replacement that places NIC-bound ("dataplane") objects in pinned,
 * registrable hugepage chunks and everything else in mimalloc's ordinary heap.
 *
 * The public header, with nicmalloc_stats_fields.h. Every symbol is prefixed nic_, every setting
 * is a NICMALLOC_* environment variable (see README.md). The standard malloc family and C++
 * operator new/delete are exported by libnicmalloc itself; they need no declaration here. */
#ifndef NICMALLOC_H
#define NICMALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "nicmalloc_stats_fields.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NIC_VERSION_MAJOR 0
#define NIC_VERSION_MINOR 1

/* ---- Explicit dataplane allocation. Free any of these with plain free() where nicmalloc is
 * the program's malloc (preloaded, or linked into the program), or with nic_free anywhere. ---- */
void *nic_malloc(size_t size);
void *nic_calloc(size_t count, size_t size);
/* Moves a block into dataplane memory if it is not there already. */
void *nic_realloc(void *p, size_t size);
void *nic_aligned_alloc(size_t alignment, size_t size);
/* free() for nicmalloc's blocks (these, and any the nic_ calls return), for code that may run
 * where the program's free is another allocator's: a library that loads nicmalloc with dlopen
 * (a Python extension, a plugin) or links it while the program does not. There, plain malloc,
 * new, NICMALLOC_DP_MIN_SIZE and the dataplane scope do not reach nicmalloc (it says so once at
 * load), and free() of a block of nicmalloc's is the other allocator's error. */
void nic_free(void *p);

/* ---- Per-thread scope: inside it, ordinary malloc/new on this thread is dataplane. Nests. ---- */
void nic_dataplane_begin(void);
void nic_dataplane_end(void);

/* ---- Site ABI emitted by the LLVM pass (llvm-pass/) and used by profile-guided routing. A site
 * that is switched off allocates as the plain call it replaced would: from the control heap,
 * unless the thread's dataplane scope or NICMALLOC_DP_MIN_SIZE says otherwise (or
 * NICMALLOC_SITES routes its call site). Site ids are below NIC_MAX_SITES. ---- */
#define NIC_MAX_SITES 65536u
void *nic_malloc_site(size_t size, uint32_t site_id);
void *nic_calloc_site(size_t count, size_t size, uint32_t site_id);
void *nic_realloc_site(void *p, size_t size, uint32_t site_id);
void *nic_aligned_alloc_site(size_t alignment, size_t size, uint32_t site_id);
int nic_posix_memalign_site(void **out, size_t alignment, size_t size, uint32_t site_id);
/* C++ operator new semantics (throws std::bad_alloc when C++ is present, else aborts). The
 * nic_new_ sites stand for operator new, the nic_new_array_ ones for operator new[]; where the
 * program replaced C++'s global operator new or delete, each allocates through the operator it
 * stands for, as the program's call of it would (no dataplane memory then): the program's
 * delete or delete[] takes the block. Objects built before the array sites existed call the
 * nic_new_ ones for new[] too, which serve it alike unless the program's new[] and delete[] are
 * its own, not the standard's, which call new and delete. */
void *nic_new_site(size_t size, uint32_t site_id);
void *nic_new_array_site(size_t size, uint32_t site_id);
/* operator new(size, std::align_val_t), new(size, const std::nothrow_t &) and both together, and
 * the same of new[]. Each takes the operator's own arguments plus the id; the nothrow tag is
 * passed on to a replaced operator and ignored otherwise, and the nothrow variants return NULL
 * instead of throwing. */
void *nic_new_aligned_site(size_t size, size_t alignment, uint32_t site_id);
void *nic_new_nothrow_site(size_t size, const void *nothrow_tag, uint32_t site_id);
void *nic_new_aligned_nothrow_site(size_t size, size_t alignment, const void *nothrow_tag,
                                   uint32_t site_id);
void *nic_new_array_aligned_site(size_t size, size_t alignment, uint32_t site_id);
void *nic_new_array_nothrow_site(size_t size, const void *nothrow_tag, uint32_t site_id);
void *nic_new_array_aligned_nothrow_site(size_t size, size_t alignment, const void *nothrow_tag,
                                         uint32_t site_id);
/* Returns 0, or -EINVAL for an id out of range. */
int nic_site_set_enabled(uint32_t site_id, int enabled);
int nic_site_is_enabled(uint32_t site_id);

/* Hands this thread's empty dataplane pages back to their chunks and runs one pass of the chunk
 * reaper, so that chunks emptied by this thread are released without waiting for its next
 * dataplane call. Empty chunks are otherwise released NICMALLOC_RELEASE_DELAY_MS after they
 * empty, once the threads that allocated there come back to dataplane code. */
void nic_collect(void);

/* NIC_SINK(fn) or NIC_SINK(fn, "spec"): tells the LLVM pass (llvm-pass/) that fn sends data to
 * the NIC, so allocations reaching it become dataplane. spec = "ARG[:OFF[/STRIDE],...]" (default
 * "*": every pointer argument), e.g. "1:16,0" for a msghdr. Works on a bare declaration: it
 * emits a record in section .nic_sinks that the pass reads and deletes (a plain annotate
 * attribute is dropped on declarations without a body). */
struct nic_sink_record {
  void (*fn)(void);
  const char *spec;
};
#define NIC_SINK_CAT2_(a, b) a##b
#define NIC_SINK_CAT_(a, b) NIC_SINK_CAT2_(a, b)
#define NIC_SINK(...) NIC_SINK_(__VA_ARGS__, "*", )
#define NIC_SINK_(fn, spec, ...)                                                                   \
  __attribute__((used, section(".nic_sinks"))) static const struct nic_sink_record NIC_SINK_CAT_(  \
      nic_sink_record_, __COUNTER__) = {(void (*)(void))(fn), spec}

/* ---- Queries ---- */
/* Nonzero when p lies in the dataplane range (one compare; no lookup). */
int nic_is_dataplane(const void *p);

enum nic_region_kind {
  NIC_REGION_NONE = 0,
  NIC_REGION_ARENA = 1,  /* a dataplane chunk */
  NIC_REGION_CACHED = 2, /* a registration-cache region (memory outside the chunks) */
};

/* What a NIC needs to address [p, p+len): the registered region and the offset inside it. */
struct nic_region_ref {
  enum nic_region_kind kind;
  uint32_t chunk_index;    /* which dataplane chunk */
  void *region_base;       /* first byte of the registered region */
  size_t region_len;       /* its length */
  size_t offset;           /* p - region_base */
  uint32_t lkey;           /* local key of the registration (backend-specific) */
  uint32_t rkey;           /* remote key; 0 unless remote access was requested */
  uint64_t backend_handle; /* backend's own handle (io_uring buffer index, ...) */
  uint32_t cache_slot;     /* nonzero for NIC_REGION_CACHED: held until nic_unregister */
  /* The registration's generation in its cache slot, which nic_unregister checks with
   * cache_slot. It takes what was the struct's tail padding on 64-bit targets: the size and
   * every other member's offset are as before, and a copy of the whole struct carries it. 0 (a
   * reference code built before it existed copied member by member) is checked by cache_slot
   * alone, whose 10 bits of generation repeat after 1024 registrations in one slot. */
  uint32_t cache_gen;
};

/* Error codes returned (negated) by nic_translate and friends. */
#define NIC_ENOTDP 1001 /* not dataplane memory and no registration covers it */
#define NIC_ECROSS 1002 /* the range crosses the end of its region */
#define NIC_ERANGE 1003 /* length 0 or p+len overflows */

/* O(1) for dataplane memory and free of side effects: the region is the pin step holding the
 * range (each step is its own registration), and a step not yet registered reports lkey 0
 * (nic_register makes the registration). Returns 0 and fills *out, or -NIC_ENOTDP, -NIC_ECROSS
 * (the range crosses its step's end), -NIC_ERANGE, or -EINVAL when out is NULL.
 */
int nic_translate(const void *p, size_t len, struct nic_region_ref *out);

/* Access asked for at registration. Without a REMOTE flag no remote key is ever made. */
#define NIC_REG_LOCAL 0u
#define NIC_REG_LOCAL_WRITE 1u  /* the NIC may write here (receive buffers) */
#define NIC_REG_REMOTE_READ 2u  /* peers may read here (RDMA READ) */
#define NIC_REG_REMOTE_WRITE 4u /* peers may write here (RDMA WRITE) */

/* Finds or makes a registration covering [p, p+len) with the default backend
 * (NICMALLOC_BACKEND) and holds it until nic_unregister. Dataplane memory with local access uses
 * its pin step's registration, made on the step's first use; anything else, and any remote
 * access, goes through the registration cache at page granularity. Each request with remote
 * access, and each dataplane range across a step end (a block larger than a step, say), gets a
 * registration of its own, never cached or shared: it covers exactly the pages and rights asked
 * for, and nic_unregister deregisters it (and revokes its remote key). While a remote key lives,
 * a free of any block on its pages waits (as for nic_hold) until its nic_unregister; and pages
 * of it that leave the address space or are replaced (munmap, a mapping over them...) revoke it
 * at once, its nic_unregister then only letting go of the reference. Returns 0, or
 * -NIC_ERANGE, -NIC_ECROSS (a dataplane range that runs off its chunk's mapped memory), -EFAULT
 * (not mapped; or dataplane memory whose pin step, on its first registration, the program made
 * partly read-only: the step is faulted in then, and nothing in it is changed; or, on io_uring,
 * which pins every registration for writing, read-only memory and a shared writable mapping of a
 * disk file, which nic_sga_add copies), -ENOSPC (no room:
 * every registration the cache and the backend hold is in use, none idle to evict), -ENOMEM (remote
 * access: no memory to hold its pages), -ENODEV (no backend), -EINVAL (unknown access bits, out
 * NULL), -EPERM (memory that is not nicmalloc's, where nicmalloc is not the program's malloc: see
 * nic_free), or the backend's error (-NIC_ERANGE: len 0, a wrap, over a registration's or the
 * cache's size). */
int nic_register(const void *p, size_t len, unsigned access, struct nic_region_ref *out);
/* Once per nic_register. A reference whose registration is gone is refused (said once, counted
 * in registration_errors), even where a later registration took its cache slot: cache_slot and
 * cache_gen name the registration (a 32-bit generation of the slot), not only the slot: pass the
 * reference nic_register filled, or a copy of the whole struct. (A cached registration others
 * still share cannot tell whose reference an extra unregister drops.) */
void nic_unregister(const struct nic_region_ref *ref);

enum nic_page_kind {
  NIC_PAGE_NONE = 0, /* no chunk yet */
  NIC_PAGE_4K = 1,
  NIC_PAGE_THP = 2,
  NIC_PAGE_2M = 3,
  NIC_PAGE_1G = 4,
};
const char *nic_page_kind_name(enum nic_page_kind kind);

/* Statistics. The fields are declared once, with their units and meaning, in
 * nicmalloc_stats_fields.h (and listed in README.md). Set size before each call:
 *
 *   struct nic_stats s = NIC_STATS_INIT;   (or s.size = sizeof s)
 *   nic_get_stats(&s);
 *
 * size tells the library how much of the struct the caller has: a program built against an older
 * header (a shorter struct) is filled up to its size and not a byte beyond, and a newer header's
 * fields that an older library does not know are left as the caller set them. On return, size is
 * the number of bytes filled and version is the library's NIC_STATS_VERSION. size 0 (a struct
 * zeroed by memset or = {0}) is taken as NIC_STATS_SIZE_V1, the first layout that had size: safe
 * for any program built against a header that has it. */
/* 2: the step fields (pin_step...) appended; 3: the receive cap, dropped pages and peaks;
 * 4: the control decommits, the nudges and control_live; 5: fence_release_errors and
 * recv_no_buffer; 6: backend_start_refusals; 7: verbs_completion_errors; 8: dpdk_recv_dropped */
#define NIC_STATS_VERSION 8u
struct nic_stats {
  uint32_t size;    /* in: bytes the caller has (sizeof); out: bytes filled */
  uint32_t version; /* out: NIC_STATS_VERSION of the library */
#define NIC_STATS_DECLARE_(group, name, type, unit, label, help) type name;
  NIC_STATS_FIELDS(NIC_STATS_DECLARE_)
#undef NIC_STATS_DECLARE_
};
#ifdef __cplusplus
static inline nic_stats nic_stats_init_(void) {
  nic_stats s = {};
  s.size = sizeof s;
  return s;
}
#define NIC_STATS_INIT nic_stats_init_()
#else
#define NIC_STATS_INIT                                                                             \
  { .size = (uint32_t)sizeof(struct nic_stats) }
#endif
#define NIC_STATS_SIZE_V1 (offsetof(struct nic_stats, log_lines_dropped) + sizeof(uint64_t))
/* Fills *out as said above. Returns 0, or -EINVAL (out NULL, or size below 8: nothing is written;
 * each kind is said once on stderr). Safe from any thread, and calls no malloc; figures from other
 * threads are a moment old. */
int nic_get_stats(struct nic_stats *out);
/* Writes the readable report (the one NICMALLOC_STATS=1 prints at exit) to fd. */
void nic_print_stats(int fd);
/* Writes the statistics as one JSON object (what NICMALLOC_STATS=json prints at exit) to fd:
 * "version", then every field of nicmalloc_stats_fields.h by name; numbers are exact (bytes in
 * bytes), backend and page_kind are strings. */
void nic_print_stats_json(int fd);

/* ---- Scatter-gather and safety ----
 * A serializer collects (pointer, length) entries in a struct nic_sga (on its stack) and posts
 * them to an endpoint as one message. Each entry is resolved when added: dataplane memory uses
 * its pin step's registration (a range across steps is an entry per step, none of them copied
 * however short, so its bytes stay end to end), other memory the
 * registration cache, and entries shorter than NICMALLOC_COPY_THRESHOLD (default 512) or that
 * cannot be registered (io_uring: read-only memory, a disk file's shared mapping) are copied into
 * a pinned bounce area, of any length (a long entry takes a slab of its own). Adjacent entries are
 * coalesced; past the entry limit the smallest neighbours are copied together. From post until the
 * completion, free/realloc/delete of the memory an entry points to is deferred (page granularity:
 * see safety/README.md). */
#define NIC_EFREED 1004  /* the pointer is a block already freed */
#define NIC_ENOHOLD 1005 /* nic_release of a pointer with no nic_hold outstanding */

#define NIC_SGA_CAPACITY 64 /* entries a struct nic_sga can hold; the backend may allow fewer */

/* Internal to the library; exposed only so that the array can live on the caller's stack. */
struct nic_sga_entry {
  const void *addr;
  uint32_t len;
  uint32_t lkey;
  uint64_t handle;
  uint32_t cache_slot; /* registration-cache slot held, 0 = none; internal in arena ones */
  uint32_t kind;       /* enum nic_region_kind, or 3 for a bounce copy */
};
struct nic_sga {
  uint32_t count; /* entries in use */
  uint32_t max;   /* entry limit (nic_sga_init) */
  uint64_t bytes; /* payload bytes added */
  void *bounce;   /* bounce slabs owned by this array */
  struct nic_sga_entry entry[NIC_SGA_CAPACITY];
};

/* Where messages go; made by a backend-specific constructor (nic_sim_endpoint_create below). An
 * endpoint belongs to the process that made it: in a child of fork every call on one of the
 * parent's fails with -ENODEV, and the child makes its own, with backends of its own (README,
 * fork). */
struct nic_endpoint;
/* Runs once per posted message, when the NIC no longer reads its memory: status 0 or -errno. */
typedef void (*nic_sga_done_fn)(void *arg, int status);

/* max_entries 0 = the backend's limit (caps.max_sge), at most NIC_SGA_CAPACITY. Returns 0, or
 * -E2BIG when max_entries is above what the backend or the array allows, -ENODEV (no backend).
 * On error the array is left empty and unusable: nic_sga_add and nic_sga_post refuse it
 * (-EINVAL), nic_sga_reset does nothing. */
int nic_sga_init(struct nic_sga *sga, unsigned max_entries);
/* Returns 0, or -NIC_ERANGE (len 0, overflow, over 4 GiB), -EFAULT (range not mapped; or
 * dataplane memory whose pin step is partly read-only at its first registration, as
 * nic_register; or, past the limit, where two entries are copied into one, the memory of one
 * added before unmapped),
 * -NIC_ECROSS (dataplane memory over the end of its chunk, too long to copy), -NIC_EFREED (p is
 * the start of no live block: one freed, or never handed out), -E2BIG (over the limit and the
 * smallest neighbours too big to copy), -ENOMEM, -ENOSPC (the backend's registrations all in use:
 * README, backends), -EINVAL (sga not initialised). On error the array is unchanged. */
int nic_sga_add(struct nic_sga *sga, const void *p, size_t len);
/* Hands the entries to ep's backend; on success the array is empty again and its references
 * belong to the message until done(arg, status) runs. Entries are resolved against the default
 * backend (NICMALLOC_BACKEND) when added; an endpoint of another backend gets them resolved
 * again against its own here. On error (-EINVAL empty, -ENODEV, -E2BIG more entries than ep
 * takes: its backend's caps.max_sge, or fewer where the endpoint has a lower limit of its own,
 * a verbs QP created with a smaller max_send_sge or a dpdk port taking fewer segments per packet
 * (an entry over 64 KiB is several; a port configured without RTE_ETH_TX_OFFLOAD_MULTI_SEGS
 * takes one), a registration error of ep's backend, the backend's
 * -EINVAL/-ENOMEM, -EMSGSIZE when the entries together are longer than one message of ep's
 * backend (a verbs port's max_msg_sz; on io_uring 0x7ffff000 bytes, Linux's MAX_RW_COUNT, the
 * max_message of nic_endpoint_limits), -EFAULT when the memory of an entry was unmapped since
 * it was added, -NIC_EFREED
 * when the dataplane block of an entry was freed since and its step given back, -EAGAIN when ep
 * cannot take a message now: on dpdk, its tx queue is full and so is the backlog of
 * NIC_DPDK_BACKLOG posts (2048) waiting behind it, or every mbuf header is in use; on verbs, the
 * QP's send queue is full, or its send CQ has no room for one more completion; nic_poll, which
 * sends the backlog and completes what was sent, and post the same array again; -EAGAIN is
 * neither counted in sga_errors nor said) nothing was posted and the array holds the same ranges.
 * Posts to one endpoint are sent in post order, and none that returned 0 is dropped for want of
 * room: on dpdk it waits in the backlog, which nic_poll sends; on verbs it is on the QP's send
 * queue. An entry whose cached registration went stale meanwhile
 * (pages of its region unmapped or remapped) is registered anew first: no stale registration
 * reaches the NIC. */
int nic_sga_post(struct nic_sga *sga, struct nic_endpoint *ep, nic_sga_done_fn done, void *arg);
/* Drops the entries without posting. An array nic_sga_init did not set up is left as it is (and
 * said once, unless nic_sga_init left it so after an error). */
void nic_sga_reset(struct nic_sga *sga);
/* Progress and waiting. Posts move on without the program: the backend (its own thread for
 * io_uring, the NIC or the sim's engine) hands them to the transport and collects what comes
 * back. The program's functions, done() and receive(), run only from nic_poll and nic_wait, on
 * the calling thread. done() may also run from a fence that waits (nic_fence_write, a free or
 * write held under NICMALLOC_FENCE=wait|protect) and, under protect while a writer is held, on
 * nicmalloc's fence thread; receive() never does. The sim is the exception: a sim endpoint's
 * receive() runs on the sim engine's thread, and so does its done() with
 * NIC_EP_ENGINE_COMPLETIONS. They allocate as the calling thread does
 * (inside its nic_dataplane_begin scope, dataplane memory); what nicmalloc and the backends
 * allocate meanwhile for themselves never is. */
/* Runs up to max ready completions and received messages of every backend in use (all of
 * them when max <= 0) and returns how many ran: 0 when nothing was ready (never negative; no
 * backend open is 0 too). It never blocks. It also gives back this thread's share of free
 * pages another thread's malloc_trim or the reaper asked for, a bounded part of it per call
 * (README, malloc_trim), as its allocations would. */
int nic_poll(int max);
/* Runs what is ready, as nic_poll(0); when nothing is, blocks until something is or timeout_ms
 * milliseconds pass (-1: no limit). Returns how many ran, 0 at the timeout, -EINTR when a signal
 * interrupted the wait (its handler may not call free or malloc: completions run here, under
 * nicmalloc's locks), -EINVAL for a timeout below -1, -ENODEV while no backend is open (nic_wait,
 * nic_event_fd and nic_thread_event_fd open none: an endpoint's constructor, a registration or a
 * post does, so with nothing posted or received there is nothing to wait for; nic_thread_event_fd
 * works without one). The wait is a
 * cancellation point (pthread_cancel), as poll's is; no other nic_ call is one. Asked for free
 * pages meanwhile (nic_poll), the thread wakes, gives them back and waits on: nothing returns. */
int nic_wait(int timeout_ms);
/* A file descriptor that polls readable (POLLIN, EPOLLIN) while nic_poll has work, to put in the
 * program's poll or epoll set: on readiness call nic_poll (or nic_wait(0)). One for every
 * backend in use, those started after it was handed out included (an epoll set of their own
 * descriptors). Do not read, write or close it: nicmalloc clears it when nothing is left.
 * Level-triggered; with EPOLLET poll until nic_poll returns 0. Returns the fd, -ENODEV while no
 * backend is open (as nic_wait), or -ENOSYS while a backend in use has none (verbs, dpdk): then
 * nic_wait waits in short sleeps. Should such a backend start after the fd was handed out, the fd
 * polls readable every millisecond from then on (said once on stderr), so that a program asleep on
 * it still polls that backend. */
int nic_event_fd(void);
/* nic_event_fd for an event loop that calls nic_poll on its own thread: a descriptor that polls
 * readable while nic_poll has work, as nic_event_fd's does, and also while the calling thread
 * owes free pages another thread's malloc_trim or the reaper asked for (nic_poll gives them
 * back a bounded part per call, and the descriptor stays readable until the last part, edge-
 * triggered or not). A thread that waits in its own poll on nic_event_fd is not woken for them.
 * One per thread, the same on every call; poll it on this thread only (another thread's polls
 * would not answer for this one, and would find it readable until this one did). Do not read,
 * write or close it: nicmalloc closes it when the thread exits (unless its number names another
 * descriptor by then: one the program closed is not closed again). It needs no backend: with
 * none open it polls for the thread's asks alone, and backends that open later join it. Returns
 * the fd; -ENOSYS as nic_event_fd; -ESRCH from a thread that is exiting; or the -errno of making
 * its eventfd or epoll set (-EMFILE). */
int nic_thread_event_fd(void);

/* Keeps the nicmalloc block holding p (a received buffer, say) from being freed and reused
 * until the matching nic_release: a free of it meanwhile is deferred. Holds nest. Returns 0,
 * -EINVAL (NULL or not nicmalloc memory), -NIC_EFREED (p is the start of no live block: one
 * freed, or never handed out), -ENOMEM; nic_release returns -NIC_ENOHOLD without a hold on
 * exactly p. Only a block's start is checked: a pointer into a block freed since is held, and
 * holds nothing the allocator will not hand out again. */
int nic_hold(const void *p);
int nic_release(const void *p);

/* NICMALLOC_FENCE=wait (default): returns 0 once no posted entry overlaps the pages of
 * [p, p+len), polling the backend meanwhile; -ETIMEDOUT after NICMALLOC_FENCE_TIMEOUT_MS
 * (default 5000); -NIC_ERANGE for len 0 or overflow. off: returns 0 at once. */
int nic_fence_write(const void *p, size_t len);

/* ---- Receiving ----
 * Every backend receives the same way. A message (a datagram, a DPDK packet, a verbs receive, or
 * what a stream socket had ready, up to one receive buffer) lands in a receive buffer of
 * dataplane memory, written there by the NIC or the kernel, and is handed to receive(arg, data,
 * len) from nic_poll (or nic_wait). The buffer goes back to the NIC when receive returns, unless
 * the program nic_hold()s a pointer into it: then at the matching nic_release. Never free() it.
 * A zero-copy reply posted from a received buffer must hold it until the post's done() runs
 * (examples/echo_uring.c): a post alone does not keep the buffer from the NIC.
 * While every buffer of an endpoint is held, the endpoint stops receiving and the transport
 * pushes back (TCP closes its window; datagrams and packets beyond the kernel's or the device's
 * queue are dropped by them): counted in recv_stalls, said once on stderr. Over all endpoints
 * (not sim's), once the held bytes reach NICMALLOC_RECV_HELD_MAX a message is not handed over:
 * it waits in its buffer (recv_capped, recv_waiting; said once), so its endpoint soon runs out
 * of buffers and pushes back the same way, until releases bring the held bytes under the cap;
 * then nic_poll hands the waiting messages over, in order, and nic_wait / nic_event_fd wake for
 * them. Calling an endpoint's destroy gives its waiting messages back undelivered, even when
 * the destroy then returns -EBUSY (posts or holds still out): the program has let go of them.
 * The end of a stream, or its failure, is one last call with data NULL and len 0;
 * nic_endpoint_status tells which. */
typedef void (*nic_receive_fn)(void *arg, void *data, size_t len);
/* Starts delivering ep's messages to receive (any endpoint kind; a sim endpoint's receiver is
 * replaced). 0, -EINVAL (no such endpoint, or receive NULL), -EALREADY (receiving already, with
 * another function), -EOPNOTSUPP (the backend cannot receive), -ENOMEM (no dataplane memory for
 * the buffers), or the transport's -errno. */
int nic_endpoint_receive(struct nic_endpoint *ep, nic_receive_fn receive, void *arg);
/* 0 while ep is open (or receiving never started), 1 once its peer ended the stream, or the
 * -errno that ended its receiving (-ECONNRESET, say); -EINVAL for ep NULL. */
int nic_endpoint_status(const struct nic_endpoint *ep);
/* What one post to ep may carry, for a program that sends a longer message as several posts in
 * a row (include/nicmalloc/sg_post.h does). *max_entries: entries per post, ep's own limit (its
 * backend's caps.max_sge, or lower: a verbs QP's max_send_sge, a dpdk port's segments per
 * packet), within the default backend's (nic_sga_init fills the array against it) and
 * NIC_SGA_CAPACITY: nic_sga_init(sga, *max_entries) makes an array ep takes. On dpdk an entry
 * over 64 KiB is several segments, so a post of that many entries may still get -E2BIG.
 * *max_message: the bytes one post to ep may carry that a nicmalloc receiver of ep's kind takes
 * whole: 65536 on verbs (nic_endpoint_receive's buffers); on uring over TCP 0x7ffff000, the most
 * one send takes (Linux's MAX_RW_COUNT; the stream joins any posts), over UDP one datagram: 65507
 * bytes (an IPv4 datagram's payload), or NICMALLOC_RECV_BUFFER_SIZE when less, a receive buffer,
 * past which a nicmalloc receiver drops it (a message cut into posts arrives as several datagrams);
 * on dpdk UINT32_MAX, a packet's length (a packet whose entries lie end to end, as one entry's do,
 * is received in place; one of several entries is copied into one receive buffer, or into a
 * dataplane block of its length past 4 KiB; a port's MTU bounds its packets); SIZE_MAX on sim.
 * Either pointer may be NULL. 0, -EINVAL (ep NULL), -ENODEV (no backend; an endpoint of the parent
 * process in a child of fork). */
int nic_endpoint_limits(const struct nic_endpoint *ep, unsigned *max_entries, size_t *max_message);
/* A number unique to ep within the process, for a program that keeps state per endpoint beyond
 * its life: an endpoint's address may be given to one made after it is destroyed, its number is
 * never given to another endpoint (an endpoint handed out twice, a dpdk queue asked for again
 * while open, keeps its number; once destroyed, one made anew gets a new one). Stable while ep
 * lives, and in a child of fork for the endpoints it inherited. 0 for NULL, and for an endpoint
 * no constructor of nicmalloc.h made or one already destroyed. Cheap: asked again for the
 * endpoint it last asked for, a thread takes no lock while no endpoint was made or destroyed
 * meanwhile. */
uint64_t nic_endpoint_id(const struct nic_endpoint *ep);

/* The sim backend's endpoint: each message is received into a fresh dataplane buffer that is
 * freed when receive returns, unless receive nic_hold()s a pointer into it. A message no such
 * buffer can be had for is dropped, not handed to receive: its post completes with -ENOMEM
 * (counted in recv_no_buffer). */
#define NIC_EP_ENGINE_COMPLETIONS 1u /* completions run on the NIC's thread, not from nic_poll */
struct nic_endpoint *nic_sim_endpoint_create(nic_receive_fn receive, void *arg, unsigned flags);
/* 0, or -EBUSY while messages to ep are in flight, -EINVAL for an unknown endpoint. */
int nic_sim_endpoint_destroy(struct nic_endpoint *ep);

/* The other backends' endpoints. Each constructor starts its backend beside those in use if it
 * does not run yet (NICMALLOC_BACKEND names only the default one), and returns NULL with errno
 * (said on stderr once per kind, counted in endpoint_errors) when that backend cannot run here
 * (ENODEV) or its argument is not usable. Each destroy returns 0, -EBUSY while posts on the
 * endpoint have not completed (nic_poll until they have), while a received buffer of it is held,
 * or while its receive function runs, on another thread or from inside it (the end call
 * included: destroy after it returns), or -EINVAL for an endpoint its constructor did not make.
 * done() runs from nic_poll (or a fence) once the NIC, or the kernel, no longer reads the
 * memory. */

/* io_uring: a connected TCP, UDP or UDP-Lite socket (AF_INET, AF_INET6), which stays the caller's:
 * destroy the endpoint before closing it (closed first, the socket stays open, and posts go to
 * it, until the destroy; never to a socket that gets its number). A post is one SEND_ZC (one entry)
 * or SENDMSG_ZC from the registered buffers; done() runs after the kernel's zero-copy notification.
 * On a stream, posts reach the socket whole and in post order; on a datagram socket each post is
 * one datagram (longer than the socket takes: done() gets -EMSGSIZE). A plain send, sendto,
 * sendmsg, sendmmsg, write or writev on the socket waits until every post on it is in the
 * socket, so its bytes follow them; non-blocking (O_NONBLOCK or MSG_DONTWAIT), it fails with
 * EAGAIN meanwhile. nic_endpoint_receive on it receives into NICMALLOC_RECV_BUFFERS buffers of
 * NICMALLOC_RECV_BUFFER_SIZE bytes (default 32 of 64 KiB); a datagram longer than a buffer is
 * dropped and said once, never handed over cut. errno: ENODEV, EBADF, ENOTSOCK, EPROTOTYPE
 * (neither stream nor datagram), EOPNOTSUPP (a socket the kernel sends nothing zero-copy from:
 * another family (AF_UNIX), another protocol (MPTCP, SCTP, a ping socket), or kernel TLS, TCP_ULP
 * "tls"; the line said names which), ENOTCONN, EMFILE (as many endpoints open as RLIMIT_NOFILE,
 * at most 16384). A socket that takes kernel TLS or joins a BPF sockmap after the endpoint was
 * made loses zero-copy send then: its posts complete with -EOPNOTSUPP. On TCP, zero-copy sends
 * can stall for good while the peer's receive window stays under one segment (a receiver with a
 * SO_RCVBUF of a few KiB, against loopback's 64 KiB MSS): Linux does so with plain sendmsg and
 * MSG_ZEROCOPY too, so give the receiver room for several segments. */
struct nic_endpoint *nic_uring_endpoint_create(int sockfd);
int nic_uring_endpoint_destroy(struct nic_endpoint *ep);

/* DPDK: tx queue queue_id of a started port; each post is one mbuf chain whose segments point
 * into the registered memory, and done() runs once the driver (or, on net_ring, the receiver)
 * frees its last segment. NIC_DPDK_DEFAULT_PORT with queue 0: the port nicmalloc started from
 * NICMALLOC_DPDK_VDEV, or the one the application attached (nic_dpdk_attach, below).
 * Asking twice for one queue gives the same endpoint; destroy each. errno: ENODEV, EINVAL (no
 * such port or tx queue), ENOENT (no default port), EOPNOTSUPP (a port that may DMA, a NIC or a
 * vdev such as net_bonding, probed after the backend opened with ports whose drivers reach memory
 * through the CPU only: README, backends; a port or tx queue configured with
 * RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE, whose driver would never let a post complete). It receives
 * (nic_endpoint_receive) from rx queue queue_id: on the ports nicmalloc starts, into its pool of
 * dataplane mbufs; on net_ring, in the sender's very memory. A packet whose segments are scattered
 * is copied into one buffer; one no buffer of its length can be had for (longer than a chunk) is
 * dropped, counted in dpdk_recv_dropped, and its post, when this process sent it, completes with
 * -ENOMEM. A post the tx queue has no room for waits in the endpoint's backlog, up to
 * NIC_DPDK_BACKLOG posts, and every later post waits behind it: nic_poll and later posts hand the
 * backlog to the queue first, so the packets leave in post order. Past that, or with every mbuf
 * header in use, nic_sga_post refuses the message with -EAGAIN, nothing posted. A destroy answers
 * -EBUSY while a received buffer is held or posts are in flight, those in the backlog included,
 * and the first destroy that succeeds stops receiving. */
#define NIC_DPDK_BACKLOG 2048u
#define NIC_DPDK_DEFAULT_PORT 0xffffu
struct nic_endpoint *nic_dpdk_endpoint_create(uint16_t port_id, uint16_t queue_id);
int nic_dpdk_endpoint_destroy(struct nic_endpoint *ep);
/* For an application that runs DPDK's EAL itself: port_id, which it configured and started with
 * tx queue queue_id, becomes the default port (NIC_DPDK_DEFAULT_PORT), and the backend starts no
 * EAL and no port of its own. Call it after rte_eal_init and rte_eth_dev_start, before the
 * backend opens (the first dataplane registration under NICMALLOC_BACKEND=dpdk, or the first
 * nic_dpdk_endpoint_create): the backend then opens on the application's EAL. It does not open
 * the backend. Called after, it replaces the default endpoint (endpoints handed out before stay
 * on their queue). 0, -EINVAL (no such port: EAL not started, or no such tx queue once the backend
 * is open: the default endpoint unchanged), -ENODEV (the dpdk backend is not built, cannot be
 * loaded, or a child of fork whose parent started it); counted in endpoint_errors, said once. */
int nic_dpdk_attach(uint16_t port_id, uint16_t queue_id);

/* RDMA verbs: qp is a struct ibv_qp * created in the protection domain nic_verbs_get_pd()
 * returns (a struct ibv_pd *; its context is the device nicmalloc opened) and connected by the
 * application. A post is one signaled IBV_WR_SEND of the entries; done() runs when its work
 * completion is polled from the QP's send CQ, which must carry only nicmalloc's posts. errno:
 * ENODEV, EINVAL (no QP, or one in another protection domain). nic_endpoint_receive posts up to
 * 32 buffers of 64 KiB (a longer message ends receiving with -EMSGSIZE) on the QP's own receive
 * queue, from INIT on; an RC or UC QP without an SRQ, whose receive CQ carries only nicmalloc's
 * receives and is not a send CQ. Destroying a receiving endpoint moves its QP to the error state
 * (the NIC gives posted buffers back only so): -EBUSY until nic_poll has reaped them.
 * The device context's asynchronous events (ibv_get_async_event) are the application's:
 * nicmalloc neither reads them nor changes their descriptor's flags, and the kernel keeps those
 * nobody reads (one per connection established, port changes) for the context's life, so a
 * long-running program that connects often should read and acknowledge them. What tells a program
 * that a QP nicmalloc posts on failed is then its posts' and receives' completions in error (done()
 * and the receiver get a negative errno; counted in verbs_completion_errors, each status said once
 * on stderr). Under NICMALLOC_VERBS_ASYNC_EVENTS=1 the context's asynchronous events are
 * nicmalloc's instead: nic_poll reads them all without waiting, says a CQ or QP in error or a
 * failed device once, and drops the others (COMM_EST, SRQ_LIMIT_REACHED, port events...), so the
 * application must not read them itself. */
void *nic_verbs_get_pd(void);
struct nic_endpoint *nic_verbs_endpoint_create(void *qp);
int nic_verbs_endpoint_destroy(struct nic_endpoint *ep);

#ifdef __cplusplus
}
#endif
#endif /* NICMALLOC_H */
