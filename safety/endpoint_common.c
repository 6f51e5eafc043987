/* Shared by the public endpoint constructors: see endpoint_common.h. */
#define _GNU_SOURCE
#include "endpoint_common.h"
#include "alloc.h"
#include "api_errors.h"
#include "chunks.h"
#include "nicmalloc.h"
#include "rcache.h"

#include "forklock.h"
#include "log.h"
#include "receive.h"
#include "settings.h"
#include "thread.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct made {
  struct nic_endpoint *ep;
  const char *kind;
  struct nic_backend *b;
  uint64_t id; /* nic_endpoint_id: the same in every listing of one endpoint */
  struct made *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct made *made;
static uint64_t last_id; /* under lock */

/* Bumped, under the lock, whenever the list changes: a thread's last answer of nic_endpoint_id
 * holds while it has not moved, so that asking again for one endpoint (the adapters do at every
 * message) takes neither the lock nor a walk of the list. */
static atomic_uint_fast64_t list_version;
static __thread struct {
  const struct nic_endpoint *ep;
  uint64_t id, version;
} last_asked __attribute__((tls_model("initial-exec")));

static void changed_locked(void) {
  atomic_fetch_add_explicit(&list_version, 1, memory_order_release);
}

/* The endpoints a child of fork inherited, sorted, read without the lock: each is the parent's,
 * made by a backend the child does not have (regcache/cache/backend.h), and its structure stays
 * as the parent left it, never freed here, so its address is never another endpoint's. */
static uintptr_t *inherited;
size_t nic_ep_inherited_count;

static void sift_down(uintptr_t *a, size_t at, size_t n) {
  for (size_t child; (child = 2 * at + 1) < n; at = child) {
    if (child + 1 < n && a[child + 1] > a[child]) child++;
    if (a[at] >= a[child]) return;
    const uintptr_t t = a[at];
    a[at] = a[child];
    a[child] = t;
  }
}

/* In place and without malloc: a fork child's hook (qsort may allocate). */
static void sort_addresses(uintptr_t *a, size_t n) {
  for (size_t i = n / 2; i-- > 0;)
    sift_down(a, i, n);
  for (size_t end = n; end-- > 1;) {
    const uintptr_t t = a[0];
    a[0] = a[end];
    a[end] = t;
    sift_down(a, 0, end);
  }
}

