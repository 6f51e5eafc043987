/* The translation-cache model: one LRU over MPT and MTT keys, and a sliding working-set window.
 * Both are open-addressing hash maps (linear probing, backward-shift deletion: no tombstones,
 * so long runs stay fast). See tcache_model.h.
 *
 * Its tables are pages of its own, by system call (map.h), never the heap: its owners update it
 * under their locks (the sim's, on the engine thread; the pressure tracker's, on a posting
 * thread), and the working-set table grows there. A malloc or free there can take the
 * registration cache's lock (a freed block a cached region covers, a fresh mapping), which is
 * held around registering with the sim: the sim's engine and a thread registering then waited
 * on each other for good. A heap page could also hold a program's block in flight, write-
 * protected under NICMALLOC_FENCE=protect. */
#include "tcache_model.h"

#include "map.h"
#include "settings.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

/* Each number's basis is written next to it; "estimate" means we found no public figure. The
 * window is not the NIC's: it is how far back the working set is counted (tcache_model.h). */
static const struct nic_tcache_preset presets[] = {
    {"tiny",
     {8, 1, 4096, 1000, 8 * NIC_TCACHE_WINDOW_PER_ENTRY},
     "For tests, not a device: small enough to follow by hand."},
    {"cx4",
     {8192, 1, 4096, 1000, 8192 * NIC_TCACHE_WINDOW_PER_ENTRY},
     "ConnectX-4. capacity: estimate; NVIDIA does not publish the on-chip cache size for ICM "
     "(MPT/MTT) entries. 8192 entries puts the knee at 32 MiB of randomly touched 4 KiB pages, "
     "in the tens-of-MB range where, in our reading, FaRM (NSDI'14), LITE (SOSP'17) and Storm "
     "(SYSTOR'19) see RDMA slow down with registered footprint; could be off by 4-10x. "
     "mpt_per_region: 1, one MPT entry (mkey context) per region, as in the mlx4/mlx5 drivers. "
     "page_size: 4 KiB, what ordinary memory gets; mlx5 picks the largest page the physical "
     "layout allows, so use 2M/1G for hugepage chunks. miss_ns: estimate, one PCIe round trip "
     "to host memory; the seed paper's ~1 us (measured on ConnectX-5) is assumed."},
    {"cx5",
     {16384, 1, 4096, 1000, 16384 * NIC_TCACHE_WINDOW_PER_ENTRY},
     "ConnectX-5. capacity: estimate, assumed twice cx4 (not published; off by 4-10x). "
     "miss_ns: the seed paper (HotOS'21) puts an MR translation miss at about 1 us on this NIC, "
     "the best-sourced number here and still approximate (+-50%). Others as cx4."},
    {"cx6dx",
     {32768, 1, 4096, 1000, 32768 * NIC_TCACHE_WINDOW_PER_ENTRY},
     "ConnectX-6 Dx. capacity: estimate, assumed twice cx5 (not published; Kong et al., "
     "NSDI'23, study translation-cache contention on recent ConnectX parts without giving a "
     "size). miss_ns: estimate, kept at 1 us: PCIe Gen4 speeds the transfer, not the round trip "
     "to memory that dominates a miss. Others as cx4."},
    {"bluefield2",
     {32768, 1, 4096, 1200, 32768 * NIC_TCACHE_WINDOW_PER_ENTRY},
     "BlueField-2 DPU. Its NIC is a ConnectX-6 Dx core: capacity as cx6dx (estimate). miss_ns: "
     "guess, +200 ns over cx6dx for the DPU's internal PCIe switch between host and NIC; not "
     "measured."},
};

const struct nic_tcache_preset *nic_tcache_preset_at(size_t i) {
  return i < sizeof presets / sizeof presets[0] ? &presets[i] : NULL;
}

const struct nic_tcache_preset *nic_tcache_preset_find(const char *name) {
  for (size_t i = 0; name && nic_tcache_preset_at(i); i++)
    if (!strcmp(presets[i].name, name)) return &presets[i];
  return NULL;
}

