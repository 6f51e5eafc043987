/* nic_register: one entry point for "make the NIC able to reach this range", whichever memory
 * it is. Arena memory needs no reference (its chunk stays while any block in it is live); a
 * cached region is held until nic_unregister. */
#include "api_errors.h"
#include "chunk_reg.h"
#include "chunks.h"
#include "export.h"
#include "log.h"
#include "nicmalloc.h"
#include "owns.h"
#include "rcache.h"
#include "thread.h"

#include <errno.h>
#include <string.h>

_Static_assert(NIC_REG_LOCAL_WRITE == NIC_ACCESS_LOCAL_WRITE &&
                   NIC_REG_REMOTE_READ == NIC_ACCESS_REMOTE_READ &&
                   NIC_REG_REMOTE_WRITE == NIC_ACCESS_REMOTE_WRITE,
               "public and backend access flags must agree");

static inline __attribute__((always_inline)) int register_with(struct nic_backend *b, const void *p,
                                                               size_t len, unsigned access,
                                                               struct nic_region_ref *out,
                                                               bool generation);

#if defined(__LP64__)
/* cache_gen took the tail padding: a reference is the size it was, its other members where they
 * were, for programs built against the header before it. */
_Static_assert(sizeof(struct nic_region_ref) == 56 &&
                   offsetof(struct nic_region_ref, cache_gen) ==
                       offsetof(struct nic_region_ref, cache_slot) + 4,
               "struct nic_region_ref's layout changed");
#endif

#define KNOWN_ACCESS (NIC_REG_LOCAL_WRITE | NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE)

static inline __attribute__((always_inline)) int register_checked(const void *p, size_t len,
                                                                  unsigned access,
                                                                  struct nic_region_ref *out,
                                                                  bool generation) {
  if (!out || (access & ~KNOWN_ACCESS)) return -EINVAL;
  if (!nic_range_watched(p, len)) return -EPERM;
  return register_with(NULL, p, len, access, out, generation);
}

int nic_register_quiet(const void *p, size_t len, unsigned access, struct nic_region_ref *out) {
  return register_checked(p, len, access, out, true);
}

/* The program's call: an error it gets back is counted, and each kind said once. */
static __attribute__((noinline, cold)) void
registration_refused(const void *p, size_t len, unsigned access, const void *out, int rc) {
  bool of_cache = false;
  const size_t limit =
      rc == -NIC_ERANGE ? nic_rcache_limit_passed(nic_rcache_process(), p, len, &of_cache) : 0;
  const char *why =
      rc == -EINVAL && !out                       ? "the result pointer is NULL"
      : rc == -EINVAL && (access & ~KNOWN_ACCESS) ? "unknown access bits"
      : rc == -EPERM ? "not nicmalloc's memory, in a program whose malloc is another's: its frees "
                       "and unmaps go unseen, so a registration could outlive its pages. Register "
                       "nicmalloc's blocks (nic_malloc); posts copy other memory"
      : rc == -NIC_ERANGE && !limit ? "the length is 0 or the range wraps"
      : rc == -NIC_ERANGE && of_cache
          ? "its pages are more than the registration cache holds, NICMALLOC_RCACHE_MAX_BYTES"
      : rc == -NIC_ERANGE ? "its pages are more than one registration of the backend may cover"
      : rc == -NIC_ECROSS ? "the dataplane range runs off its chunk's mapped memory"
      : rc == -EFAULT ? "the range is not (entirely) mapped, or write access was asked for memory "
                        "that is not writable"
      : rc == -ENOSPC && nic_in_dp(p)
          ? "the backend has no room for its dataplane step's registration: every registration "
            "it holds is in use (none of the registration cache's is idle)"
      : rc == -ENOSPC ? "no room for another registration: every one the registration cache or the "
                        "backend holds is in use (or, as said then, its pages stayed "
                        "write-protected by a post)"
                      : NULL;
  if (why && limit)
    nic_api_error_by(registration, rc, why,
                     "nic_register(%p, %zu, %#x): %s (%zu bytes); not registered", p, len, access,
                     why, limit);
  else if (why)
    nic_api_error_by(registration, rc, why, "nic_register(%p, %zu, %#x): %s; not registered", p,
                     len, access, why);
  else
    nic_api_error_by(registration, rc, 0, "nic_register(%p, %zu, %#x): not registered (%s)", p, len,
                     access, strerror(rc < 0 && rc > -4096 ? -rc : EINVAL));
}

NIC_EXPORT int nic_register(const void *p, size_t len, unsigned access,
                            struct nic_region_ref *out) {
  const int rc = register_checked(p, len, access, out, false);
  if (__builtin_expect(rc != 0, 0)) registration_refused(p, len, access, out, rc);
  return rc;
}

int nic_register_with(struct nic_backend *b, const void *p, size_t len, unsigned access,
                      struct nic_region_ref *out) {
  return register_with(b, p, len, access, out, false);
}

