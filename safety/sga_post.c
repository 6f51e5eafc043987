/* Posting an array and completing it. At post every direct entry takes a DMA reference on its
 * pages (pagecount.h), so that free/realloc of that memory is deferred and writes are fenced
 * until the completion; the message then owns the array's cache references and bounce slabs,
 * and the completion drops them all, from whichever thread runs it.
 *
 * Entries are resolved when added, against the default backend (nic_sga_init has no endpoint).
 * An endpoint of another backend gets them resolved again here, against its own: its chunk
 * registrations and its registration cache, bounce slabs included; the default backend's cache
 * references are let go at once, as nothing of that backend reads the message. */
#include "api_errors.h"
#include "backend.h"
#include "bounce.h"
#include "chunks.h"
#include "endpoint_common.h"
#include "export.h"
#include "fence.h"
#include "log.h"
#include "nicmalloc.h"
#include "nudge.h"
#include "pagecount.h"
#include "pressure.h"
#include "rcache.h"
#include "readable.h"
#include "receive.h"
#include "safety.h"
#include "thread.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct message {
  nic_sga_done_fn done;
  void *arg;
  void *bounce;
  struct nic_rcache *cache; /* whose slots the entries hold: NULL the process-wide cache */
  uint32_t n;
  struct nic_sga_entry entry[];
};

static bool direct(const struct nic_sga_entry *e) {
  return e->kind != NIC_SGA_BOUNCE;
}

static void unref_pages(const struct message *m, uint32_t upto) {
  for (uint32_t i = 0; i < upto; i++)
    if (direct(&m->entry[i]))
      nic_pc_sub((uintptr_t)m->entry[i].addr, (uintptr_t)m->entry[i].addr + m->entry[i].len,
                 NIC_PC_DMA);
}

static void release_slots(struct nic_rcache *cache, const struct nic_sga_entry *e, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (!nic_sga_entry_slot(&e[i]))
      continue;
    else if (cache)
      nic_rcache_release_own_in(cache, e[i].cache_slot);
    else
      nic_rcache_release_own(e[i].cache_slot);
}

static void release(struct message *m) {
  release_slots(m->cache, m->entry, m->n);
  nic_bounce_free(m->bounce);
}

/* An entry b cannot register that can be read (-EFAULT: b pins pages for writing, as io_uring
 * does, and these are read-only or a shared mapping of a disk file) is copied into the message's
 * bounce slabs, as nic_sga_add copies it for the default backend; the copy is registered with b.
 * A dataplane entry is not: its step's -EFAULT (made partly read-only) stays the post's. */
static int copy_for(struct nic_backend *b, struct message *m, struct nic_sga_entry *e,
                    struct nic_region_ref *ref) {
  if (e->kind == NIC_SGA_BOUNCE || nic_in_dp(e->addr) || !nic_range_readable(e->addr, e->len))
    return -EFAULT;
  struct nic_sga_entry copy;
  int rc = nic_bounce_copy(&m->bounce, e->addr, e->len, NULL, 0, &copy);
  if (rc) return rc;
  *e = copy;
  return nic_register_with(b, e->addr, e->len, NIC_REG_LOCAL, ref);
}

/* The message's entries resolved against b, which is not the default backend: 0, or the error
 * that makes the post fail (every reference taken here let go again, and every copy made here
 * given back: the slabs from mark on). */
__attribute__((noinline)) static int resolve_for(struct nic_backend *b, struct message *m,
                                                 struct nic_bounce_mark mark) {
  struct nic_rcache *cache = nic_rcache_of(b);
  if (!cache) return -ENOMEM;
  for (uint32_t i = 0; i < m->n; i++) {
    struct nic_sga_entry *e = &m->entry[i];
    struct nic_region_ref ref;
    int rc = nic_register_with(b, e->addr, e->len, NIC_REG_LOCAL, &ref);
    if (rc == -EFAULT) rc = copy_for(b, m, e, &ref);
    if (rc) {
      release_slots(cache, m->entry, i);
      nic_bounce_rewind(&m->bounce, mark);
      return rc;
    }
    e->lkey = ref.lkey;
    e->handle = ref.backend_handle;
    e->cache_slot = ref.kind == NIC_REGION_CACHED ? ref.cache_slot : 0;
    if (e->kind != NIC_SGA_BOUNCE) e->kind = ref.kind;
  }
  m->cache = cache;
  return 0;
}

void (*nic_safety_unref_hook)(const struct nic_sga_entry *e, uint32_t n);