bool nic_tcache_params_valid(const struct nic_tcache_params *p) {
  return p->capacity >= 1 && p->capacity <= (1u << 24) && p->mpt_per_region <= 16 &&
         p->page_size >= 4096 && p->page_size <= (1ull << 30) &&
         !(p->page_size & (p->page_size - 1)) && p->window <= NIC_TCACHE_WINDOW_MAX;
}

uint64_t nic_tcache_entries_for(const struct nic_tcache_params *p, uintptr_t base, size_t len) {
  if (!len) return p->mpt_per_region;
  unsigned shift = (unsigned)__builtin_ctzll(p->page_size);
  return p->mpt_per_region + ((base + len - 1) >> shift) - (base >> shift) + 1;
}

/* Each override, when given, replaces the preset's number (the table holds the ranges). */
static void override(enum nic_setting s, uint64_t *field) {
  if (nic_setting_given(s)) *field = nic_setting_number(s);
}

void nic_tcache_params_from_env(struct nic_tcache_params *out) {
  /* In the order of NICMALLOC_SIM_TCACHE's words: tiny|cx4|cx5|cx6dx|bluefield2. */
  static const char *names[] = {"tiny", "cx4", "cx5", "cx6dx", "bluefield2"};
  *out = nic_tcache_preset_find(names[nic_setting_choice(NIC_S_SIM_TCACHE)])->params;
  uint64_t cap = out->capacity, page = out->page_size, miss = out->miss_ns, win = out->window;
  override(NIC_S_SIM_TCACHE_ENTRIES, &cap);
  override(NIC_S_SIM_TCACHE_PAGE, &page);
  override(NIC_S_SIM_MISS_NS, &miss);
  /* The window follows the capacity it is compared with, unless it is given too. */
  if (cap != out->capacity) win = cap * NIC_TCACHE_WINDOW_PER_ENTRY;
  override(NIC_S_SIM_TCACHE_WINDOW, &win);
  out->capacity = (uint32_t)cap;
  out->page_size = page;
  out->miss_ns = (uint32_t)miss;
  out->window = (uint32_t)win;
}

/* ---- hash map: key -> nonzero uint32 value (0 marks an empty slot) ---- */
struct key {
  uint64_t region, sub; /* sub: MTT page index, MPT_KEY | i, or REGION_KEY (window only) */
};
#define MPT_KEY (1ull << 63)
#define REGION_KEY UINT64_MAX
struct slot {
  struct key k;
  uint32_t v;
};
struct map {
  struct slot *s;
  size_t mask, used;
};

static size_t hash(struct key k, size_t mask) {
  uint64_t x = k.region * 0x9e3779b97f4a7c15ull ^ (k.sub + 0x632be59bd9b4e019ull);
  x ^= x >> 31;
  x *= 0xd6e8feb86659fd93ull;
  return (size_t)(x ^ (x >> 32)) & mask;
}

static void *table_map(size_t bytes) {
  return nic_map_anon(bytes, PROT_READ | PROT_WRITE, false);
}

static size_t map_bytes(const struct map *m) {
  return (m->mask + 1) * sizeof *m->s;
}

static bool map_init(struct map *m, size_t entries) {
  size_t n = 16;
  while (n < entries * 2)
    n <<= 1;
  m->mask = n - 1;
  m->used = 0;
  m->s = table_map(map_bytes(m));
  return m->s != NULL;
}

static void map_release(struct map *m) {
  if (m->s) nic_unmap(m->s, map_bytes(m));
  m->s = NULL;
}

static struct slot *map_find(const struct map *m, struct key k) {
  for (size_t i = hash(k, m->mask);; i = (i + 1) & m->mask) {
    struct slot *s = &m->s[i];
    if (!s->v) return NULL;
    if (s->k.region == k.region && s->k.sub == k.sub) return s;
  }
}