/* A dataplane range that nic_translate found crossing a step end: whether every chunk it reaches
 * is mapped (else it runs off its memory, and stays -NIC_ECROSS). */
static bool in_mapped_chunks(const void *p, size_t len) {
  const char *last = (const char *)p + len - 1;
  if (!nic_in_dp(last)) return false;
  for (unsigned i = nic_chunk_index(p); i <= nic_chunk_index(last); i++)
    if (!nic_chunk_readable(i)) return false;
  return true;
}

/* b NULL: the default backend. Inlined into both callers: nic_register is on every entry's
 * path (nic_sga_add), and a call more there costs what the split saves nowhere. generation: an
 * arena range's cache_slot gets its step's generation (rcache.h), read from the same index as
 * the step's registration, a load more. */
static inline __attribute__((always_inline)) int register_with(struct nic_backend *b, const void *p,
                                                               size_t len, unsigned access,
                                                               struct nic_region_ref *out,
                                                               bool generation) {
  int rc = nic_translate(p, len, out);
  if (rc == -NIC_ERANGE || (rc == -NIC_ECROSS && !in_mapped_chunks(p, len))) return rc;
  /* Across a step end no one step's registration covers the range: it gets one of its own. */
  if (rc == -NIC_ECROSS) access |= NIC_RCACHE_OWN;
  if (rc == 0 && !(access & (NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE))) {
    /* A step the default backend registered already: what every dataplane entry after the
     * step's first finds, with nothing to allocate. */
    const unsigned step = nic_step_index(p);
    if (generation)
      out->cache_slot =
          __atomic_load_n(nic_step_generation_at(out->chunk_index, step), __ATOMIC_ACQUIRE);
    const struct nic_registration *own = b ? NULL : nic_chunk_registration(out->chunk_index, step);
    if (__builtin_expect(own != NULL, 1)) {
      out->lkey = own->lkey;
      out->backend_handle = own->handle;
      return 0;
    }
    /* A backend's registration may allocate: nicmalloc's own memory, whatever the caller's
     * dataplane scope (the scope costs two recomputations of the thread's fast paths, so it is
     * taken only here). */
    NIC_INTERNAL_SCOPE();
    struct nic_registration reg;
    rc = b ? nic_chunk_register_with(out->chunk_index, step, b, &reg)
           : nic_chunk_register(out->chunk_index, step, &reg);
    if (rc) return rc;
    out->lkey = reg.lkey;
    out->backend_handle = reg.handle;
    return 0;
  }
  NIC_INTERNAL_SCOPE();
  struct nic_rcache_ref ref;
  struct nic_rcache *c = b ? nic_rcache_of(b) : nic_rcache_process();
  if (!c) return -ENOMEM;
  rc = nic_rcache_acquire(c, p, len, access, &ref);
  if (rc) return rc == -ERANGE ? -NIC_ERANGE : rc;
  out->kind = NIC_REGION_CACHED;
  out->chunk_index = 0;
  out->region_base = ref.reg.base;
  out->region_len = ref.reg.len;
  out->offset = (size_t)((const char *)p - (const char *)ref.reg.base);
  out->lkey = ref.reg.lkey;
  /* Registrations with remote access are never cached, so never serve a local request; should
   * a backend put a remote key in a local registration, it still goes to nobody. */
  out->rkey = access & (NIC_REG_REMOTE_READ | NIC_REG_REMOTE_WRITE) ? ref.reg.rkey : 0;
  out->backend_handle = ref.reg.handle;
  out->cache_slot = ref.slot;
  out->cache_gen = ref.gen;
  return 0;
}

/* A reference unregistered twice would take the cache's own reference: the region would stay
 * in the table with its registration gone and never be evicted. */
NIC_EXPORT void nic_unregister(const struct nic_region_ref *ref) {
  NIC_INTERNAL_SCOPE();
  if (!ref || ref->kind != NIC_REGION_CACHED || !ref->cache_slot) return;
  const int rc = nic_rcache_release_checked(nic_rcache_process(), ref->cache_slot, ref->cache_gen);
  if (rc == -ESTALE)
    nic_api_error(registration,
                  "nic_unregister(%p): the memory of [%p, +%zu) was unmapped or replaced while it "
                  "was registered with remote access: its remote key was revoked then; the "
                  "reference is let go now",
                  (const void *)ref, ref->region_base, ref->region_len);
  else if (rc)
    nic_api_error(registration,
                  "nic_unregister(%p): registration-cache reference %#x holds no registration of "
                  "yours (unregistered already?); ignored",
                  (const void *)ref, ref->cache_slot);
  nic_rcache_frees_may_go(); /* the frees its pages kept waiting */
}

void nic_rcache_release_own(uint32_t slot) {
  NIC_INTERNAL_SCOPE();
  nic_rcache_release(nic_rcache_process(), slot);
}

void nic_rcache_release_own_in(struct nic_rcache *c, uint32_t slot) {
  NIC_INTERNAL_SCOPE();
  nic_rcache_release(c, slot);
}
