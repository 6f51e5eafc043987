/* Building a scatter-gather array: each entry is resolved when added (arena → its step's
 * registration, split where it crosses steps, other memory → the registration cache, short or
 * unregistrable → a bounce copy), coalesced with its neighbour when contiguous in the same
 * registration, and past the entry limit the smallest neighbours are copied together. Posting is in
 * sga_post.c. */
#define _GNU_SOURCE
#include "api_errors.h"
#include "backend.h"
#include "block.h"
#include "bounce.h"
#include "chunks.h"
#include "export.h"
#include "log.h"
#include "nicmalloc.h"
#include "own_stack.h"
#include "owns.h"
#include "pagecount.h"
#include "pressure.h"
#include "profile.h"
#include "rcache.h"
#include "readable.h"
#include "safety.h"

#include <errno.h>
#include <string.h>

#define MERGE_MAX ((size_t)64 << 10)         /* largest pair copied to stay under the entry limit */
#define PRESSURE_COPY_MAX ((size_t)16 << 10) /* "small" under pressure: a copy beats a register */

NIC_EXPORT int nic_sga_init(struct nic_sga *sga, unsigned max_entries) {
  if (!sga) {
    nic_api_count(sga);
    return -EINVAL;
  }
  struct nic_backend *b = nic_backend_active();
  if (!b) {
    nic_api_error(sga, "nic_sga_init: no registration backend could be opened (%s)",
                  nic_backend_missing_why() ? nic_backend_missing_why() : "NICMALLOC_BACKEND");
    return -ENODEV;
  }
  unsigned limit = b->caps.max_sge < NIC_SGA_CAPACITY ? b->caps.max_sge : NIC_SGA_CAPACITY;
  if (max_entries > limit) {
    nic_api_error(sga, "nic_sga_init: %u entries asked for; backend %s and the array allow %u",
                  max_entries, b->name, limit);
    return -E2BIG;
  }
  sga->count = 0;
  sga->max = max_entries ? max_entries : limit;
  sga->bytes = 0;
  sga->bounce = NULL;
  return 0;
}

static void drop_entry(struct nic_sga_entry *e) {
  if (nic_sga_entry_slot(e)) {
    nic_rcache_release_own(e->cache_slot);
    e->cache_slot = 0;
  }
}

NIC_EXPORT void nic_sga_reset(struct nic_sga *sga) {
  if (!sga) return;
  for (uint32_t i = 0; i < sga->count; i++)
    drop_entry(&sga->entry[i]);
  nic_bounce_free(sga->bounce);
  sga->bounce = NULL;
  sga->count = 0;
  sga->bytes = 0;
}

