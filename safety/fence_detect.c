/* NICMALLOC_FENCE=detect: a checksum of every direct entry at post, compared with what the NIC
 * read. The sim NIC reads the bytes later, on its engine thread, and hands them to
 * nic_sim_read_hook before the receiver sees them: the comparison is with exactly what it sent.
 * For other backends there is no such hook, so the memory is checksummed again at the
 * completion, which catches a write made while the NIC could read (it may have sent either
 * version). Bounce entries are our own copies; nobody writes them. A mismatch is reported with
 * the allocation sites of the blocks (fence_report.c). */
#include "bounce.h"
#include "fence.h"
#include "forklock.h"
#include "log.h"
#include "pool.h"
#include "profile.h"
#include "sim_nic.h"
#include "startup.h"

#include <pthread.h>
#include <string.h>

#define BUCKETS 256

struct record {
  struct record *next;
  const void *msg; /* the message: its completion's argument, and the sim's w->arg */
  const struct nic_sga_entry *e;
  uint32_t n;
  uint64_t read; /* bit i: the NIC reported reading entry i, which was compared then */
  uint64_t sum[NIC_SGA_CAPACITY];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(fence_detect, NIC_FORK_FENCE_DETECT, &lock, NULL);
static struct record *buckets[BUCKETS];
static struct nic_pool pool = NIC_POOL_INIT(sizeof(struct record));
static bool started;

static inline uint64_t rotl(uint64_t x, int r) {
  return x << r | x >> (64 - r);
}

/* Four independent lanes (so the multiplies overlap); each step is a bijection of the lane for a
 * given word and of the word for a given lane, so a change confined to one lane always shows,
 * and changes in several cancel with a chance of 2^-64. */
uint64_t nic_fence_sum(const void *p, size_t len) {
  const unsigned char *c = p;
  const uint64_t k1 = 0x9e3779b97f4a7c15ull, k2 = 0xc2b2ae3d27d4eb4full;
  uint64_t h[4] = {k1 ^ len, k2, k1 + k2, k2 - k1}, w;
  size_t i = 0;
  for (; i + 32 <= len; i += 32)
    for (int l = 0; l < 4; l++) {
      memcpy(&w, c + i + 8 * l, 8);
      h[l] = rotl(h[l] + w * k2, 31) * k1;
    }
  for (int l = 0; i < len; i += 8, l++) { /* the tail, zero-padded: the length tells it apart */
    w = 0;
    memcpy(&w, c + i, len - i < 8 ? len - i : 8);
    h[l] = rotl(h[l] + w * k2, 31) * k1;
  }
  uint64_t x = rotl(h[0], 1) + rotl(h[1], 7) + rotl(h[2], 12) + rotl(h[3], 18);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  return x ^ x >> 29;
}

static struct record **bucket(const void *msg) {
  return &buckets[((uintptr_t)msg >> 4) * 0x9e3779b97f4a7c15ull >> 56];
}

static struct record **find_locked(const void *msg) {
  struct record **link = bucket(msg);
  while (*link && (*link)->msg != msg)
    link = &(*link)->next;
  return link;
}

/* The sim engine, right after it read entry i of the post whose argument is msg. */
static void on_read(void *msg, unsigned i, const void *bytes, size_t len) {
  pthread_mutex_lock(&lock);
  struct record *r = *find_locked(msg); /* NULL for posts that did not come through nic_sga_post */
  bool check = r && i < r->n && r->e[i].kind != NIC_SGA_BOUNCE && r->e[i].len == len;
  uint64_t want = check ? r->sum[i] : 0;
  const void *addr = check ? r->e[i].addr : NULL;
  if (check) r->read |= 1ull << i;
  pthread_mutex_unlock(&lock); /* the record lives until the completion, after this read */
  if (check && nic_fence_sum(bytes, len) != want)
    nic_fence_report(addr, len,
                     "between nic_sga_post and the NIC's read: the NIC sent the new bytes");
}

bool nic_fence_detect_started(void) {
  return __atomic_load_n(&started, __ATOMIC_ACQUIRE);
}

void nic_fence_detect_posted(const void *msg, const struct nic_sga_entry *e, uint32_t n) {
  if (!nic_fence_detect_started()) {
    __atomic_store_n(&nic_sim_read_hook, on_read, __ATOMIC_RELEASE);
    __atomic_store_n(&started, true, __ATOMIC_RELEASE);
  }
  pthread_mutex_lock(&lock);
  struct record *r = nic_pool_get(&pool);
  pthread_mutex_unlock(&lock);
  if (!r) {
    nic_log_warn_once("NICMALLOC_FENCE=detect: no memory to record a post; such posts are not "
                      "checked");
    return;
  }
  *r = (struct record){.msg = msg, .e = e, .n = n};
  for (uint32_t i = 0; i < n; i++)
    if (e[i].kind != NIC_SGA_BOUNCE) r->sum[i] = nic_fence_sum(e[i].addr, e[i].len);
  pthread_mutex_lock(&lock);
  r->next = *bucket(msg);
  *bucket(msg) = r;
  pthread_mutex_unlock(&lock);
}

void nic_fence_detect_completing(const void *msg, int status) {
  pthread_mutex_lock(&lock);
  struct record **link = find_locked(msg), *r = *link;
  if (r) *link = r->next;
  pthread_mutex_unlock(&lock);
  if (!r) return;
  for (uint32_t i = 0; status == 0 && i < r->n; i++)
    if (r->e[i].kind != NIC_SGA_BOUNCE && !(r->read >> i & 1) &&
        nic_fence_sum(r->e[i].addr, r->e[i].len) != r->sum[i])
      nic_fence_report(r->e[i].addr, r->e[i].len,
                       "between nic_sga_post and its completion: the NIC may have sent either "
                       "version");
  pthread_mutex_lock(&lock);
  nic_pool_put(&pool, r);
  pthread_mutex_unlock(&lock);
}

/* Blocks of at least this many bytes get their allocation site recorded (SIZE_MAX: none), about
 * one per *mean bytes (0: every one). */
static size_t record_min(double *mean) {
  const struct nic_safety_config *c = nic_safety_config();
  if (c->fence != NIC_FENCE_DETECT || !c->detect_sites) return SIZE_MAX;
  *mean = (double)c->detect_mean;
  /* Shorter blocks are copied when posted whole, so only a longer block can be read in place. */
  return c->copy_threshold ? c->copy_threshold : 1;
}

/* The mismatch reports name allocation sites, which the profiler records (routing/profile.c)
 * for the blocks detect may report; those then leave the fast paths. At start-up, before any
 * thread turns fast. */
static void record_sites_start(void) {
  double mean = 0;
  const size_t min_size = record_min(&mean);
  if (min_size != SIZE_MAX) nic_profile_record_sites(min_size, mean);
}
NIC_STARTUP_STEP(fence_sites, NIC_START_FENCE_SITES, record_sites_start);
