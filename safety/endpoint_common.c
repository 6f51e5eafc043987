/* Shared by the public endpoint constructors: see endpoint_common.h. */
#define _GNU_SOURCE
#include "endpoint_common.h"
#include "api_errors.h"

#include "forklock.h"
#include "log.h"
#include "receive.h"
#include "settings.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct made {
  struct nic_endpoint *ep;
  const char *kind;
  struct nic_backend *b;
  struct made *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(endpoints, NIC_FORK_ENDPOINTS, &lock, NULL);
static struct made *made;

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
  if (nic_backend_missing_why())
    nic_api_error_by(endpoint, who, 0, "%s: %s", who, nic_backend_missing_why());
  else if (named && nic_setting_is(NIC_S_BACKEND, names[kind]))
    nic_api_error_by(endpoint, who, 0,
                     "%s: the %s backend cannot run here (NICMALLOC_BACKEND=%s is set but could "
                     "not start here, see the warning at start-up; %s)",
                     who, names[kind], names[kind], hint);
  else
    nic_api_error_by(endpoint, who, 0, "%s: the %s backend cannot run here (%s; %s)", who,
                     names[kind], strerror(err), hint);
  errno = ENODEV;
  return NULL;
}

bool nic_ep_track(struct nic_endpoint *ep, const char *kind, struct nic_backend *b) {
  struct made *m = malloc(sizeof *m);
  if (!m) return false;
  pthread_mutex_lock(&lock);
  *m = (struct made){.ep = ep, .kind = kind, .b = b, .next = made};
  made = m;
  pthread_mutex_unlock(&lock);
  return true;
}

void nic_ep_forget(struct nic_endpoint *ep, const char *kind) {
  pthread_mutex_lock(&lock);
  struct made **link = &made;
  while (*link && ((*link)->ep != ep || strcmp((*link)->kind, kind)))
    link = &(*link)->next;
  struct made *m = *link;
  if (m) *link = m->next;
  pthread_mutex_unlock(&lock);
  free(m);
}

static const struct made *find_locked(const struct nic_endpoint *ep) {
  const struct made *m = made;
  while (m && m->ep != ep)
    m = m->next;
  return m;
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
  pthread_mutex_lock(&lock);
  const struct made *m = find_locked(ep);
  struct nic_backend *b = m ? m->b : NULL;
  pthread_mutex_unlock(&lock);
  return b ? b : nic_backend_active();
}

int nic_ep_untrack(struct nic_endpoint *ep, const char *kind, const char *who) {
  if (nic_backend_missing_why()) { /* closing would change the parent's backend: see backend.h */
    nic_api_error_by(endpoint, who, 0, "%s(%p): %s", who, (void *)ep, nic_backend_missing_why());
    return -ENODEV;
  }
  nic_receive_endpoint_closing(ep); /* unlocked: it takes the backend's lock */
  pthread_mutex_lock(&lock);
  struct made **link = &made;
  while (*link && ((*link)->ep != ep || strcmp((*link)->kind, kind)))
    link = &(*link)->next;
  struct made *m = *link;
  /* Under the lock: a second destroy of the same endpoint must not race this one. */
  struct nic_backend *b = m ? m->b : NULL;
  int rc = b ? b->endpoint_destroy(b, ep) : -EINVAL;
  if (rc == 0) *link = m->next;
  pthread_mutex_unlock(&lock);
  if (!m)
    nic_api_error_by(endpoint, who, 0, "%s(%p): not an endpoint made by nic_%s_endpoint_create",
                     who, (void *)ep, kind);
  if (rc == 0) {
    free(m);
    nic_receive_endpoint_gone(ep);
  }
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