/* The message's pages go back to the program: their references first, then their protection
 * (the release is decided from the counts). In between the pages may be clear to the counts and
 * still protected, so frees keep off their fast path (the last reference dropped would let
 * them take it) and ask the protection too (deferred.c). */
static void unref_and_unprotect(const struct message *m) {
  const bool protect = nic_fence_protect_started();
  if (protect) nic_watch_blocks(1); /* before the references go: events.h */
  unref_pages(m, m->n);
  void (*hook)(const struct nic_sga_entry *, uint32_t) =
      __atomic_load_n(&nic_safety_unref_hook, __ATOMIC_ACQUIRE);
  if (hook) hook(m->entry, m->n);
  nic_fence_completed(m->entry, m->n); /* after: pages no entry covers now become writable */
  if (protect) nic_watch_blocks(-1);
}

static void completed(void *arg, int status) {
  struct message *m = arg;
  nic_fence_completion_begin();
  nic_fence_completing(m, status);
  unref_and_unprotect(m);
  __atomic_sub_fetch(&nic_safety_ctr.inflight_entries, m->n, __ATOMIC_RELAXED);
  __atomic_sub_fetch(&nic_safety_ctr.inflight_posts, 1, __ATOMIC_RELAXED);
  nic_safety_retry_deferred(); /* frees that waited for these pages */
  release(m);
  if (m->done) {
    const int internal = nic_internal_suspend(); /* the program's function: its own scope */
    m->done(m->arg, status);
    nic_internal_resume(internal);
  }
  free(m);
  nic_fence_completion_end();
}

/* Entries of the default backend's cache whose region went stale since nic_sga_add: pages it
 * covers were unmapped, remapped or dropped, and the registration holds pages the process no
 * longer has there. Each is registered anew where its memory still is (the region may be larger
 * than the entry and have gone stale elsewhere); 0, or the index + 1 of one whose memory is gone
 * (-EFAULT), or the registration's error in *err. A stale registration never reaches the NIC. */
__attribute__((noinline)) static uint32_t renew_stale(struct nic_sga *sga, int *err) {
  struct nic_rcache *cache = nic_rcache_process();
  for (uint32_t i = 0; i < sga->count; i++) {
    struct nic_sga_entry *e = &sga->entry[i];
    if (!nic_sga_entry_slot(e) || nic_rcache_region_current(cache, e->cache_slot)) continue;
    struct nic_region_ref ref;
    *err = nic_range_readable(e->addr, e->len)
               ? nic_register_quiet(e->addr, e->len, NIC_REG_LOCAL, &ref)
               : -EFAULT;
    if (*err) return i + 1;
    nic_rcache_release_own(e->cache_slot);
    e->lkey = ref.lkey;
    e->handle = ref.backend_handle;
    e->cache_slot = ref.cache_slot; /* an arena's: its generation, as nic_sga_add records */
    e->kind = ref.kind;
  }
  return 0;
}

/* In a child of fork, copies made before the fork carry the key of the parent's registration of
 * their bounce slab, which the child's backend never made (regcache/cache/backend.h). The slab
 * is the array's own and still there: each copy takes the registration its memory has now, made
 * if it has none (a slab of control memory takes a cache reference, as a cached entry does).
 * Nothing is known to tell the copies made since the fork apart, so all are asked: in a child
 * only, one registration lookup a copy. 0, or the index + 1 of one that cannot be registered
 * (the error in *err). */
__attribute__((noinline)) static uint32_t renew_copies(struct nic_sga *sga, int *err) {
  for (uint32_t i = 0; i < sga->count; i++) {
    struct nic_sga_entry *e = &sga->entry[i];
    if (e->kind != NIC_SGA_BOUNCE) continue;
    struct nic_region_ref ref;
    if ((*err = nic_register_quiet(e->addr, e->len, NIC_REG_LOCAL, &ref)) != 0) return i + 1;
    if (e->cache_slot) nic_rcache_release_own(e->cache_slot);
    e->lkey = ref.lkey;
    e->handle = ref.backend_handle;
    e->cache_slot = ref.kind == NIC_REGION_CACHED ? ref.cache_slot : 0;
  }
  return 0;
}

/* Dataplane entries whose step was given back since nic_sga_add: a step goes only once nothing
 * live is left on it, so the entry's block was freed, and its key is dead, or (the step
 * registered again for a new block) names memory that is someone else's now. The key alone
 * cannot tell: a backend may hand out the same one again (an io_uring slot, lowest free first),
 * so the step's generation, recorded in the entry, is compared too. 0, or the index + 1 of the
 * first such entry. Checked before any backend sees the message, for every endpoint: the
 * entries carry the default backend's key, and translation reads the default backend's. */
