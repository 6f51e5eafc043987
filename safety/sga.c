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

int nic_sga_no_backend(const char *caller) {
  const char *kind = "";
  const int short_of = nic_backend_default_short_of(&kind);
  if (nic_backend_missing_why())
    nic_api_error_by(sga, caller, 0, "%s: no registration backend (%s)", caller,
                     nic_backend_missing_why());
  else if (short_of) /* tried again: -ENODEV meanwhile, said as that, not as none for good */
    nic_api_error_by(sga, caller, short_of, "%s: " NIC_BACKEND_SHORT_FMT "; -ENODEV meanwhile",
                     caller, kind, strerror(short_of));
  else
    nic_api_error_by(sga, caller, -1,
                     "%s: no registration backend could be opened (NICMALLOC_BACKEND; the "
                     "warnings said as each was tried say why)",
                     caller);
  return -ENODEV;
}

NIC_EXPORT int nic_sga_init(struct nic_sga *sga, unsigned max_entries) {
  if (!sga) {
    nic_api_count(sga);
    return -EINVAL;
  }
  /* Empty and not ready (nic_sga_ready) until the end: the program's array may be anything it
   * had on its stack, and a reset or post of it after a failed init must not read that. */
  sga->count = 0;
  sga->max = 0;
  sga->bytes = 0;
  sga->bounce = NULL;
  struct nic_backend *b = nic_backend_active();
  if (!b) return nic_sga_no_backend("nic_sga_init");
  unsigned limit = b->caps.max_sge < NIC_SGA_CAPACITY ? b->caps.max_sge : NIC_SGA_CAPACITY;
  if (max_entries > limit) {
    nic_api_error(sga, "nic_sga_init: %u entries asked for; backend %s and the array allow %u",
                  max_entries, b->name, limit);
    return -E2BIG;
  }
  sga->max = max_entries ? max_entries : limit;
  return 0;
}

static void drop_entry(struct nic_sga_entry *e) {
  if (nic_sga_entry_slot(e)) {
    nic_rcache_release_own(e->cache_slot);
    e->cache_slot = 0;
  }
}

NIC_EXPORT void nic_sga_reset(struct nic_sga *sga) {
  if (!nic_sga_ready(sga)) {
    /* Nothing to drop in what a failed nic_sga_init left; anything else is not an array of ours,
     * and its "entries" are not read. */
    if (sga && (sga->count || sga->bounce))
      nic_api_error(sga,
                    "nic_sga_reset(%p): the array is not initialised (nic_sga_init); left as "
                    "it is",
                    (void *)sga);
    return;
  }
  for (uint32_t i = 0; i < sga->count; i++)
    drop_entry(&sga->entry[i]);
  nic_bounce_free(sga->bounce);
  sga->bounce = NULL;
  sga->count = 0;
  sga->bytes = 0;
}

/* Copies [p, p+len) (and [q, q+qlen) after it, when qlen) into the bounce area as entry *e. */
static int copy_entry(struct nic_sga *sga, const void *p, size_t len, const void *q, size_t qlen,
                      struct nic_sga_entry *e) {
  return nic_bounce_copy(&sga->bounce, p, len, q, qlen, e);
}

/* Resolves one entry: direct (arena, cache) or copied, the latter when shorter than copy_below.
 * Inlined into add_piece, the fast path, whatever the slow path's call costs. */
