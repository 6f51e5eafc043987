/* Progress without the program: posts past the first of a batch, sends cut short, and the
 * completions they end in move on while the program does something else, not only when it
 * calls nic_poll.
 *
 * The ring's eventfd (io_uring_register_eventfd) counts every CQE, sends and receives alike. A
 * thread per backend waits on it and, under the backend's lock, reaps (the results and
 * notifications of sends) and submits the next batch of each endpoint whose batch is done. It
 * never calls the program: done() and receive functions stay on poll(), so they run on the
 * program's threads, when it asks. What reaping queued for poll() makes a second eventfd
 * readable, the one nic_event_fd hands out (written once until poll() finds nothing left and
 * clears it; the program never reads it).
 *
 * The post path does not change: it submits its own batch when the endpoint is idle, as before.
 * The thread costs one wake-up (an eventfd read and the lock) per burst of CQEs; completions
 * cost one eventfd write per burst until poll() runs them.
 *
 * Plain sends (send_order.h): a send, write or their vector forms on a socket of an endpoint
 * that still has posts queued or in a send whose result has not come back waits until those
 * posts are all in the socket (their send CQEs, not their notifications), then goes; on a
 * non-blocking socket, or with MSG_DONTWAIT, it fails with EAGAIN instead. The thread wakes the
 * waiters after each reaping. The wait is a cancellation point, as the send is: a cancelled
 * waiter lets go of both locks on its way out.
 *
 * The event descriptors are written and read under the lock, on the program's threads too (its
 * posts and polls): with calls that never act on a pending cancel (nocancel.h). */
#define _GNU_SOURCE
#include "uring_internal.h"

#include "forklock.h"
#include "log.h"
#include "nocancel.h"
#include "send_order.h"
#include "thread.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define FD_FILTER 65536 /* fds below this are tested without a lock */

static pthread_rwlock_t open_lock = PTHREAD_RWLOCK_INITIALIZER; /* write: open and close */
static struct uring_backend *open_list;
static unsigned char endpoint_fds[FD_FILTER]; /* endpoints per fd, saturating */
static unsigned linked;                       /* endpoints counted in nic_send_order_watch */

void nic_uring_work_signal_locked(struct uring_backend *ub) {
  if (ub->work_signalled) return;
  ub->work_signalled = true;
  nic_eventfd_signal_nocancel(ub->work_efd);
}

void nic_uring_work_clear_locked(struct uring_backend *ub) {
  if (!ub->work_signalled) return;
  ub->work_signalled = false;
  nic_eventfd_take_nocancel(ub->work_efd); /* non-blocking: EAGAIN if already clear */
}

int nic_uring_event_fd(struct nic_backend *b) {
  return uring_of(b)->work_efd;
}

static void *progress_main(void *arg) {
  struct uring_backend *ub = arg;
  for (;;) {
    eventfd_t n;
    if (eventfd_read(ub->ring_efd, &n) < 0 && errno != EINTR) {
      nic_log_warn_once("uring backend: its progress thread cannot wait (%s): posts move on only "
                        "from nic_poll",
                        strerror(errno));
      return NULL;
    }
    pthread_mutex_lock(&ub->lock);
    const bool stop = ub->progress_stop;
    if (!stop) {
      ub->stats.progress_wakeups++;
      nic_uring_advance_locked(ub);
    }
    if (ub->send_waiters) pthread_cond_broadcast(&ub->sent);
    pthread_mutex_unlock(&ub->lock);
    if (stop) return NULL;
  }
}

/* A plain send on fd waits here for ub's posts on it. */
static bool unsent_on_locked(struct uring_backend *ub, int fd) {
  for (struct nic_endpoint *ep = ub->ep_list; ep; ep = ep->ep_next)
    if (ep->fd == fd && nic_uring_unsent_locked(ep)) return true;
  return false;
}

static bool nonblocking(int fd, int flags) {
  if (flags & MSG_DONTWAIT) return true;
  const int fl = fcntl(fd, F_GETFL);
  return fl >= 0 && (fl & O_NONBLOCK);
}

static void wait_sent_cancelled(void *arg) {
  struct uring_backend *ub = arg;
  ub->send_waiters--;
  pthread_mutex_unlock(&ub->lock); /* pthread_cond_wait took it again before unwinding */
}

/* Apart from the loop: pthread_cleanup_push is a setjmp in C. */
static void wait_for_reaping_locked(struct uring_backend *ub) {
  ub->send_waiters++;
  pthread_cleanup_push(wait_sent_cancelled, ub);
  pthread_cond_wait(&ub->sent, &ub->lock);
  pthread_cleanup_pop(0);
  ub->send_waiters--;
}

static int wait_sent(struct uring_backend *ub, int fd, int flags) {
  int rc = 0;
  pthread_mutex_lock(&ub->lock);
  while (unsent_on_locked(ub, fd)) {
    if (nonblocking(fd, flags)) {
      rc = -EAGAIN;
      break;
    }
    wait_for_reaping_locked(ub);
  }
  pthread_mutex_unlock(&ub->lock);
  return rc;
}