/* Copies [p, p+len) (and [q, q+qlen) after it, when q) into the bounce area as entry *e. */
static int copy_entry(struct nic_sga *sga, const void *p, size_t len, const void *q, size_t qlen,
                      struct nic_sga_entry *e) {
  int err = 0;
  uint32_t lkey;
  uint64_t handle;
  char *dst = nic_bounce_take(&sga->bounce, len + qlen, &lkey, &handle, &err);
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

/* Resolves one entry: direct (arena, cache) or copied. */
static int resolve(struct nic_sga *sga, const void *p, size_t len, struct nic_sga_entry *e) {
  if (len < nic_safety_config()->copy_threshold) {
    nic_own_stack_learn(); /* once per thread: a short entry is often on the caller's stack */
    if (!nic_range_readable(p, len)) return -EFAULT;
    return copy_entry(sga, p, len, NULL, 0, e);
  }
  /* Where nicmalloc is not the malloc, memory that is not its own cannot be registered
   * (nic_register): copied, as any memory that cannot be registered now. */
  if (!nic_range_watched(p, len)) {
    if (!nic_range_readable(p, len)) return -EFAULT;
    return copy_entry(sga, p, len, NULL, 0, e);
  }
  struct nic_region_ref ref;
  int rc;
  /* Under translation-cache pressure a new registration for a small entry costs the NIC more
   * than the copy: take a cached one if it exists, else copy. */
  if (!nic_in_dp(p) && len < PRESSURE_COPY_MAX && nic_pressure_high()) {
    struct nic_rcache_ref cached;
    if (nic_rcache_find(nic_rcache_process(), p, len, NIC_ACCESS_LOCAL, &cached) != 0) {
      if (!nic_range_readable(p, len)) return -EFAULT;
      nic_pressure_count_copy();
      return copy_entry(sga, p, len, NULL, 0, e);
    }
    ref = (struct nic_region_ref){.kind = NIC_REGION_CACHED,
                                  .lkey = cached.reg.lkey,
                                  .backend_handle = cached.reg.handle,
                                  .cache_slot = cached.slot};
    rc = 0;
  } else {
    rc = nic_register_quiet(p, len, NIC_REG_LOCAL, &ref);
  }
  if (rc == 0) {
    *e = (struct nic_sga_entry){.addr = p,
                                .len = (uint32_t)len,
                                .lkey = ref.lkey,
                                .handle = ref.backend_handle,
                                .cache_slot = ref.cache_slot, /* an arena's: its generation */
                                .kind = ref.kind};
    return 0;
  }
  if (rc == -EFAULT || rc == -NIC_ERANGE || rc == -NIC_ECROSS || rc == -ENODEV) return rc;
  if (!nic_range_readable(p, len)) return -EFAULT;
  return copy_entry(sga, p, len, NULL, 0, e); /* registrable in principle, not now: copy */
}

static bool contiguous(const struct nic_sga_entry *a, const struct nic_sga_entry *b) {
  /* The handle too: two steps' registrations (io_uring fixed-buffer slots) may share a key. */
  return a->kind == b->kind && a->lkey == b->lkey && a->handle == b->handle &&
         a->cache_slot == b->cache_slot &&
         (const char *)a->addr + a->len == (const char *)b->addr &&
         (uint64_t)a->len + b->len <= UINT32_MAX;
}

/* The array is full: copy the adjacent pair (the new entry counts as the last) with the
 * smallest total into one bounce entry. */
static int merge_smallest(struct nic_sga *sga, struct nic_sga_entry *fresh) {
  struct nic_sga_entry *ent = sga->entry;
  uint32_t n = sga->count, best = n;
  uint64_t best_len = UINT64_MAX;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t total = (uint64_t)ent[i].len + (i + 1 < n ? ent[i + 1].len : fresh->len);
    if (total < best_len) best_len = total, best = i;
  }
  if (best_len > MERGE_MAX) return -E2BIG;
  struct nic_sga_entry *a = &ent[best], *b = best + 1 < n ? &ent[best + 1] : fresh, merged;
  /* An entry added before may lie in memory the program has unmapped since (its use after free):
   * the copy would take the process down here. */
  if ((a->kind != NIC_SGA_BOUNCE && !nic_range_readable(a->addr, a->len)) ||
      (b->kind != NIC_SGA_BOUNCE && !nic_range_readable(b->addr, b->len)))
    return -EFAULT;
  int rc = copy_entry(sga, a->addr, a->len, b->addr, b->len, &merged);
  if (rc) return rc;
  drop_entry(a);
  drop_entry(b);
  *a = merged;
  if (b != fresh) { /* close the gap, then append the new entry */
    memmove(b, b + 1, (size_t)(n - best - 2) * sizeof *b);
    ent[n - 1] = *fresh;
  }
  return 0;
}

static int add_piece(struct nic_sga *sga, const void *p, size_t len) {
  struct nic_sga_entry e;
  int rc = resolve(sga, p, len, &e);
  if (rc == 0 && sga->count && contiguous(&sga->entry[sga->count - 1], &e)) {
    sga->entry[sga->count - 1].len += e.len;
    drop_entry(&e); /* the entry before holds the same cache region already */
  } else if (rc == 0 && sga->count < sga->max) {
    sga->entry[sga->count++] = e;
  } else if (rc == 0 && (rc = merge_smallest(sga, &e)) != 0) {
    drop_entry(&e);
  }
  return rc;
}

/* Bytes from p to the end of its step. */
static size_t step_rest(const void *p) {
  const size_t step = (size_t)1 << nic_dp.step_shift;
  return step - ((uintptr_t)p & (step - 1));
}

/* Dataplane memory across steps: each step is its own registration (an io_uring fixed buffer
 * is one slot, and a post must stay inside one), so one entry per step. All of them fit, or
 * none is added. */