static inline __attribute__((always_inline)) int resolve(struct nic_sga *sga, const void *p,
                                                         size_t len, size_t copy_below,
                                                         struct nic_sga_entry *e) {
  if (len < copy_below) {
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
  if (rc == -NIC_ERANGE || rc == -NIC_ECROSS || rc == -ENODEV) return rc;
  /* -EFAULT for memory that can be read: a backend that pins pages for writing cannot pin these
   * (io_uring pins every fixed buffer so: read-only memory, a shared mapping of a disk file), and
   * the copy goes instead. A dataplane step the program made partly read-only stays refused. */
  if (rc == -EFAULT && nic_in_dp(p)) return rc;
  if (!nic_range_readable(p, len)) return -EFAULT;
  return copy_entry(sga, p, len, NULL, 0, e); /* not registrable, or not now: copy */
}

static inline __attribute__((always_inline)) bool contiguous(const struct nic_sga_entry *a,
                                                             const struct nic_sga_entry *b) {
  /* The handle too: two steps' registrations (io_uring fixed-buffer slots) may share a key. */
  return a->kind == b->kind && a->lkey == b->lkey && a->handle == b->handle &&
         a->cache_slot == b->cache_slot &&
         (const char *)a->addr + a->len == (const char *)b->addr &&
         (uint64_t)a->len + b->len <= UINT32_MAX;
}

/* The adjacent pair of ent[0..n) (tail, when not NULL, counting as ent[n]) with the smallest
 * total, and that total in *total (UINT64_MAX when there is no pair). */
static uint32_t smallest_pair(const struct nic_sga_entry *ent, uint32_t n,
                              const struct nic_sga_entry *tail, uint64_t *total) {
  uint32_t best = n;
  *total = UINT64_MAX;
  for (uint32_t i = 0; i + 1 < n || (tail && i < n); i++) {
    uint64_t sum = (uint64_t)ent[i].len + (i + 1 < n ? ent[i + 1].len : tail->len);
    if (sum < *total) *total = sum, best = i;
  }
  return best;
}

/* An entry added before may lie in memory the program has unmapped since (its use after free):
 * a copy of it would take the process down. */
static bool entry_readable(const struct nic_sga_entry *e) {
  return e->kind == NIC_SGA_BOUNCE || nic_range_readable(e->addr, e->len);
}

/* Copies a and b, adjacent, into one bounce entry *merged; references are left to the caller. */
static int copy_pair(struct nic_sga *sga, const struct nic_sga_entry *a,
                     const struct nic_sga_entry *b, struct nic_sga_entry *merged) {
  if (!entry_readable(a) || !entry_readable(b)) return -EFAULT;
  return copy_entry(sga, a->addr, a->len, b->addr, b->len, merged);
}

/* The array is full: copy the adjacent pair (the new entry counts as the last) with the
 * smallest total into one bounce entry. */
static int merge_smallest(struct nic_sga *sga, struct nic_sga_entry *fresh) {
  struct nic_sga_entry *ent = sga->entry, merged;
  uint32_t n = sga->count;
  uint64_t total;
  const uint32_t best = smallest_pair(ent, n, fresh, &total);
  if (total > MERGE_MAX) return -E2BIG;
  struct nic_sga_entry *a = &ent[best], *b = best + 1 < n ? &ent[best + 1] : fresh;
  int rc = copy_pair(sga, a, b, &merged);
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

static int add_piece(struct nic_sga *sga, const void *p, size_t len, size_t copy_below) {
  struct nic_sga_entry e;
  int rc = resolve(sga, p, len, copy_below, &e);
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

/* Registration-cache slots held by entries (drop_entry's references), let go together later:
 * at most one for each entry of the array and each piece of a range it takes. */
struct held_slots {
  uint32_t n;
  uint32_t slot[2 * NIC_SGA_CAPACITY + 2];
};

static void hold_slot(struct held_slots *h, const struct nic_sga_entry *e) {
  if (nic_sga_entry_slot(e)) h->slot[h->n++] = e->cache_slot;
}

static void let_go(const struct held_slots *h) {
  for (uint32_t i = 0; i < h->n; i++)
    nic_rcache_release_own(h->slot[i]);
}

/* Copies the smallest adjacent pairs of work[0..*n) together until room entries are left, as
 * merge_smallest does. The references of the entries copied away are only noted in gone: the
 * array keeps its own until the whole add stands. */
static int shrink(struct nic_sga *sga, struct nic_sga_entry *work, uint32_t *n, uint32_t room,
                  struct held_slots *gone) {
  while (*n > room) {
    uint64_t total;
    const uint32_t i = smallest_pair(work, *n, NULL, &total);
    if (total > MERGE_MAX) return -E2BIG;
    struct nic_sga_entry merged;
    int rc = copy_pair(sga, &work[i], &work[i + 1], &merged);
    if (rc) return rc;
    hold_slot(gone, &work[i]);
    hold_slot(gone, &work[i + 1]);
    work[i] = merged;
    memmove(&work[i + 1], &work[i + 2], (size_t)(*n - i - 2) * sizeof *work);
    (*n)--;
  }
  return 0;
}

/* The pieces do not all fit: neighbours are copied together to make room, in a copy of the
 * array that replaces it only once every piece is in (the copies take bounce room, which
 * nic_sga_add gives back on failure). The pieces between the first and the last are whole steps,
 * too long to copy: the first piece may join the entries before it, or the last when there are
 * only two, and no other piece can. */
static __attribute__((noinline, cold)) int
add_pieces_merging(struct nic_sga *sga, const char *p, size_t len, size_t first, size_t pieces) {
  const size_t step = (size_t)1 << nic_dp.step_shift;
  const uint32_t head = pieces == 2 ? 2 : 1, tail = (uint32_t)(pieces - head);
  if (tail >= sga->max) return -E2BIG;
  struct nic_sga_entry work[NIC_SGA_CAPACITY + 2], e;
  struct held_slots taken = {0}, gone = {0}; /* the pieces' references; those copied away */
  uint32_t n = sga->count;
  memcpy(work, sga->entry, n * sizeof *work);
  size_t piece = first, left = len;
  int rc = 0;
  for (uint32_t i = 0; i < pieces && rc == 0; i++) {
    if ((rc = resolve(sga, p, piece, 0, &e)) != 0) break; /* a piece: see add_pieces */
    hold_slot(&taken, &e);
    if (n && contiguous(&work[n - 1], &e)) { /* the entry before holds its region already */
      work[n - 1].len += e.len;
      hold_slot(&gone, &e);
    } else {
      work[n++] = e;
    }
    if (i + 1 == head) rc = shrink(sga, work, &n, sga->max - tail, &gone);
    p += piece;
    left -= piece;
    piece = left < step ? left : step;
  }
  let_go(rc ? &taken : &gone);
  if (rc) return rc;
  memcpy(sga->entry, work, n * sizeof *work);
  sga->count = n;
  return 0;
}

/* The bytes of [p, p+len) that go as its first entry: up to its step's end where the range goes
 * as an entry per step (add_pieces), else len. */
static inline __attribute__((always_inline)) size_t first_piece(const void *p, size_t len) {
  /* A short range is copied whole (resolve), wherever it lies: as two pieces it took two entries,
   * and a full array refused it. */
  size_t first = nic_in_dp(p) && len >= nic_safety_config()->copy_threshold ? step_rest(p) : len;
  if (first >= len) return first;
  /* Into a chunk that is not mapped: the pieces before it would be sent, the rest not. Only
   * here is p known to be in the dataplane range (not NULL: arithmetic on it is undefined). */
  const char *end = (const char *)p + len - 1;
  if (!nic_in_dp(end) || !nic_chunk_readable(nic_chunk_index(end))) first = len;
  return first;
}

/* Dataplane memory across steps: each step is its own registration (an io_uring fixed buffer
 * is one slot, and a post must stay inside one), so one entry per step. All of them fit, or
 * none is added. A piece shorter than the copy threshold still goes direct: a copy of it saves
 * no entry, and would make the range's bytes no longer lie end to end, which a receiver that
 * hands a packet over in place needs (dpdk's, on net_ring, gathered such a one-entry post). */
static int add_pieces(struct nic_sga *sga, const void *p, size_t len, size_t first) {
  const size_t step = (size_t)1 << nic_dp.step_shift;
  const size_t pieces = 1 + (len - first + step - 1) / step;
  const uint32_t count = sga->count;
  if (count + pieces > sga->max) return add_pieces_merging(sga, p, len, first, pieces);
  const struct nic_sga_entry last = count ? sga->entry[count - 1] : (struct nic_sga_entry){0};
  const char *at = p;
  size_t piece = first, left = len;
  int rc = 0;
  while (left && (rc = add_piece(sga, at, piece, 0)) == 0) {
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

/* Whether every entry added before can still be read (copying two into one needs it). */
static bool entries_readable(const struct nic_sga *sga) {
  for (uint32_t i = 0; i < sga->count; i++)
    if (!entry_readable(&sga->entry[i])) return false;
  return true;
}

/* Says why nic_sga_add refused [p, p+len) with rc, once per kind. Out of line: what it asks again
 * costs the accepted adds nothing. */
static __attribute__((noinline, cold)) void add_refused(const struct nic_sga *sga, const void *p,
                                                        size_t len, int rc) {
  if (rc == -EFAULT && !nic_range_readable(p, len))
    nic_api_error(sga, "nic_sga_add(%p, %zu): the range is not (entirely) mapped", p, len);
  else if (rc == -EFAULT && !entries_readable(sga))
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): past the limit of %u entries two are copied into one, "
                  "and the memory of an entry added before was unmapped since: the array is "
                  "left as it was (nic_sga_reset drops it)",
                  p, len, sga->max);
  else if (rc == -EFAULT && nic_in_dp(p))
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): part of its step is not writable (mprotect): the step "
                  "cannot be faulted in for the NIC before its first registration",
                  p, len);
  else if (rc == -E2BIG && first_piece(p, len) < len) /* an entry per step */
    nic_api_error(sga,
                  "nic_sga_add(%p, %zu): it spans pin steps of %zu bytes, an entry for each; "
                  "with %u of the %u entries in use, copying neighbours (its first or last "
                  "piece among them) into one, under %zu bytes together, leaves no room",
                  p, len, (size_t)1 << nic_dp.step_shift, sga->count, sga->max, MERGE_MAX);
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
}

NIC_EXPORT int nic_sga_add(struct nic_sga *sga, const void *p, size_t len) {
  uintptr_t start = (uintptr_t)p, last;
  if (!nic_sga_ready(sga)) {
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
  const size_t first = first_piece(p, len);
  int rc = first >= len ? add_piece(sga, p, len, nic_safety_config()->copy_threshold)
                        : add_pieces(sga, p, len, first);
  if (rc == 0) {
    sga->bytes += len;
    nic_sink_range(p, len); /* a sink for NICMALLOC_PROFILE and the sent-bytes counts */
    return 0;
  }
  nic_bounce_rewind(&sga->bounce, mark);
  add_refused(sga, p, len, rc);
  return rc;
}