/* For a key not present; the caller sets ->v nonzero at once. NULL when growing failed. */
static struct slot *map_add(struct map *m, struct key k) {
  if ((m->used + 1) * 2 > m->mask + 1) {
    struct map bigger;
    if (!map_init(&bigger, m->mask + 1)) return NULL;
    for (size_t i = 0; i <= m->mask; i++)
      if (m->s[i].v) *map_add(&bigger, m->s[i].k) = m->s[i];
    map_release(m);
    *m = bigger;
  }
  size_t i = hash(k, m->mask);
  while (m->s[i].v)
    i = (i + 1) & m->mask;
  m->s[i].k = k;
  m->used++;
  return &m->s[i];
}

/* Backward shift: pull later members of the probe run into the hole when their home allows. */
static void map_erase(struct map *m, struct slot *hole) {
  size_t i = (size_t)(hole - m->s), j = i;
  for (;;) {
    j = (j + 1) & m->mask;
    if (!m->s[j].v) break;
    size_t home = hash(m->s[j].k, m->mask);
    if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
      m->s[i] = m->s[j];
      i = j;
    }
  }
  m->s[i].v = 0;
  m->used--;
}

/* ---- the model ---- */
#define NIL UINT32_MAX
struct node {
  struct key k;
  uint32_t prev, next; /* toward MRU / toward LRU; next also links the free list */
};
struct wrec {
  uint64_t region, first_page;
  uint64_t pages; /* pages still in the window: the oldest record loses its first ones as it ages */
};

struct nic_tcache {
  struct nic_tcache_params p;
  unsigned shift;
  struct map idx; /* key -> node index + 1 */
  struct node *nodes;
  uint32_t mru, lru, free;
  uint32_t fresh; /* nodes[fresh..] were never used: handed out in order, so untouched pages stay
                   * unbacked until the cache fills that far */
  struct nic_tcache_counters c;
  struct map ws;       /* window: key -> records in the window that touch it */
  uint64_t ws_partial; /* lookups to count before the ws_ figures are whole again */
  struct wrec *ring;
  uint32_t ring_cap, ring_len, ring_old; /* records; the oldest at ring_old */
  uint64_t ring_entries;                 /* lookups the records hold: MPT + pages each */
};

/* Records the ring needs when each holds the fewest lookups an access of one page makes. */
static uint32_t ring_records(const struct nic_tcache_params *p) {
  return p->window / (p->mpt_per_region + 1) + 1;
}

struct nic_tcache *nic_tcache_new(const struct nic_tcache_params *p) {
  if (!p || !nic_tcache_params_valid(p)) {
    errno = EINVAL;
    return NULL;
  }
  struct nic_tcache *m = table_map(sizeof *m);
  if (!m) return NULL;
  m->p = *p;
  m->shift = (unsigned)__builtin_ctzll(p->page_size);
  m->nodes = table_map(p->capacity * sizeof *m->nodes);
  m->ring_cap = p->window ? ring_records(p) : 0;
  m->ring = p->window ? table_map(m->ring_cap * sizeof *m->ring) : NULL;
  bool ok = m->nodes && (m->ring || !p->window) && map_init(&m->idx, p->capacity) &&
            map_init(&m->ws, p->window ? 64 : 1);
  if (!ok) {
    nic_tcache_free(m);
    errno = ENOMEM;
    return NULL;
  }
  m->free = NIL;
  m->fresh = 0;
  m->mru = m->lru = NIL;
  m->c.ws_valid = true;
  return m;
}

struct nic_tcache *nic_tcache_new_preset(const char *name) {
  const struct nic_tcache_preset *p = nic_tcache_preset_find(name);
  if (!p) errno = EINVAL;
  return p ? nic_tcache_new(&p->params) : NULL;
}

void nic_tcache_free(struct nic_tcache *m) {
  if (!m) return;
  map_release(&m->idx);
  map_release(&m->ws);
  if (m->nodes) nic_unmap(m->nodes, m->p.capacity * sizeof *m->nodes);
  if (m->ring) nic_unmap(m->ring, m->ring_cap * sizeof *m->ring);
  nic_unmap(m, sizeof *m);
}

const struct nic_tcache_params *nic_tcache_params_of(const struct nic_tcache *m) {
  return &m->p;
}