static int add_pieces(struct nic_sga *sga, const void *p, size_t len, size_t first) {
  const size_t step = (size_t)1 << nic_dp.step_shift;
  const size_t pieces = 1 + (len - first + step - 1) / step;
  const uint32_t count = sga->count;
  if (count + pieces > sga->max) return -E2BIG;
  const struct nic_sga_entry last = count ? sga->entry[count - 1] : (struct nic_sga_entry){0};
  const char *at = p;
  size_t piece = first, left = len;
  int rc = 0;
  while (left && (rc = add_piece(sga, at, piece)) == 0) {
    at += piece;
    left -= piece;
    piece = left < step ? left : step;
  }
  if (rc == 0) return 0;
  for (uint32_t i = count; i < sga->count; i++)
    drop_entry(&sga->entry[i]);
  sga->count = count;
  if (count) sga->entry[count - 1] = last;
  return rc;
}

NIC_EXPORT int nic_sga_add(struct nic_sga *sga, const void *p, size_t len) {
  uintptr_t start = (uintptr_t)p, last;
  if (!sga || !sga->max || sga->max > NIC_SGA_CAPACITY || sga->count > sga->max) {
    nic_api_error(sga, "nic_sga_add(%p): the array is not initialised (nic_sga_init)", (void *)sga);
    return -EINVAL;
  }
  if (!nic_pc_user_range(p, len) || len > UINT32_MAX ||
      __builtin_add_overflow(start, len - 1, &last)) {
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): length is 0, overflows (past the user space), or is "
                  "over 4 GiB",
                  p, len);
    return -NIC_ERANGE;
  }
  if (nic_safety_was_freed(p)) {
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): no live block starts here (freed, or never handed out)", p,
                  len);
    return -NIC_EFREED;
  }
  const struct nic_bounce_mark mark = nic_bounce_mark(sga->bounce);
  /* A short range is copied whole (resolve), wherever it lies: as two pieces it took two entries,
   * and a full array refused it. */
  size_t first = nic_in_dp(p) && len >= nic_safety_config()->copy_threshold ? step_rest(p) : len;
  /* Into a chunk that is not mapped: the pieces before it would be sent, the rest not. */
  const char *end = (const char *)p + len - 1;
  if (first < len && (!nic_in_dp(end) || !nic_chunk_readable(nic_chunk_index(end)))) first = len;
  int rc = first >= len ? add_piece(sga, p, len) : add_pieces(sga, p, len, first);
  if (rc == 0) {
    sga->bytes += len;
    nic_sink_range(p, len); /* a sink for NICMALLOC_PROFILE and the sent-bytes counts */
    return 0;
  }
  nic_bounce_rewind(&sga->bounce, mark);
  if (rc == -EFAULT && !nic_range_readable(p, len))
    nic_api_error(sga, "nic_sga_add(%p, %zu): the range is not (entirely) mapped", p, len);
  else if (rc == -EFAULT && nic_in_dp(p) && sga->count < sga->max) /* no copy of two made */
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): part of its step is not writable (mprotect): the step "
                  "cannot be faulted in for the NIC before its first registration",
                  p, len);
  else if (rc == -EFAULT)
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): past the limit of %u entries two are copied into one, "
                  "and the memory of an entry added before was unmapped since: the array is "
                  "left as it was (nic_sga_reset drops it)",
                  p, len, sga->max);
  else if (rc == -E2BIG)
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): more than %u entries, and no neighbours small enough "
                  "(under %zu bytes together) to copy into one",
                  p, len, sga->max, MERGE_MAX);
  else if (rc == -NIC_ECROSS) /* each kind has its own line, said once */
    nic_api_error(sga, "nic_sga_add(%p, %zu): cannot be resolved (crosses the end of its chunk)", p,
                  len);
  else if (rc == -NIC_ERANGE)
    nic_api_error(sga, "nic_sga_add(%p, %zu): cannot be resolved (too large for one registration)",
                  p, len);
  else
    nic_api_error_by(sga, rc, 0, "nic_sga_add(%p, %zu): cannot be resolved (%s)", p, len,
                     strerror(-rc));
  return rc;
}
