/* nic_endpoint_receive, nic_endpoint_status and the life of a receive buffer (receive.h).
 *
 * A buffer the program did not hold when its receive function returned goes back to the NIC at
 * once. One it held is listed here, with the pages it covers, and goes back once no hold covers
 * them (nic_release retries the list): holds count per 4 KiB page (pagecount.h), so a hold on any
 * byte of the buffer keeps all of it, and a hold on a neighbour sharing its page keeps it too.
 * Backends carve buffers page-aligned where they can, so that neighbours do not keep each other.
 *
 * A backend with every buffer out stops receiving and says so with status -ENOBUFS (not final);
 * the transport then pushes back. That is the bound on receive memory: an endpoint's buffers,
 * fixed when it starts receiving. The alternative the HotOS paper names, copying held buffers
 * out to ordinary memory, would move data under pointers the program holds (the point of a
 * hold), so it is not offered.
 *
 * Over all endpoints, the held bytes have a cap (NICMALLOC_RECV_HELD_MAX): at it, deliver() does
 * not hand a message over but lists it, in its buffer, in a FIFO (and every later message of
 * the same receiver behind it, end calls included, to keep each endpoint's order). Its buffer
 * stays out of the ring, so its endpoint soon runs out of buffers and pushes back through the
 * stall above. nic_poll hands the waiting messages over once releases bring the held bytes
 * under the cap; a release says so on wake_fd, which sits in nic_event_fd's set, so that a
 * program asleep in nic_wait or on that fd wakes for them (see wake_settle_locked). The sim's
 * endpoints receive on its engine, each message in a dataplane block of its own (endpoint.c), not
 * through deliver(): the cap does not bound them, nor do their held bytes count toward it. A held
 * one is listed here all the same (nic_receive_sim_done), and freed once no hold covers it, so that
 * recv_held_buffers and recv_held_bytes count it as they count a NIC's buffer. */
#include "receive.h"

#include "alloc.h"
#include "api_errors.h"
#include "backend.h"
#include "endpoint_common.h"
#include "export.h"
#include "forklock.h"
#include "log.h"
#include "nocancel.h"
#include "pagecount.h"
#include "pool.h"
#include "safety.h"
#include "settings.h"
#include "sim_nic.h"
#include "thread.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct receiver {
  struct receiver *next;
  struct nic_endpoint *ep;
  struct nic_backend *b; /* ep's */
  nic_receive_fn receive;
  void *arg;
  int status;       /* nic_endpoint_status */
  unsigned waiting; /* its messages in the FIFO, or being handed over from it */
  bool closing;     /* its endpoint's destroy runs: nic_receive_drain hands it nothing */
};

/* A message deliver() did not hand over, waiting for the held bytes to fall under the cap. */
struct waiting {
  struct waiting *next;
  struct receiver *r;
  void *data;
  size_t len;
  int status;
  uint64_t token;
};