static void unlink_node(struct nic_tcache *m, uint32_t n) {
  struct node *x = &m->nodes[n];
  if (x->prev != NIL)
    m->nodes[x->prev].next = x->next;
  else
    m->mru = x->next;
  if (x->next != NIL)
    m->nodes[x->next].prev = x->prev;
  else
    m->lru = x->prev;
}

static void push_mru(struct nic_tcache *m, uint32_t n) {
  m->nodes[n].prev = NIL;
  m->nodes[n].next = m->mru;
  if (m->mru != NIL)
    m->nodes[m->mru].prev = n;
  else
    m->lru = n;
  m->mru = n;
}

/* Returns 1 on a miss. */
static uint32_t touch(struct nic_tcache *m, struct key k) {
  m->c.lookups++;
  struct slot *s = map_find(&m->idx, k);
  if (s) {
    unlink_node(m, s->v - 1);
    push_mru(m, s->v - 1);
    m->c.hits++;
    return 0;
  }
  uint32_t n = m->free;
  if (n != NIL) {
    m->free = m->nodes[n].next;
    m->c.resident++;
  } else if (m->fresh < m->p.capacity) {
    n = m->fresh++;
    m->c.resident++;
  } else {
    n = m->lru;
    unlink_node(m, n);
    map_erase(&m->idx, map_find(&m->idx, m->nodes[n].k));
    m->c.evictions++;
  }
  m->nodes[n].k = k;
  push_mru(m, n);
  map_add(&m->idx, k)->v = n + 1; /* never grows: sized for capacity at 50% load */
  return 1;
}

static uint64_t *ws_distinct(struct nic_tcache *m, struct key k) {
  return k.sub == REGION_KEY ? &m->c.ws_regions : &m->c.ws_pages;
}

/* False when the table could not grow. */
static bool ws_add(struct nic_tcache *m, struct key k) {
  struct slot *s = map_find(&m->ws, k);
  if (s) {
    s->v++;
    return true;
  }
  if (!(s = map_add(&m->ws, k))) return false;
  s->v = 1;
  ++*ws_distinct(m, k);
  return true;
}

static void ws_drop(struct nic_tcache *m, struct key k) {
  struct slot *s = map_find(&m->ws, k);
  if (s && --s->v == 0) {
    map_erase(&m->ws, s);
    --*ws_distinct(m, k);
  }
}

static bool ws_enter(struct nic_tcache *m, const struct wrec *r) {
  bool ok = ws_add(m, (struct key){r->region, REGION_KEY});
  for (uint64_t i = 0; i < r->pages && ok; i++)
    ok = ws_add(m, (struct key){r->region, r->first_page + i});
  return ok;
}

static void ws_leave(struct nic_tcache *m, const struct wrec *r) {
  ws_drop(m, (struct key){r->region, REGION_KEY});
  for (uint64_t i = 0; i < r->pages; i++)
    ws_drop(m, (struct key){r->region, r->first_page + i});
}

/* The table could not grow (out of memory): counts half applied would drift for good, so the
 * window starts afresh, in the table it has, and its figures are partial (ws_valid false) until
 * a whole window of lookups has been counted again. */
static void ws_restart(struct nic_tcache *m) {
  memset(m->ws.s, 0, map_bytes(&m->ws));
  m->ws.used = 0;
  m->ring_len = 0;
  m->ring_entries = 0;
  m->c.ws_regions = m->c.ws_pages = 0;
  m->c.ws_valid = false;
  m->ws_partial = m->p.window;
}

/* The window is the last `window` lookups, not accesses: an access looks up its MPT entries and
 * each page it spans, and a window of accesses could never hold more than accesses x (MPT +
 * pages) entries, however far past the capacity the program goes. Room is made from the
 * oldest lookups: whole records, or the first pages of the oldest one. */