__attribute__((noinline)) static uint32_t freed_arena_entry(const struct nic_sga *sga) {
  for (uint32_t i = 0; i < sga->count; i++) {
    const struct nic_sga_entry *e = &sga->entry[i];
    struct nic_region_ref now;
    if (e->kind != NIC_REGION_ARENA) continue;
    if (nic_translate(e->addr, e->len, &now) != 0 || now.lkey != e->lkey ||
        now.backend_handle != e->handle || nic_step_generation_of(e->addr) != e->cache_slot)
      return i + 1;
  }
  return 0;
}

NIC_EXPORT int nic_sga_post(struct nic_sga *sga, struct nic_endpoint *ep, nic_sga_done_fn done,
                            void *arg) {
  struct nic_backend *const d = nic_backend_active(), *b = d ? nic_ep_backend_of(ep) : NULL;
  if (!nic_sga_ready(sga) || !sga->count) {
    nic_api_error(sga, "nic_sga_post(%p): the array is empty or not initialised", (void *)sga);
    return -EINVAL;
  }
  if (!b && d && nic_ep_inherited(ep)) {
    nic_api_error(sga, "nic_sga_post(%p): %s; nothing posted", (void *)ep, nic_ep_inherited_why());
    return -ENODEV;
  }
  if (!b) return nic_sga_no_backend("nic_sga_post");
  /* The array's limit is the default backend's (nic_sga_init): another may take fewer. */
  if (b != d && sga->count > b->caps.max_sge) {
    nic_api_error_by(sga, b, 0,
                     "nic_sga_post: %u entries, and the endpoint's backend %s takes %u per post "
                     "(nic_sga_init(sga, %u) keeps the array within it)",
                     sga->count, b->name, b->caps.max_sge, b->caps.max_sge);
    return -E2BIG;
  }
  /* Longer than one message of the endpoint's backend: refused before anything is taken for it,
   * whatever the backend (io_uring: one send takes at most Linux's MAX_RW_COUNT). */
  if (b->caps.max_message && sga->bytes > b->caps.max_message) {
    nic_api_error_by(sga, b, 0,
                     "nic_sga_post: %llu bytes, and one message of the endpoint's backend %s "
                     "takes at most %zu (nic_endpoint_limits); nothing posted",
                     (unsigned long long)sga->bytes, b->name, b->caps.max_message);
    return -EMSGSIZE;
  }
  /* The message and the backend's own bookkeeping are control memory. Completions (and the
   * program's callbacks) come from nic_poll or the backend's thread, never from inside here. */
  NIC_INTERNAL_SCOPE();
  const uint32_t freed = freed_arena_entry(sga);
  if (freed) {
    nic_api_error(sga,
                  "nic_sga_post: the dataplane block of entry %u (%p, %u bytes) was freed since "
                  "nic_sga_add (its step was given back)%s; nothing posted",
                  freed - 1, sga->entry[freed - 1].addr, sga->entry[freed - 1].len,
                  nic_backend_generation() ? ", or added before this process was forked (a child "
                                             "of fork posts the arrays it filled)"
                                           : "");
    return -NIC_EFREED;
  }
  int rc = 0;
  uint32_t stale = b == d ? renew_stale(sga, &rc) : 0; /* b's own: resolve_for below */
  if (!stale && b == d && __builtin_expect(nic_backend_generation() != 0, 0))
    stale = renew_copies(sga, &rc);
  if (stale) {
    if (rc == -EFAULT)
      nic_api_error(sga,
                    "nic_sga_post: the memory of entry %u (%p, %u bytes) was unmapped since "
                    "nic_sga_add; nothing posted",
                    stale - 1, sga->entry[stale - 1].addr, sga->entry[stale - 1].len);
    else
      nic_api_error_by(sga, rc, 0,
                       "nic_sga_post: entry %u (%p) cannot be registered anew after its pages "
                       "changed (%s); nothing posted",
                       stale - 1, sga->entry[stale - 1].addr, strerror(-rc));
    return rc;
  }
  const uint32_t n = sga->count;
  struct message *m = malloc(sizeof *m + n * sizeof *m->entry);
  if (!m) {
    nic_api_error(sga, "nic_sga_post: no memory for the message's bookkeeping; nothing posted");
    return -ENOMEM;
  }
  *m = (struct message){.done = done, .arg = arg, .bounce = sga->bounce, .n = n};
  memcpy(m->entry, sga->entry, n * sizeof *m->entry);
  /* Copies made for b go on the array's chain: given back to this mark if the post fails. */
  const struct nic_bounce_mark mark = nic_bounce_mark(sga->bounce);
  rc = b == d ? 0 : resolve_for(b, m, mark);
  if (rc) {
    free(m);
    nic_api_error_by(sga, rc, 0,
                     "nic_sga_post: the entries cannot be registered with the endpoint's backend "
                     "%s (%s)",
                     b->name, strerror(-rc));
    return rc;
  }
  struct nic_sge sge[NIC_SGA_CAPACITY];
  uint32_t i = 0;
  for (; i < n && rc == 0; i++) {
    const struct nic_sga_entry *e = &m->entry[i];
    sge[i] = (struct nic_sge){.addr = e->addr, .len = e->len, .lkey = e->lkey, .handle = e->handle};
    if (direct(e) && !nic_pc_add((uintptr_t)e->addr, (uintptr_t)e->addr + e->len, NIC_PC_DMA))
      rc = -ENOMEM;
  }
  if (rc) {
    unref_pages(m, i - 1);
    if (m->cache) release_slots(m->cache, m->entry, n);
    nic_bounce_rewind(&m->bounce, mark);
    free(m);
    nic_api_error(sga, "nic_sga_post: no memory to track the entries in flight");
    return rc;
  }
  NIC_SAFETY_COUNT(inflight_posts, 1);
  NIC_SAFETY_COUNT(inflight_entries, n);
  /* From here the backend may hand the entries to the NIC at any time, inside its post: a write
   * of this thread to their pages is held like any other (the backends keep what they write in
   * a post in mappings of their own, so that the post itself never waits for its own DMA). */
  nic_fence_posted(m, m->entry, n); /* NICMALLOC_FENCE=protect|detect, before the NIC can read */
  /* Read now: once the backend has it, m is the completion's, which frees it, maybe on another
   * thread's nic_poll before the post returns. */
  const bool message_has_own_refs = m->cache != NULL;
  rc = b->post(b, ep, sge, n, completed, m);
  if (rc) {
    __atomic_sub_fetch(&nic_safety_ctr.inflight_entries, n, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&nic_safety_ctr.inflight_posts, 1, __ATOMIC_RELAXED);
    nic_fence_completing(m, rc);
    unref_and_unprotect(m);
    nic_safety_retry_deferred();
    if (m->cache) release_slots(m->cache, m->entry, n);
    nic_bounce_rewind(&m->bounce, mark);
    free(m);
    /* A full queue is the endpoint's flow control, not a wrong call: the caller polls and posts
     * again, maybe many times, so it is neither counted nor said. */
    if (rc == -EAGAIN) return rc;
    nic_api_error_by(sga, rc, 0, "nic_sga_post: backend %s refused the message (%s)", b->name,
                     rc == -E2BIG ? "more entries than the endpoint takes: its queue pair's "
                                    "max_send_sge or its port's segments per packet, below the "
                                    "array's limit; nic_sga_init(sga, n) keeps it within"
                                  : strerror(-rc));
    return rc;
  }
  /* Only what the NIC was given takes room in its translation cache: a refused post is not
   * recorded. The array's entries, not the message's: the model counts the default backend's
   * registrations, whatever the endpoint's backend. */
  nic_pressure_note(sga->entry, n);
  /* The message owns the references now: the array's own when its backend took it, else those
   * made for b (resolve_for), and the array's go now. */
  if (message_has_own_refs) release_slots(NULL, sga->entry, n);
  sga->count = 0;
  sga->bytes = 0;
  sga->bounce = NULL;
  return 0;
}

/* The backends' work runs in nicmalloc's own scope: what a backend's code allocates there (DPDK's
 * thread-local blocks, on a thread's first poll) must not become dataplane memory because the
 * caller polls inside a dataplane scope. The program's functions run in its scope (completed,
 * receive.c's hand_over). */
NIC_EXPORT int nic_poll(int max) {
  nic_nudge_answer_pending(); /* before the scope: a thread that polls and seldom allocates */
  NIC_INTERNAL_SCOPE();
  if (max < 0) max = 0; /* negative: all, as 0 (nicmalloc.h) */
  /* Messages that waited for the cap on held bytes first: they came before the backends' own. */
  int ran = nic_receive_drain(max);
  if (max == 0 || ran < max) ran += nic_backends_poll(max ? max - ran : 0);
  if (ran) nic_rcache_retry_busy_all(); /* a registration refused as busy may be free now */
  return ran;
}