static void after_fork_child(void) {
  size_t n = 0;
  for (const struct made *m = made; m; m = m->next)
    n++;
  if (inherited) munmap(inherited, nic_ep_inherited_count * sizeof *inherited);
  inherited = NULL;
  nic_ep_inherited_count = 0;
  if (!n) return;
  void *p =
      mmap(NULL, n * sizeof *inherited, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  size_t i = 0;
  for (struct made *m = made; m; m = m->next) {
    m->b = NULL;
    if (p != MAP_FAILED) ((uintptr_t *)p)[i++] = (uintptr_t)m->ep;
  }
  if (p == MAP_FAILED) {
    /* Then every post looks its endpoint up under the lock, and finds no backend for these. */
    nic_ep_inherited_count = SIZE_MAX;
    return;
  }
  sort_addresses(p, n);
  inherited = p;
  nic_ep_inherited_count = n;
}
NIC_FORKLOCK_MUTEX(endpoints, NIC_FORK_ENDPOINTS, &lock, after_fork_child);

bool nic_ep_inherited(const struct nic_endpoint *ep) {
  const size_t n = nic_ep_inherited_count;
  if (!n) return false;
  if (!inherited) return nic_ep_known(ep) && !nic_ep_backend_of_slow(ep);
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (inherited[mid] < (uintptr_t)ep)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && inherited[lo] == (uintptr_t)ep;
}

const char *nic_ep_inherited_why(void) {
  return "the endpoint was made by the parent process, with its backend: a child of fork uses "
         "endpoints it made itself";
}

struct nic_backend *nic_ep_backend(const char *who, enum nic_backend_kind kind, const char *hint) {
  static const char *const names[NIC_BACKEND_KINDS] = {"sim", "uring", "verbs", "dpdk"};
  /* A backend named in NICMALLOC_BACKEND is the default, whatever the endpoint: chosen first,
   * so that its start (or the warning that it cannot) comes as the setting says. Under auto the
   * endpoint's own is started alone, and becomes the default if it is the first. */
  const bool named = nic_setting_choice(NIC_S_BACKEND) != 0;
  if (named) nic_backend_active();
  struct nic_backend *b = nic_backend_start(kind);
  if (b) return b;
  const int err = errno;
  const int short_of = nic_backend_short_of(kind);
  if (nic_backend_missing_why())
    nic_api_error_by(endpoint, who, 0, "%s: %s", who, nic_backend_missing_why());
  else if (nic_backend_refused_why(kind))
    nic_api_error_by(endpoint, who, 0, "%s: the %s backend cannot run here: %s", who, names[kind],
                     nic_backend_refused_why(kind));
  else if (short_of) /* not for good: the call is to be made again */
    nic_api_error_by(endpoint, who, short_of, "%s: " NIC_BACKEND_SHORT_FMT, who, names[kind],
                     strerror(short_of));
  else if (named && nic_setting_is(NIC_S_BACKEND, names[kind]))
    nic_api_error_by(endpoint, who, 0,
                     "%s: the %s backend cannot run here (NICMALLOC_BACKEND=%s is set but could "
                     "not start here: see the warning said when it was tried; %s)",
                     who, names[kind], names[kind], hint);
  else
    nic_api_error_by(endpoint, who, 0, "%s: the %s backend cannot run here (%s; %s)", who,
                     names[kind], strerror(err), hint);
  errno = ENODEV;
  return NULL;
}

static const struct made *find_locked(const struct nic_endpoint *ep) {
  const struct made *m = made;
  while (m && m->ep != ep)
    m = m->next;
  return m;
}

bool nic_ep_track(struct nic_endpoint *ep, const char *kind, struct nic_backend *b) {
  struct made *m = malloc(sizeof *m);
  if (!m) return false;
  pthread_mutex_lock(&lock);
  /* Handed out again while listed (a dpdk queue asked for twice), it is the same endpoint. */
  const struct made *listed = find_locked(ep);
  *m = (struct made){
      .ep = ep, .kind = kind, .b = b, .id = listed ? listed->id : ++last_id, .next = made};
  made = m;
  changed_locked();
  pthread_mutex_unlock(&lock);
  return true;
}

/* Where ep, made by kind's constructor, is linked; *link is NULL when it was not. */
static struct made **link_of_locked(const struct nic_endpoint *ep, const char *kind) {
  struct made **link = &made;
  while (*link && ((*link)->ep != ep || strcmp((*link)->kind, kind)))
    link = &(*link)->next;
  return link;
}

void nic_ep_forget(struct nic_endpoint *ep, const char *kind) {
  pthread_mutex_lock(&lock);
  struct made **link = link_of_locked(ep, kind);
  struct made *m = *link;
  if (m) *link = m->next;
  changed_locked();
  pthread_mutex_unlock(&lock);
  free(m);
}

NIC_EXPORT uint64_t nic_endpoint_id(const struct nic_endpoint *ep) {
  if (!ep) return 0;
  const uint64_t now = atomic_load_explicit(&list_version, memory_order_acquire);
  if (last_asked.ep == ep && last_asked.version == now) return last_asked.id;
  pthread_mutex_lock(&lock);
  const struct made *m = find_locked(ep);
  const uint64_t id = m ? m->id : 0;
  last_asked.ep = ep;
  last_asked.id = id;
  last_asked.version = atomic_load_explicit(&list_version, memory_order_relaxed);
  pthread_mutex_unlock(&lock);
  return id;
}

bool nic_ep_known(const struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  const bool known = find_locked(ep) != NULL;
  pthread_mutex_unlock(&lock);
  return known;
}

bool nic_ep_is_sim(const struct nic_endpoint *ep) {
  pthread_mutex_lock(&lock);
  const struct made *m = find_locked(ep);
  const bool sim = m && !strcmp(m->kind, "sim");
  pthread_mutex_unlock(&lock);
  return sim;
}

struct nic_backend *nic_ep_backend_of_slow(const struct nic_endpoint *ep) {
  if (nic_backend_missing_why()) return NULL;
  if (inherited && nic_ep_inherited(ep)) return NULL;
  struct nic_backend *only = nic_backend_only();
  if (only && inherited) return only;
  pthread_mutex_lock(&lock);
  const struct made *m = find_locked(ep);
  /* m->b NULL: inherited (when the sorted copy could not be made) */
  struct nic_backend *b = m ? m->b : NULL;
  pthread_mutex_unlock(&lock);
  return b ? b : m ? NULL : nic_backend_active();
}

int nic_ep_untrack(struct nic_endpoint *ep, const char *kind, const char *who) {
  if (nic_backend_missing_why()) { /* closing would change the parent's backend: see backend.h */
    nic_api_error_by(endpoint, who, 0, "%s(%p): %s", who, (void *)ep, nic_backend_missing_why());
    return -ENODEV;
  }
  if (nic_ep_inherited(ep)) { /* the parent's backend keeps it */
    nic_api_error_by(endpoint, who, 0, "%s(%p): %s; it is left as it is", who, (void *)ep,
                     nic_ep_inherited_why());
    return -ENODEV;
  }
  /* Only an endpoint of this kind is closed: another one (a uring endpoint given to the verbs
   * destroy, say) must lose nothing, its waiting messages included. */
  pthread_mutex_lock(&lock);
  const bool ours = *link_of_locked(ep, kind) != NULL;
  pthread_mutex_unlock(&lock);
  if (ours) nic_receive_endpoint_closing(ep); /* unlocked: it takes the backend's lock */
  pthread_mutex_lock(&lock);
  /* Again, under the lock: a second destroy of the same endpoint must not race this one. */
  struct made **link = link_of_locked(ep, kind);
  struct made *m = ours ? *link : NULL;
  struct nic_backend *b = m ? m->b : NULL;
  /* The receive layer first: the receive function it runs from its queue of messages that
   * waited for the cap is not the backend's to see. Its receiver goes under this lock, before
   * an endpoint made at the same address could start receiving. */
  int rc = !b ? -EINVAL : nic_receive_endpoint_stopping(ep);
  if (b && rc == 0) {
    rc = b->endpoint_destroy(b, ep);
    if (rc)
      nic_receive_endpoint_kept(ep);
    else
      nic_receive_endpoint_gone(ep);
  }
  if (rc == 0) {
    *link = m->next;
    changed_locked();
  }
  pthread_mutex_unlock(&lock);
  if (!m)
    nic_api_error_by(endpoint, who, 0, "%s(%p): not an endpoint made by nic_%s_endpoint_create",
                     who, (void *)ep, kind);
  free(rc == 0 ? m : NULL);
  return rc;
}

void *nic_ep_plugin_symbol(struct nic_backend *b, const char *name) {
  Dl_info info;
  if (!b || !dladdr((void *)b->post, &info) || !info.dli_fname) return NULL;
  /* NOLOAD finds the copy already loaded and never loads a second one. */
  void *handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!handle) return NULL;
  void *sym = dlsym(handle, name);
  dlclose(handle); /* drops only NOLOAD's reference: the backend keeps the plugin loaded */
  return sym;
}