struct held {
  struct held *next;
  struct nic_endpoint *ep;
  struct nic_backend *b; /* ep's */
  uint64_t token;
  uintptr_t start, end;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct receiver *receivers;
static struct held *held;
static struct nic_pool receiver_pool = NIC_POOL_INIT(sizeof(struct receiver));
static struct nic_pool held_pool = NIC_POOL_INIT(sizeof(struct held));
static struct waiting *waiting_head, **waiting_tail = &waiting_head;
static struct nic_pool waiting_pool = NIC_POOL_INIT(sizeof(struct waiting));
static int wake_fd = -1;         /* readable while messages wait and could be handed over */
static bool woken;               /* wake_fd written and not cleared since */
static bool draining;            /* a thread hands waiting messages over */
static struct receiver *handing; /* whose waiting message it hands over now */
static unsigned closing;         /* receivers whose endpoint's destroy runs */
static uint64_t sim_held_bytes;  /* the sim's part of recv_held_bytes: the cap is not theirs */

/* The child receives nothing of the parent's (its backend is the parent's, marked so): what the
 * parent's endpoints had out is not the child's to give back. A sim buffer is a block of the
 * child's own copy of memory, under the child's copy of its holds: it stays listed, to be freed
 * at the child's release. */
static void after_fork_child(void) {
  uint64_t buffers = 0, bytes = 0;
  for (struct held **link = &held; *link;) {
    struct held *h = *link;
    if (h->b) {
      *link = h->next;
      nic_pool_put(&held_pool, h);
    } else {
      buffers++;
      bytes += h->end - h->start;
      link = &h->next;
    }
  }
  __atomic_store_n(&nic_safety_ctr.recv_held_buffers, buffers, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_safety_ctr.recv_held_bytes, bytes, __ATOMIC_RELAXED);
  sim_held_bytes = bytes;
  while (waiting_head) {
    struct waiting *w = waiting_head;
    waiting_head = w->next;
    nic_pool_put(&waiting_pool, w);
  }
  waiting_tail = &waiting_head;
  for (struct receiver *r = receivers; r; r = r->next)
    r->waiting = 0;
  woken = false;
  /* The parent's, which the child closed with the backends' (it joined their set): the
   * child's own receives make another. */
  wake_fd = -1;
  draining = false;
  handing = NULL;
  __atomic_store_n(&nic_safety_ctr.recv_waiting, 0, __ATOMIC_RELAXED);
}
NIC_FORKLOCK_MUTEX(receivers, NIC_FORK_RECEIVERS, &lock, after_fork_child);

static struct receiver *find_locked(const struct nic_endpoint *ep) {
  for (struct receiver *r = receivers; r; r = r->next)
    if (r->ep == ep) return r;
  return NULL;
}

static bool hold_covers(uintptr_t start, uintptr_t end) {
  return nic_pc_any(start, end, ~NIC_PC_DMA_MASK);
}

static uint64_t held_max(void) {
  static uint64_t cap;
  uint64_t c = __atomic_load_n(&cap, __ATOMIC_RELAXED);
  if (!c) __atomic_store_n(&cap, c = nic_setting_number(NIC_S_RECV_HELD_MAX), __ATOMIC_RELAXED);
  return c;
}

/* Under the lock, as the held bytes change. */
static bool under_cap(void) {
  return __atomic_load_n(&nic_safety_ctr.recv_held_bytes, __ATOMIC_RELAXED) - sim_held_bytes <
         held_max();
}

/* h comes onto the list of held buffers (listed) or leaves it: the counters say so. Under the
 * lock. */
static void count_held_locked(const struct held *h, bool listed) {
  const uint64_t bytes = h->end - h->start;
  if (listed) {
    NIC_SAFETY_COUNT(recv_held_buffers, 1);
    NIC_SAFETY_COUNT(recv_held_bytes, bytes);
  } else {
    __atomic_sub_fetch(&nic_safety_ctr.recv_held_buffers, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&nic_safety_ctr.recv_held_bytes, bytes, __ATOMIC_RELAXED);
  }
  if (!h->b) sim_held_bytes = listed ? sim_held_bytes + bytes : sim_held_bytes - bytes;
}

/* Where the oldest waiting message the drain may hand over is linked: receivers whose endpoint
 * is being destroyed are passed over, all their messages alike, so each receiver's order holds. */
static struct waiting **next_link_locked(void) {
  struct waiting **link = &waiting_head;
  if (closing)
    while (*link && (*link)->r->closing)
      link = &(*link)->next;
  return link;
}

/* wake_fd follows whether a nic_poll on another thread would hand a waiting message over. While
 * one thread drains, none would (one at a time keeps each receiver's order), so it stays clear:
 * readable, it had every nic_wait, and every level-triggered epoll on nic_event_fd, poll in a
 * loop until the drainer's receive function returned. Under the lock, so that a clear never
 * swallows a wake written after its check; with calls no cancel acts on.
 *
 * No wake is lost. Every change to what ready reads (the FIFO, the held bytes, draining, a
 * receiver's closing) is made under the lock and settled there, bar held bytes growing, whose
 * stale wake costs one empty poll. A drainer looks at the FIFO and the cap under the lock before
 * each message, and its last look, the clearing of draining and the settle that follows are one
 * critical section: a message queued, or a release made, while draining was set is either
 * handed over by its loop or written to wake_fd by that settle. Work of any other kind (a
 * completion, a message the backend has read) is said by the backends' own descriptors in the
 * same set, which a drain leaves alone: a message that comes meanwhile wakes a waiter, whose
 * poll hands it over, or queues it behind its receiver's waiting ones for the drainer. So there
 * is nothing for a waiter to do that a settle after each hand-over could tell it of. */
static void wake_settle_locked(void) {
  const bool ready = waiting_head && !draining && under_cap() && *next_link_locked();
  if (wake_fd < 0 || ready == woken) return;
  /* a full or empty counter already says what it should */
  if (ready)
    nic_eventfd_signal_nocancel(wake_fd);
  else
    nic_eventfd_take_nocancel(wake_fd);
  woken = ready;
}

/* Buffers keep_or_recycle is listing as held (see there). */
static unsigned listing;

/* A buffer's way back: its backend's rx_recycle; a sim endpoint's (no backend) is a dataplane
 * block of the process's, its token, which goes back to the allocator. */
static void recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token) {
  if (b)
    b->rx_recycle(b, ep, token);
  else
    nic_free_named((void *)(uintptr_t)token, "receive buffer");
}

