/* Shared by uring.c (ring, open/close, endpoints), uring_buffers.c (the fixed-buffer table),
 * uring_send.c (post, poll), uring_recv.c (receiving), uring_reqs.c (request memory and queues)
 * and uring_progress.c (the progress thread, the event fds, plain sends kept behind posts). One
 * mutex guards everything below: liburing's submission and completion queues are not
 * thread-safe.
 *
 * CQEs are reaped by poll() and by the progress thread alike, so reaping (nic_uring_advance_locked)
 * must never call the program: whatever is due for it (done(), a received message) is queued for
 * poll(), and nic_uring_work_signal_locked() makes the event fd readable. */
#ifndef NIC_URING_INTERNAL_H
#define NIC_URING_INTERNAL_H

#include "pool.h"
#include "uring.h"

#include <liburing.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define URING_MAX_SLOTS 16384u      /* the kernel's IORING_MAX_REG_BUFFERS */
#define URING_MAX_BYTES (1ul << 30) /* the kernel's largest fixed buffer */
#define URING_MAX_SGE 64u           /* well under IOV_MAX; the SG layer takes the min */
#define URING_MAX_MSG 0x7ffff000ul  /* MAX_RW_COUNT: a longer send would be cut short */
#define URING_DEFAULT_ENTRIES 256u

/* A CQE's user_data: a send's struct uring_req (pool memory, 8-aligned, low bits clear), a
 * receive's struct uring_rx with URING_UD_RECV in its low bits, or URING_UD_QUIET for a request
 * whose completion says nothing (a cancel). 0 is open's probe. */
#define URING_UD_RECV 1u
#define URING_UD_QUIET 2u
#define URING_UD_TAGS 7u

/* Kernel 6.2 uapi that liburing 2.3's copy of io_uring.h predates. */
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

struct uring_slot {
  uintptr_t base;
  size_t len;
  uint32_t inflight; /* entries of posts not yet notified */
  bool live;         /* registered and usable; false while being (de)registered */
};

struct uring_req {
  struct uring_req *next;
  struct nic_endpoint *ep; /* NULL once the kernel is done with the memory */
  nic_completion_fn done;
  void *arg;
  uint64_t seq; /* post order on the endpoint */
  int status;
  bool sent;         /* no more sends for this post: status is final */
  unsigned notifs;   /* notifications still to come, one per send that pinned memory */
  bool lead;         /* first of its batch: a cancellation was not caused by another send */
  unsigned cancels;  /* cancelled as the lead, in a row, without sending anything */
  bool fixed_vec;    /* its last send was a fixed-buffer SENDMSG_ZC */
  bool unfixed;      /* the kernel could not map it as one: its sends name plain memory */
  bool copying;      /* a datagram zero-copy could not carry: sent again copied (on_sent) */
  unsigned n, first; /* entries; the first one not entirely sent */
  size_t total, off; /* message bytes; bytes sent so far */
  uint32_t slot[URING_MAX_SGE];
  struct msghdr msg; /* read by the kernel at submission; kept until completion anyway */
  struct iovec iov[URING_MAX_SGE]; /* advanced past what has been sent */
};

/* FIFO of requests linked through next. */
struct uring_queue {
  struct uring_req *head, *tail;
};

struct nic_endpoint {
  struct uring_backend *ub;
  int fd;
  int file;          /* its slot in the ring's file table, or -1: sends name fd */
  unsigned sending;  /* submitted whose send CQE has not arrived */
  unsigned inflight; /* accepted and not yet notified */
  bool dgram;        /* one datagram per post: never resumed, a failure breaks only that post */
  bool broken;       /* a message went out partly: later ones would corrupt the stream */
  bool kicked;       /* on the backend's kick list */
  struct nic_endpoint *ep_next; /* the backend's endpoints (uring_progress.c: plain sends) */
  uint64_t next_seq;
  struct nic_endpoint *kick_next;
  struct uring_queue backlog;
  struct uring_rx *rx; /* receiving (uring_recv.c), or NULL */
};

struct uring_backend {
  struct nic_backend pub;
  pthread_mutex_t lock;
  struct io_uring ring;
  bool vectored_fixed; /* SENDMSG_ZC takes IORING_RECVSEND_FIXED_BUF */
  bool report_usage;   /* IORING_SEND_ZC_REPORT_USAGE */
  uint32_t nslots;
  struct uring_slot *slots;
  uint64_t *free_map;        /* bit set = slot free */
  struct nic_pool reqs;      /* struct uring_req, under lock */
  struct uring_queue ready;  /* done() due, run by poll() */
  struct nic_endpoint *kick; /* endpoints whose backlog poll() must submit */
  unsigned endpoints;
  uint32_t nfiles;           /* the ring's file table: one slot per endpoint (0: none, raw fds) */
  uint64_t *files_map;       /* bit set = file slot in use */
  struct uring_rx *rx_all;   /* receiving endpoints (uring_recv.c) */
  struct uring_rx *rx_ready; /* those with something for their receiver, for poll() */
  struct uring_rx *rx_ready_tail;
  bool rx_rearm;      /* a receive could not be submitted (queue full): poll() retries */
  uint16_t next_bgid; /* next provided-buffer group id to try */
  struct nic_uring_stats stats;
  /* uring_progress.c */
  int ring_efd;          /* registered with the ring: every CQE counts it up; the thread's */
  int work_efd;          /* readable while poll() has work: nic_event_fd */
  bool work_signalled;   /* work_efd written since poll() last found nothing left */
  bool progress_stop;    /* the thread ends at its next wake */
  bool progress_running; /* the thread was started */
  pthread_t progress;    /* reaps and submits; never calls the program */
  pthread_cond_t sent;   /* after each reaping by the thread: sends may have reported */
  unsigned send_waiters; /* plain sends waiting on sent */
  struct nic_endpoint *ep_list;
  struct uring_backend *next_open; /* every open uring backend, for plain sends */
  pid_t pid;                       /* the process that opened it: a child never waits */
};

