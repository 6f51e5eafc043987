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
 * hold), so it is not offered. */
#include "receive.h"

#include "api_errors.h"
#include "backend.h"
#include "endpoint_common.h"
#include "export.h"
#include "forklock.h"
#include "log.h"
#include "pagecount.h"
#include "pool.h"
#include "safety.h"
#include "sim_nic.h"
#include "thread.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

struct receiver {
  struct receiver *next;
  struct nic_endpoint *ep;
  struct nic_backend *b; /* ep's */
  nic_receive_fn receive;
  void *arg;
  int status; /* nic_endpoint_status */
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

/* The child receives nothing of the parent's (its backend is the parent's, marked so): what the
 * parent's endpoints had out is not the child's to give back. */
static void after_fork_child(void) {
  while (held) {
    struct held *h = held;
    held = h->next;
    nic_pool_put(&held_pool, h);
  }
  __atomic_store_n(&nic_safety_ctr.recv_held_buffers, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&nic_safety_ctr.recv_held_bytes, 0, __ATOMIC_RELAXED);
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

/* What the backend hands over, from its poll(). */
static void deliver(void *arg, void *data, size_t len, int status, uint64_t token) {
  struct receiver *r = arg;
  struct nic_backend *b = r->b;
  if (!data) {
    if (status == -ENOBUFS) { /* every buffer out: the endpoint waits for a release */
      NIC_SAFETY_COUNT(recv_stalls, 1);
      nic_log_warn_once("receive: every receive buffer of an endpoint is held (nic_hold); it "
                        "stops receiving, and its transport pushes back, until one is released");
      return;
    }
    __atomic_store_n(&r->status, status, __ATOMIC_RELEASE);
    r->receive(r->arg, NULL, 0);
    return;
  }
  NIC_SAFETY_COUNT(recv_messages, 1);
  NIC_SAFETY_COUNT(recv_bytes, len);
  r->receive(r->arg, data, len);
  const uintptr_t start = (uintptr_t)data, end = start + (len ? len : 1);
  if (!hold_covers(start, end)) {
    b->rx_recycle(b, r->ep, token);
    return;
  }
  pthread_mutex_lock(&lock);
  struct held *h = nic_pool_get(&held_pool);
  if (h) {
    *h = (struct held){
        .next = held, .ep = r->ep, .b = b, .token = token, .start = start, .end = end};
    held = h;
    NIC_SAFETY_COUNT(recv_held_buffers, 1);
    NIC_SAFETY_COUNT(recv_held_bytes, end - start);
  }
  pthread_mutex_unlock(&lock);
  /* No memory to list it: give it back rather than lose it (the hold then protects nothing). */
  if (!h) {
    nic_log_warn_once("receive: no memory to keep a held receive buffer; it goes back to the NIC");
    b->rx_recycle(b, r->ep, token);
  }
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
      __atomic_sub_fetch(&nic_safety_ctr.recv_held_buffers, 1, __ATOMIC_RELAXED);
      __atomic_sub_fetch(&nic_safety_ctr.recv_held_bytes, h->end - h->start, __ATOMIC_RELAXED);
    } else {
      link = &h->next;
    }
  }
  return out;
}

static void give_back(const struct nic_endpoint *ep) {
  if (!__atomic_load_n(&nic_safety_ctr.recv_held_buffers, __ATOMIC_RELAXED)) return;
  pthread_mutex_lock(&lock);
  struct held *ready = take_clear_locked(ep);
  pthread_mutex_unlock(&lock);
  while (ready) {
    struct held *h = ready;
    ready = h->next;
    h->b->rx_recycle(h->b, h->ep, h->token); /* unlocked: it takes the backend's lock */
    pthread_mutex_lock(&lock);
    nic_pool_put(&held_pool, h);
    pthread_mutex_unlock(&lock);
  }
}

void nic_receive_retry_held(void) {
  give_back(NULL);
}

void nic_receive_endpoint_closing(struct nic_endpoint *ep) {
  give_back(ep);
}

void nic_receive_endpoint_gone(struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  for (struct receiver **link = &receivers; *link; link = &(*link)->next)
    if ((*link)->ep == ep) {
      struct receiver *r = *link;
      *link = r->next;
      nic_pool_put(&receiver_pool, r);
      break;
    }
  pthread_mutex_unlock(&lock);
}

NIC_EXPORT int nic_endpoint_receive(struct nic_endpoint *ep, nic_receive_fn receive, void *arg) {
  NIC_INTERNAL_SCOPE();
  if (!ep || !receive) {
    nic_api_error(endpoint,
                  "nic_endpoint_receive(%p): an endpoint and a receive function are needed",
                  (void *)ep);
    return -EINVAL;
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
  pthread_mutex_unlock(&lock);
  if (!r) return -ENOMEM;
  const int rc = b->endpoint_receive(b, ep, deliver, r);
  if (rc) {
    nic_receive_endpoint_gone(ep);
    nic_api_error(endpoint, "nic_endpoint_receive(%p): %s", (void *)ep, strerror(-rc));
  }
  return rc;
}

NIC_EXPORT int nic_endpoint_status(const struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  const struct receiver *r = find_locked(ep);
  const int status = r ? __atomic_load_n(&r->status, __ATOMIC_ACQUIRE) : 0;
  pthread_mutex_unlock(&lock);
  return status;
}