/* After the program's function: the buffer of token, [start, end), back to the NIC, or listed
 * while a hold covers it. */
static void keep_or_recycle(struct nic_backend *b, struct nic_endpoint *ep, uint64_t token,
                            uintptr_t start, uintptr_t end) {
  if (!hold_covers(start, end)) {
    recycle(b, ep, token);
    return;
  }
  /* Held, but a release on another thread may come meanwhile: it takes its hold away, then
   * looks for the buffer among the listed ones, under the lock (give_back). So the buffer is
   * announced (listing) before its hold is looked at again, under the lock: either that release
   * sees the announcement and waits for the lock, or this look sees the hold gone. Else a
   * buffer whose last hold went meanwhile would be listed as held, by nobody, for good. */
  __atomic_add_fetch(&listing, 1, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  pthread_mutex_lock(&lock);
  if (!hold_covers(start, end)) {
    pthread_mutex_unlock(&lock);
    __atomic_sub_fetch(&listing, 1, __ATOMIC_SEQ_CST);
    recycle(b, ep, token);
    return;
  }
  struct held *h = nic_pool_get(&held_pool);
  if (h) {
    *h = (struct held){.next = held, .ep = ep, .b = b, .token = token, .start = start, .end = end};
    held = h;
    count_held_locked(h, true);
  }
  pthread_mutex_unlock(&lock);
  __atomic_sub_fetch(&listing, 1, __ATOMIC_SEQ_CST); /* listed: recv_held_buffers says so now */
  /* No memory to list it: give it back rather than lose it (the hold then protects nothing). */
  if (!h) {
    nic_log_warn_once("receive: no memory to keep a held receive buffer; it goes back to the NIC");
    recycle(b, ep, token);
  }
}

/* The program's function, then the buffer back to the NIC or listed as held. */
static void hand_over(struct receiver *r, void *data, size_t len, int status, uint64_t token) {
  struct nic_backend *b = r->b;
  const int internal = nic_internal_suspend(); /* the program's function: its own scope */
  if (!data) {
    __atomic_store_n(&r->status, status, __ATOMIC_RELEASE);
    r->receive(r->arg, NULL, 0);
    nic_internal_resume(internal);
    return;
  }
  NIC_SAFETY_COUNT(recv_messages, 1);
  NIC_SAFETY_COUNT(recv_bytes, len);
  r->receive(r->arg, data, len);
  nic_internal_resume(internal);
  keep_or_recycle(b, r->ep, token, (uintptr_t)data, (uintptr_t)data + (len ? len : 1));
}

void nic_receive_sim_done(void *buf, size_t len) {
  if (buf) keep_or_recycle(NULL, NULL, (uintptr_t)buf, (uintptr_t)buf, (uintptr_t)buf + len);
}

/* What the backend hands over, from its poll(). */
static void deliver(void *arg, void *data, size_t len, int status, uint64_t token) {
  struct receiver *r = arg;
  if (!data && status == -ENOBUFS) { /* every buffer out: the endpoint waits for a release */
    NIC_SAFETY_COUNT(recv_stalls, 1);
    nic_log_warn_once("receive: every receive buffer of an endpoint is held (nic_hold); it "
                      "stops receiving, and its transport pushes back, until one is released");
    return;
  }
  pthread_mutex_lock(&lock);
  struct waiting *w = NULL;
  const bool wait = r->waiting || (data && !under_cap());
  if (wait) {
    w = nic_pool_get(&waiting_pool);
    if (w) {
      *w = (struct waiting){.r = r, .data = data, .len = len, .status = status, .token = token};
      *waiting_tail = w;
      waiting_tail = &w->next;
      r->waiting++;
      NIC_SAFETY_COUNT(recv_waiting, 1);
      if (data) NIC_SAFETY_COUNT(recv_capped, 1);
      wake_settle_locked();
    }
  }
  pthread_mutex_unlock(&lock);
  if (w) {
    if (data)
      nic_log_warn_once("receive: the program holds NICMALLOC_RECV_HELD_MAX bytes of received "
                        "messages (nic_hold); further messages wait, and their endpoints push "
                        "back, until releases bring the held bytes under it");
    return;
  }
  if (wait) /* nothing could list it: handed over past the cap rather than lost */
    nic_log_warn_once("receive: no memory to keep a message waiting for the held bytes to fall "
                      "under NICMALLOC_RECV_HELD_MAX; it is handed over at once");
  hand_over(r, data, len, status, token);
}

/* Takes *link off the FIFO. */
static struct waiting unlink_waiting_locked(struct waiting **link) {
  struct waiting *at = *link, w = *at;
  *link = w.next;
  if (waiting_tail == &at->next) waiting_tail = link;
  nic_pool_put(&waiting_pool, at);
  __atomic_sub_fetch(&nic_safety_ctr.recv_waiting, 1, __ATOMIC_RELAXED);
  return w;
}

int nic_receive_drain(int max) {
  if (!__atomic_load_n(&nic_safety_ctr.recv_waiting, __ATOMIC_ACQUIRE)) return 0;
  pthread_mutex_lock(&lock);
  /* One thread at a time, so that each receiver's messages are handed over in their order. */
  if (draining) {
    pthread_mutex_unlock(&lock);
    return 0;
  }
  draining = true;
  wake_settle_locked(); /* the FIFO is this thread's now: others sleep (see there) */
  int ran = 0;
  struct waiting **link;
  while (under_cap() && (max <= 0 || ran < max) && *(link = next_link_locked())) {
    const struct waiting w = unlink_waiting_locked(link);
    /* Its endpoint's destroy answers -EBUSY until the receive function returns (even from
     * inside it: at the end of a stream, say), as the backends' do for what they hand over. */
    handing = w.r;
    pthread_mutex_unlock(&lock);
    hand_over(w.r, w.data, w.len, w.status, w.token);
    ran++;
    pthread_mutex_lock(&lock);
    handing = NULL;
    w.r->waiting--; /* only now may a later message of it be handed over directly */
  }
  /* With the look above, in one critical section: no wake is lost (wake_settle_locked). */
  draining = false;
  wake_settle_locked();
  pthread_mutex_unlock(&lock);
  return ran;
}

/* Takes the listed buffers of ep (any endpoint when NULL) no hold covers; returns them linked. */
static struct held *take_clear_locked(const struct nic_endpoint *ep) {
  struct held *out = NULL;
  for (struct held **link = &held; *link;) {
    struct held *h = *link;
    if ((!ep || h->ep == ep) && !hold_covers(h->start, h->end)) {
      *link = h->next;
      h->next = out;
      out = h;
      count_held_locked(h, false);
    } else {
      link = &h->next;
    }
  }
  return out;
}

static void give_back(const struct nic_endpoint *ep) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST); /* the hold's removal before the looks: hand_over */
  if (!__atomic_load_n(&nic_safety_ctr.recv_held_buffers, __ATOMIC_SEQ_CST) &&
      !__atomic_load_n(&listing, __ATOMIC_SEQ_CST))
    return;
  NIC_INTERNAL_SCOPE(); /* the backends' code, as nic_poll's */
  pthread_mutex_lock(&lock);
  struct held *ready = take_clear_locked(ep);
  if (ready) wake_settle_locked(); /* under the cap again: messages waiting may go now */
  pthread_mutex_unlock(&lock);
  while (ready) {
    struct held *h = ready;
    ready = h->next;
    recycle(h->b, h->ep, h->token); /* unlocked: it takes the backend's lock */
    pthread_mutex_lock(&lock);
    nic_pool_put(&held_pool, h);
    pthread_mutex_unlock(&lock);
  }
}