void *nic_ep_rx_block(struct nic_backend *b, size_t len, size_t align, uint32_t *lkey,
                      uint64_t *handle) {
  NIC_INTERNAL_SCOPE();
  if (!b || !len || len > NIC_EP_SMALLEST_STEP) return NULL;
  /* Aligned to its own size rounded up to a power of two, the block never crosses a step end.
   * One that did would get a registration of its own (NIC_RCACHE_OWN), a reference to keep and
   * give back; freed and asked for again, it would come back at the same place and cross the
   * same end every time. */
  size_t span = align > 1 ? align : 1;
  while (span < len)
    span <<= 1;
  void *p = nic_alloc(len, span, false, NIC_ROUTE_DATAPLANE);
  struct nic_region_ref ref = {0};
  /* With the endpoint's backend, not the default one: that is the one whose NIC writes here. */
  if (p && nic_in_dp(p) && !nic_register_with(b, p, len, NIC_REG_LOCAL_WRITE, &ref)) {
    if (ref.kind == NIC_REGION_ARENA) {
      *lkey = ref.lkey;
      *handle = ref.backend_handle;
      return p;
    }
    /* Across a step end after all (the alignment above rules it out): a reference of its own to
     * keep for the block's life, which the plugins' free(block) has no room to give back. */
    nic_rcache_release_own_in(nic_rcache_of(b), ref.cache_slot);
  }
  nic_free_named(p, "receive buffer");
  return NULL;
}