static void ws_record(struct nic_tcache *m, uint64_t region, uint64_t first, uint64_t pages) {
  /* An access enters with its last lookups only, as many as the window holds: its table then
   * never holds more keys than the window has lookups (regions' keys aside), and one large post
   * ages out like any other. */
  const uint64_t room = m->p.window > m->p.mpt_per_region ? m->p.window - m->p.mpt_per_region : 1;
  if (pages > room) {
    first += pages - room;
    pages = room;
  }
  const uint64_t cost = m->p.mpt_per_region + pages;
  while (m->ring_len && (m->ring_len == m->ring_cap || m->ring_entries + cost > m->p.window)) {
    struct wrec *old = &m->ring[m->ring_old];
    const uint64_t over = m->ring_entries + cost > m->p.window
                              ? m->ring_entries + cost - m->p.window
                              : old->pages + m->p.mpt_per_region; /* ring full: the whole record */
    if (over < old->pages) {
      for (uint64_t i = 0; i < over; i++)
        ws_drop(m, (struct key){old->region, old->first_page + i});
      old->first_page += over;
      old->pages -= over;
      m->ring_entries -= over;
      break;
    }
    ws_leave(m, old);
    m->ring_entries -= m->p.mpt_per_region + old->pages;
    m->ring_old = (m->ring_old + 1) % m->ring_cap;
    m->ring_len--;
  }
  struct wrec *r = &m->ring[(m->ring_old + m->ring_len++) % m->ring_cap];
  *r = (struct wrec){region, first, pages};
  m->ring_entries += cost;
  if (!ws_enter(m, r)) {
    ws_restart(m);
  } else if (!m->c.ws_valid) {
    m->ws_partial = m->ws_partial > cost ? m->ws_partial - cost : 0;
    m->c.ws_valid = m->ws_partial == 0;
  }
}

uint32_t nic_tcache_access(struct nic_tcache *m, uint64_t region, uintptr_t region_base,
                           uintptr_t addr, size_t len) {
  if (addr < region_base) region_base = addr; /* outside the contract: keep keys sane */
  uint64_t first = (addr >> m->shift) - (region_base >> m->shift);
  uint64_t pages = len ? ((addr + len - 1) >> m->shift) - (addr >> m->shift) + 1 : 0;
  uint32_t mpt = 0, mtt = 0;
  m->c.accesses++;
  for (uint32_t i = 0; i < m->p.mpt_per_region; i++)
    mpt += touch(m, (struct key){region, MPT_KEY | i});
  for (uint64_t i = 0; i < pages; i++)
    mtt += touch(m, (struct key){region, first + i});
  m->c.mpt_misses += mpt;
  m->c.mtt_misses += mtt;
  m->c.misses += mpt + mtt;
  m->c.modeled_ns += (uint64_t)(mpt + mtt) * m->p.miss_ns;
  if (m->p.window) {
    ws_record(m, region, first, pages);
    m->c.ws_entries = m->c.ws_regions * m->p.mpt_per_region + m->c.ws_pages;
    if (m->c.ws_entries > m->c.ws_peak_entries) m->c.ws_peak_entries = m->c.ws_entries;
  }
  return mpt + mtt;
}

void nic_tcache_forget(struct nic_tcache *m, uint64_t region) {
  for (uint32_t n = m->mru, next; n != NIL; n = next) {
    next = m->nodes[n].next;
    if (m->nodes[n].k.region != region) continue;
    unlink_node(m, n);
    map_erase(&m->idx, map_find(&m->idx, m->nodes[n].k));
    m->nodes[n].next = m->free;
    m->free = n;
    m->c.resident--;
  }
}

void nic_tcache_get(const struct nic_tcache *m, struct nic_tcache_counters *out) {
  *out = m->c;
}

void nic_tcache_reset_counters(struct nic_tcache *m) {
  struct nic_tcache_counters keep = m->c;
  memset(&m->c, 0, sizeof m->c);
  m->c.resident = keep.resident;
  m->c.ws_regions = keep.ws_regions;
  m->c.ws_pages = keep.ws_pages;
  m->c.ws_entries = m->c.ws_peak_entries = keep.ws_entries;
  m->c.ws_valid = keep.ws_valid;
}