static inline struct uring_backend *uring_of(struct nic_backend *b) {
  return (struct uring_backend *)b->priv;
}

/* uring_buffers.c */
int nic_uring_table_init(struct uring_backend *ub);
void nic_uring_table_fini(struct uring_backend *ub);
int nic_uring_reg(struct nic_backend *b, void *base, size_t len, unsigned access,
                  struct nic_registration *out);
int nic_uring_dereg(struct nic_backend *b, struct nic_registration *reg);
/* Locked: the slot of an entry that lies inside a live registration, or -1. */
int64_t nic_uring_check_locked(struct uring_backend *ub, const struct nic_sge *sge);

/* uring_send.c */
int nic_uring_post(struct nic_backend *b, struct nic_endpoint *ep, const struct nic_sge *sge,
                   unsigned n, nic_completion_fn done, void *arg);
int nic_uring_poll(struct nic_backend *b, int max);
/* Reaps CQEs, then submits the backlogs of endpoints whose batch is done. Never calls done(). */
void nic_uring_advance_locked(struct uring_backend *ub);
/* True while an endpoint has posts not yet wholly handed to the socket (queued, or sending). */
bool nic_uring_unsent_locked(const struct nic_endpoint *ep);

/* uring_progress.c */
/* Event fds and the progress thread; 0 or -errno. Stop before the ring goes. */
int nic_uring_progress_start(struct uring_backend *ub);
void nic_uring_progress_stop(struct uring_backend *ub);
/* Work for poll() was queued: make the event fd readable (one write until poll() clears it). */
void nic_uring_work_signal_locked(struct uring_backend *ub);
/* poll() found nothing more to run: clear the event fd. */
void nic_uring_work_clear_locked(struct uring_backend *ub);
int nic_uring_event_fd(struct nic_backend *b);
void nic_uring_ep_link_locked(struct uring_backend *ub, struct nic_endpoint *ep);
void nic_uring_ep_unlink_locked(struct uring_backend *ub, struct nic_endpoint *ep);

/* Takes the CQEs there are (a bounded number of rounds) and dispatches them. */
void nic_uring_reap_locked(struct uring_backend *ub);

/* uring_recv.c */
/* The bytes of one receive buffer (NICMALLOC_RECV_BUFFER_SIZE, whole pages): a longer datagram
 * is dropped. */
size_t nic_uring_rx_buffer_bytes(void);
int nic_uring_endpoint_receive(struct nic_backend *b, struct nic_endpoint *ep,
                               nic_endpoint_rx_fn rx, void *arg);
void nic_uring_rx_recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token);
/* From the reaping loop: true when cqe was a receive's or a quiet one (then it is dealt with). */
bool nic_uring_rx_cqe_locked(struct uring_backend *ub, const struct io_uring_cqe *cqe);
/* Submits again the receives that found the submission queue full (poll() and the progress
 * thread). */
void nic_uring_rx_rearm_locked(struct uring_backend *ub);
/* From poll(), unlocked: hands what the receives got to their receivers; how many calls ran. */
int nic_uring_rx_deliver(struct uring_backend *ub);
/* From endpoint close, locked (it may let go of the lock while it waits): stops ep's receiving,
 * 0, or -EBUSY while buffers are out with the program, when the receive would not end, or when
 * a post on ep came while the lock was let go (ep then receives as before). On 0 the receive is
 * detached from ep, with no post in flight on it and none able to come before the caller lets
 * go of the lock; nic_uring_rx_free(what it left in *rx) unlocked after. */
int nic_uring_rx_stop_locked(struct uring_backend *ub, struct nic_endpoint *ep,
                             struct uring_rx **rx);
/* Tests only: called by the stop above with the lock let go, once its cancel is in the kernel,
 * so that a test can post where a post may come during the stop's waits. */
extern void (*nic_uring_rx_stop_hook)(struct nic_endpoint *ep)
    __attribute__((visibility("hidden")));
void nic_uring_rx_free(struct uring_rx *rx);

/* uring_files.c */
void nic_uring_files_init(struct uring_backend *ub);
void nic_uring_files_fini(struct uring_backend *ub);
/* Registers fd: its slot, -1 without a table, or -errno (EMFILE: table full). */
int nic_uring_file_add_locked(struct uring_backend *ub, int fd);
void nic_uring_file_remove_locked(struct uring_backend *ub, int slot);

/* uring_reqs.c */
struct uring_req *nic_uring_req_alloc_locked(struct uring_backend *ub);
void nic_uring_req_free_locked(struct uring_backend *ub, struct uring_req *req);
void nic_uring_requests_fini(struct uring_backend *ub);
void nic_uring_push(struct uring_queue *q, struct uring_req *req);
struct uring_req *nic_uring_pop(struct uring_queue *q);
void nic_uring_requeue(struct uring_queue *q, struct uring_req *req); /* in seq order */

#endif