/* A child of fork shares the parent's rings: the parent's posts are not the child's to wait for,
 * and the parent's locks may have been held at the fork. */
static void wait_sent_everywhere(int fd, int flags, int *rc) {
  const pid_t me = getpid();
  for (struct uring_backend *ub = open_list; ub && !*rc; ub = ub->next_open)
    if (ub->pid == me) *rc = wait_sent(ub, fd, flags);
}

static void open_lock_drop(void *unused) {
  (void)unused;
  pthread_rwlock_unlock(&open_lock);
}

static int before_plain_send(int fd, int flags) {
  if (fd >= 0 && fd < FD_FILTER && !__atomic_load_n(&endpoint_fds[fd], __ATOMIC_ACQUIRE)) return 0;
  int rc = 0;
  pthread_rwlock_rdlock(&open_lock);
  pthread_cleanup_push(open_lock_drop, NULL);
  wait_sent_everywhere(fd, flags, &rc);
  pthread_cleanup_pop(1);
  return rc;
}

void nic_uring_ep_link_locked(struct uring_backend *ub, struct nic_endpoint *ep) {
  ep->ep_next = ub->ep_list;
  ub->ep_list = ep;
  if (ep->fd >= 0 && ep->fd < FD_FILTER && endpoint_fds[ep->fd] < 255)
    __atomic_add_fetch(&endpoint_fds[ep->fd], 1, __ATOMIC_RELEASE);
  __atomic_add_fetch(&linked, 1, __ATOMIC_RELAXED);
  nic_send_order_watch(1);
}

void nic_uring_ep_unlink_locked(struct uring_backend *ub, struct nic_endpoint *ep) {
  for (struct nic_endpoint **at = &ub->ep_list; *at; at = &(*at)->ep_next)
    if (*at == ep) {
      *at = ep->ep_next;
      break;
    }
  if (ep->fd >= 0 && ep->fd < FD_FILTER && endpoint_fds[ep->fd] < 255)
    __atomic_sub_fetch(&endpoint_fds[ep->fd], 1, __ATOMIC_RELEASE);
  __atomic_sub_fetch(&linked, 1, __ATOMIC_RELAXED);
  nic_send_order_watch(-1);
}

/* fork: the child has no progress thread and may not touch the parent's rings (backend.h), and
 * a parent thread may have held open_lock: its plain sends go straight out, at one load. */
static void after_fork_reset(void) {
  open_list = NULL;
  open_lock = (pthread_rwlock_t)PTHREAD_RWLOCK_INITIALIZER;
  memset(endpoint_fds, 0, sizeof endpoint_fds);
  nic_send_order_watch(-(int)linked);
  linked = 0;
}
NIC_FORKLOCK_CUSTOM(uring_open, NIC_FORK_URING_OPEN, NULL, NULL, after_fork_reset, NULL);

int nic_uring_progress_start(struct uring_backend *ub) {
  ub->ring_efd = eventfd(0, EFD_CLOEXEC);
  ub->work_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int rc = ub->ring_efd < 0 || ub->work_efd < 0 ? -errno : 0;
  if (!rc) rc = io_uring_register_eventfd(&ub->ring, ub->ring_efd);
  if (!rc) rc = -pthread_cond_init(&ub->sent, NULL);
  if (!rc) {
    rc = -nic_own_thread_create(&ub->progress, "nic-uring", progress_main, ub, NULL);
    if (rc) pthread_cond_destroy(&ub->sent);
  }
  if (rc) {
    if (ub->ring_efd >= 0) nic_close_nocancel(ub->ring_efd);
    if (ub->work_efd >= 0) nic_close_nocancel(ub->work_efd);
    ub->ring_efd = ub->work_efd = -1;
    return rc;
  }
  ub->progress_running = true;
  ub->pid = getpid();
  nic_send_order_set(before_plain_send);
  pthread_rwlock_wrlock(&open_lock);
  ub->next_open = open_list;
  open_list = ub;
  pthread_rwlock_unlock(&open_lock);
  return 0;
}

void nic_uring_progress_stop(struct uring_backend *ub) {
  if (!ub->progress_running) return;
  const int cancel = nic_cancel_off(); /* the join waits: not for a cancel to cut short */
  pthread_rwlock_wrlock(&open_lock);
  for (struct uring_backend **at = &open_list; *at; at = &(*at)->next_open)
    if (*at == ub) {
      *at = ub->next_open;
      break;
    }
  pthread_rwlock_unlock(&open_lock);
  pthread_mutex_lock(&ub->lock);
  ub->progress_stop = true;
  pthread_mutex_unlock(&ub->lock);
  nic_eventfd_signal_nocancel(ub->ring_efd);
  pthread_join(ub->progress, NULL);
  ub->progress_running = false;
  io_uring_unregister_eventfd(&ub->ring);
  pthread_cond_destroy(&ub->sent);
  nic_close_nocancel(ub->ring_efd);
  nic_close_nocancel(ub->work_efd);
  ub->ring_efd = ub->work_efd = -1;
  nic_cancel_restore(cancel);
}
