/* A key-value store that answers GETs with zero-copy scatter-gather responses, the way a
 * serializer would use nicmalloc: each response is a small header built on the stack plus the
 * value, straight from the item that holds it. Items are ordinary malloc() blocks in ordinary C;
 * built with the LLVM pass (examples/CMakeLists.txt), the allocation in item_new() is found to
 * reach nic_sga_add and becomes dataplane memory, while the table, the keys being looked up and
 * the request log stay in the control heap.
 *
 *   kv_zero_copy [--check] [items] [gets]
 *
 * items (default 2000) and gets (default 20000) are counts from 1 up, and anything else is
 * refused (exit 2).
 * Runs on the sim NIC (NICMALLOC_BACKEND=sim), whose receiver checks every response byte. With
 * --check it also checks the whole-program claim and exits 1 if it does not hold: every item is
 * dataplane and nothing else is, no entry went through the registration cache, and only the
 * headers (shorter than NICMALLOC_COPY_THRESHOLD) were copied; a check that sent nothing fails. */
#include "example_args.h"

#include <nicmalloc.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct item {
  struct item *next;
  uint32_t key_len, value_len;
  char data[]; /* key, then value */
};

struct response_header {
  uint32_t magic, status, key_len, value_len;
};

enum { kMagic = 0x6b76727a, kBuckets = 1024 };

static struct item **table; /* control: never reaches the NIC */
static unsigned long received, bad_bytes;

static uint32_t hash(const char *key, size_t len) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < len; i++)
    h = (h ^ (unsigned char)key[i]) * 16777619u;
  return h % kBuckets;
}

static char value_byte(uint32_t item, uint32_t i) {
  return (char)(item * 131 + i * 7);
}

/* The allocation the pass rewrites: its object reaches nic_sga_add through the table. */
static struct item *item_new(const char *key, uint32_t key_len, uint32_t value_len) {
  struct item *it = malloc(sizeof *it + key_len + value_len);
  if (!it) return NULL;
  it->key_len = key_len;
  it->value_len = value_len;
  memcpy(it->data, key, key_len);
  return it;
}

static void put(struct item *it) {
  uint32_t b = hash(it->data, it->key_len);
  it->next = table[b];
  table[b] = it;
}

static struct item *get(const char *key, uint32_t len) {
  for (struct item *it = table[hash(key, len)]; it; it = it->next)
    if (it->key_len == len && !memcmp(it->data, key, len)) return it;
  return NULL;
}

/* The receiving side: a response is the header, then the value. */
static void receive(void *arg, void *data, size_t len) {
  (void)arg;
  struct response_header h;
  if (len < sizeof h) {
    bad_bytes += len;
    return;
  }
  memcpy(&h, data, sizeof h);
  const char *value = (const char *)data + sizeof h;
  uint32_t id = h.status; /* the example puts the item's number there */
  if (h.magic != kMagic || len != sizeof h + h.value_len) bad_bytes += len;
  for (uint32_t i = 0; i < h.value_len && i + sizeof h < len; i++)
    if (value[i] != value_byte(id, i)) {
      bad_bytes++;
      break;
    }
  received++;
}

static unsigned long completed;
static void done(void *arg, int status) {
  (void)arg;
  if (status) fprintf(stderr, "kv_zero_copy: a response failed (%d)\n", status);
  completed++;
}

static int respond(struct nic_endpoint *ep, const struct item *it, uint32_t id) {
  struct response_header h = {kMagic, id, it->key_len, it->value_len};
  struct nic_sga sga;
  int rc = nic_sga_init(&sga, 0);
  if (!rc) rc = nic_sga_add(&sga, &h, sizeof h); /* short: copied at add, the stack may go */
  if (!rc) rc = nic_sga_add(&sga, it->data + it->key_len, it->value_len);
  if (!rc) rc = nic_sga_post(&sga, ep, done, NULL);
  return rc;
}

int main(int argc, char **argv) {
  bool check = false;
  unsigned long item_count = 2000, gets = 20000;
  /* Items are named key:0 up; a GET asks for one of them (so there must be one). */
  const struct example_arg args[] = {{"--check", &check, NULL, 0},
                                     {NULL, NULL, &item_count, UINT32_MAX},
                                     {NULL, NULL, &gets, ULONG_MAX}};
  const int refused = example_args(argc, argv, "kv_zero_copy [--check] [items] [gets]", args,
                                   sizeof args / sizeof args[0]);
  if (refused) return refused;
  const uint32_t items = (uint32_t)item_count;
  struct nic_endpoint *ep = nic_sim_endpoint_create(receive, NULL, 0);
  table = calloc(kBuckets, sizeof *table);
  struct item **all = malloc(items * sizeof *all);
  if (!ep || !table || !all) {
    fprintf(stderr, "kv_zero_copy: no sim endpoint (run with NICMALLOC_BACKEND=sim) or memory\n");
    return 2;
  }
  char key[32];
  for (uint32_t n = 0; n < items; n++) {
    uint32_t len = (uint32_t)snprintf(key, sizeof key, "key:%u", n);
    uint32_t value_len = 600 + (n * 2654435761u) % 30000; /* above the copy threshold */
    struct item *it = item_new(key, len, value_len);
    if (!it) return 2;
    for (uint32_t i = 0; i < value_len; i++)
      it->data[len + i] = value_byte(n, i);
    put(it);
    all[n] = it;
  }
  unsigned long posted = 0, header_bytes = 0;
  for (unsigned long g = 0; g < gets; g++) {
    uint32_t n = (uint32_t)((g * 7919) % items);
    char *wanted = malloc(32); /* the request's key: control memory */
    uint32_t len = (uint32_t)snprintf(wanted, 32, "key:%u", n);
    const struct item *it = get(wanted, len);
    free(wanted);
    if (!it || respond(ep, it, n)) {
      fprintf(stderr, "kv_zero_copy: GET key:%u failed\n", n);
      return 1;
    }
    posted++;
    header_bytes += sizeof(struct response_header);
    if (posted % 64 == 0) nic_poll(0);
  }
  while (completed < posted)
    nic_poll(0);
  while (nic_sim_endpoint_destroy(ep) == -EBUSY)
    nic_poll(0);

  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  uint32_t items_dp = 0;
  for (uint32_t n = 0; n < items; n++)
    items_dp += nic_is_dataplane(all[n]);
  printf("kv_zero_copy: %lu responses, %lu received, %lu bad bytes\n", posted, received, bad_bytes);
  printf("kv_zero_copy: items in dataplane memory %u of %u; table %s, item index %s\n", items_dp,
         items, nic_is_dataplane(table) ? "dataplane" : "control",
         nic_is_dataplane(all) ? "dataplane" : "control");
  printf("kv_zero_copy: registration cache %llu hits %llu misses; %llu bytes copied (headers: "
         "%lu)\n",
         (unsigned long long)s.rcache_hits, (unsigned long long)s.rcache_misses,
         (unsigned long long)s.bounce_bytes, header_bytes);
  bool ok = received == posted && !bad_bytes;
  if (check) {
    /* Nothing sent is nothing checked: a failure, not an "ok". */
    bool whole = posted > 0 && received > 0 && items_dp == items && !nic_is_dataplane(table) &&
                 !nic_is_dataplane(all) && s.rcache_hits + s.rcache_misses == 0 &&
                 s.bounce_bytes == header_bytes;
    printf("kv_zero_copy: whole-program check %s\n", whole ? "ok" : "FAILED");
    ok = ok && whole;
  }
  for (uint32_t n = 0; n < items; n++)
    free(all[n]);
  free(all);
  free(table);
  return ok ? 0 : 1;
}
