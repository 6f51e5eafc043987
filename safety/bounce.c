#include "bounce.h"

#include "alloc.h"
#include "nicmalloc.h"
#include "rcache.h"
#include "safety.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SLAB_BYTES ((size_t)16 << 10) /* one slab serves a whole message of small entries */

struct slab {
  struct slab *next;
  struct nic_region_ref ref; /* its step's registration (or a cache region on fallback) */
  size_t used, cap;
  _Alignas(16) char data[];
};

/* A dataplane slab uses its step's registration. When that is refused (io_uring without
 * CAP_IPC_LOCK cannot pin a step over a small RLIMIT_MEMLOCK), a control slab through
 * the registration cache pins only its own pages, so entries that could not be registered can
 * still be copied, as nic_sga_add promises. */
static struct slab *new_slab(size_t bytes, enum nic_route route, int *err) {
  struct slab *s = nic_alloc(bytes, 0, false, route);
  if (!s) {
    *err = -ENOMEM;
    return NULL;
  }
  int rc = nic_register_quiet(s, bytes, NIC_REG_LOCAL, &s->ref);
  if (rc) {
    nic_free_named(s, "bounce buffer");
    *err = rc;
    return NULL;
  }
  return s;
}

void *nic_bounce_take(void **chain, size_t len, uint32_t *lkey, uint64_t *handle, int *err) {
  struct slab *s = *chain;
  if (!s || s->cap - s->used < len) {
    size_t cap = len > SLAB_BYTES - sizeof *s ? len : SLAB_BYTES - sizeof *s;
    struct slab *fresh = new_slab(sizeof *s + cap, NIC_ROUTE_DATAPLANE, err);
    if (!fresh) fresh = new_slab(sizeof *s + cap, NIC_ROUTE_CONTROL, err);
    if (!fresh) return NULL;
    fresh->next = s;
    fresh->used = 0;
    fresh->cap = cap;
    *chain = s = fresh;
  }
  void *p = s->data + s->used;
  s->used += len;
  *lkey = s->ref.lkey;
  *handle = s->ref.backend_handle;
  return p;
}

int nic_bounce_copy(void **chain, const void *p, size_t len, const void *q, size_t qlen,
                    struct nic_sga_entry *e) {
  int err = 0;
  uint32_t lkey;
  uint64_t handle;
  char *dst = nic_bounce_take(chain, len + qlen, &lkey, &handle, &err);
  if (!dst) return err;
  memcpy(dst, p, len);
  if (qlen) memcpy(dst + len, q, qlen);
  NIC_SAFETY_COUNT(bounce_bytes, len + qlen);
  *e = (struct nic_sga_entry){.addr = dst,
                              .len = (uint32_t)(len + qlen),
                              .lkey = lkey,
                              .handle = handle,
                              .kind = NIC_SGA_BOUNCE};
  return 0;
}

struct nic_bounce_mark nic_bounce_mark(void *chain) {
  struct slab *s = chain;
  return (struct nic_bounce_mark){.head = s, .used = s ? s->used : 0};
}

void nic_bounce_rewind(void **chain, struct nic_bounce_mark mark) {
  struct slab *s = *chain;
  while (s && s != mark.head) {
    struct slab *next = s->next;
    s->next = NULL;
    nic_bounce_free(s);
    s = next;
  }
  if (s) s->used = mark.used;
  *chain = s;
}

void nic_bounce_free(void *chain) {
  for (struct slab *s = chain, *next; s; s = next) {
    next = s->next;
    nic_unregister(&s->ref);
    nic_free_named(s, "bounce buffer");
  }
}