void nic_receive_retry_held(void) {
  give_back(NULL);
}

/* The program closes ep: its waiting messages go back to the NIC undelivered. */
static void drop_waiting(const struct nic_endpoint *ep) {
  if (!__atomic_load_n(&nic_safety_ctr.recv_waiting, __ATOMIC_ACQUIRE)) return;
  struct waiting *out = NULL;
  pthread_mutex_lock(&lock);
  waiting_tail = &waiting_head;
  for (struct waiting **link = &waiting_head; *link;) {
    struct waiting *w = *link;
    if (w->r->ep == ep) {
      *link = w->next;
      w->next = out;
      out = w;
      w->r->waiting--;
      __atomic_sub_fetch(&nic_safety_ctr.recv_waiting, 1, __ATOMIC_RELAXED);
      if (w->data) NIC_SAFETY_COUNT(recv_capped_dropped, 1);
    } else {
      link = &w->next;
      waiting_tail = link;
    }
  }
  wake_settle_locked();
  pthread_mutex_unlock(&lock);
  while (out) {
    struct waiting *w = out;
    out = w->next;
    if (w->data)
      w->r->b->rx_recycle(w->r->b, w->r->ep, w->token); /* unlocked: the backend's lock */
    pthread_mutex_lock(&lock);
    nic_pool_put(&waiting_pool, w);
    pthread_mutex_unlock(&lock);
  }
}

