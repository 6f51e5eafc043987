#include "bounce.h"

#include "nicmalloc.h"

#include <errno.h>
#include <stdlib.h>

#define SLAB_BYTES ((size_t)16 << 10) /* one slab serves a whole message of small entries */

struct slab {
  struct slab *next;
  struct nic_region_ref ref; /* the chunk's registration (or a cache region on fallback) */
  size_t used, cap;
  _Alignas(16) char data[];
};

void *nic_bounce_take(void **chain, size_t len, uint32_t *lkey, uint64_t *handle, int *err) {
  struct slab *s = *chain;
  if (!s || s->cap - s->used < len) {
    size_t cap = len > SLAB_BYTES - sizeof *s ? len : SLAB_BYTES - sizeof *s;
    struct slab *fresh = nic_malloc(sizeof *s + cap);
    if (!fresh) {
      *err = -ENOMEM;
      return NULL;
    }
    int rc = nic_register(fresh, sizeof *s + cap, NIC_REG_LOCAL, &fresh->ref);
    if (rc) {
      free(fresh);
      *err = rc;
      return NULL;
    }
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

void nic_bounce_free(void *chain) {
  for (struct slab *s = chain, *next; s; s = next) {
    next = s->next;
    nic_unregister(&s->ref);
    free(s);
  }
}