void nic_receive_endpoint_closing(struct nic_endpoint *ep) {
  give_back(ep);
  drop_waiting(ep);
}

int nic_receive_endpoint_stopping(struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  struct receiver *r = find_locked(ep);
  const int rc = r && r == handing ? -EBUSY : 0;
  if (r && !rc && !r->closing) {
    r->closing = true;
    closing++;
    wake_settle_locked(); /* its messages may have been all that could go */
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void nic_receive_endpoint_kept(struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  struct receiver *r = find_locked(ep);
  if (r && r->closing) {
    r->closing = false;
    closing--;
    wake_settle_locked(); /* its waiting messages may go again */
  }
  pthread_mutex_unlock(&lock);
}

void nic_receive_endpoint_gone(struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  struct receiver *r = NULL;
  for (struct receiver **link = &receivers; *link; link = &(*link)->next)
    if ((*link)->ep == ep) {
      r = *link;
      *link = r->next;
      break;
    }
  /* What deliver() queued for it while its destroy ran holds no buffer (one that did would have
   * made the destroy -EBUSY): an empty datagram, the end call. They go with the endpoint. */
  for (struct waiting **link = &waiting_head; r && r->waiting && *link;)
    if ((*link)->r == r) {
      if (unlink_waiting_locked(link).data) NIC_SAFETY_COUNT(recv_capped_dropped, 1);
      r->waiting--;
    } else {
      link = &(*link)->next;
    }
  if (r && r->closing) closing--;
  if (r) nic_pool_put(&receiver_pool, r);
  wake_settle_locked();
  pthread_mutex_unlock(&lock);
}

NIC_EXPORT int nic_endpoint_receive(struct nic_endpoint *ep, nic_receive_fn receive, void *arg) {
  NIC_CANCEL_OFF_SCOPE(); /* the backend arms its receive under locks */
  NIC_INTERNAL_SCOPE();
  if (!ep || !receive) {
    nic_api_error(endpoint,
                  "nic_endpoint_receive(%p): an endpoint and a receive function are needed",
                  (void *)ep);
    return -EINVAL;
  }
  if (nic_ep_inherited(ep)) {
    nic_api_error(endpoint, "nic_endpoint_receive(%p): %s", (void *)ep, nic_ep_inherited_why());
    return -ENODEV;
  }
  /* An endpoint of ours was made by a constructor that started its backend: while none runs,
   * ep is not one of ours (the default backend's checks below say so). */
  struct nic_backend *b = nic_backend_count() > 0 ? nic_ep_backend_of(ep) : nic_backend_active();
  if (!b) {
    nic_api_error(endpoint, "nic_endpoint_receive(%p): no backend is open", (void *)ep);
    return -ENODEV;
  }
  if (nic_sim_is(b)) return nic_sim_receive_set(ep, receive, arg);
  if (!nic_ep_known(ep)) {
    nic_api_error(endpoint, "nic_endpoint_receive(%p): not an endpoint of nicmalloc's", (void *)ep);
    return -EINVAL;
  }
  if (!b->endpoint_receive) {
    nic_api_error(endpoint, "nic_endpoint_receive: the %s backend cannot receive", b->name);
    return -EOPNOTSUPP;
  }
  pthread_mutex_lock(&lock);
  struct receiver *r = find_locked(ep);
  if (r) {
    const int rc = r->receive == receive && r->arg == arg ? 0 : -EALREADY;
    pthread_mutex_unlock(&lock);
    return rc;
  }
  r = nic_pool_get(&receiver_pool);
  if (r) {
    *r = (struct receiver){.next = receivers, .ep = ep, .b = b, .receive = receive, .arg = arg};
    receivers = r;
  }
  int join = -1;
  if (r && wake_fd < 0) {
    wake_fd = join = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (join < 0)
      nic_log_warn_once("receive: no event descriptor (%s): nic_wait does not wake when a "
                        "release lets waiting messages go",
                        strerror(errno));
  }
  pthread_mutex_unlock(&lock);
  if (join >= 0) nic_backends_event_fd_join(join);
  if (!r) return -ENOMEM;
  const int rc = b->endpoint_receive(b, ep, deliver, r);
  if (rc) {
    nic_receive_endpoint_gone(ep);
    nic_api_error(endpoint, "nic_endpoint_receive(%p): %s", (void *)ep, strerror(-rc));
  }
  return rc;
}

NIC_EXPORT int nic_endpoint_status(const struct nic_endpoint *ep) {
  if (!ep) {
    nic_api_error(endpoint, "nic_endpoint_status: no endpoint");
    return -EINVAL;
  }
  pthread_mutex_lock(&lock);
  const struct receiver *r = find_locked(ep);
  const int status = r ? __atomic_load_n(&r->status, __ATOMIC_ACQUIRE) : 0;
  pthread_mutex_unlock(&lock);
  return status;
}
