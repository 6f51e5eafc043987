/* A library that links nicmalloc and is loaded with dlopen (dlopen_host.c) by a program whose
 * malloc is glibc's: nicmalloc is not that program's malloc. Its nic_ blocks are freed with
 * nic_free, and the library's own buffers (a received message's, a bounce copy's) must not
 * reach glibc's free. Prints key=value lines. */
#include "nicmalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Above NICMALLOC_COPY_THRESHOLD: registered, not copied, where it could be. */
enum { PLAIN_BYTES = 16384 };

static size_t received_bytes;
static int received_ok; /* messages of a size sent, holding what was sent, in dataplane memory */

static void on_receive(void *arg, void *data, size_t len) {
  (void)arg;
  const unsigned char *c = data;
  if ((len == 3000 || len == PLAIN_BYTES) && c[0] == 7 && c[len - 1] == 7 &&
      nic_is_dataplane(data) == 1)
    received_ok++;
  received_bytes += len;
}

static struct nic_stats stats_now(void) {
  struct nic_stats s = NIC_STATS_INIT;
  nic_get_stats(&s);
  return s;
}

static int posts_done;
static void on_done(void *arg, int status) {
  (void)arg;
  if (status == 0) posts_done++;
}

int dlopen_ext_run(void) {
  char *dp = nic_malloc(3000);
  if (!dp) return 1;
  memset(dp, 7, 3000);
  char *plain = malloc(PLAIN_BYTES); /* the program's malloc: glibc's */
  if (!plain) return 1;
  memset(plain, 7, PLAIN_BYTES);
  printf("nic_malloc_dataplane=%d\nmalloc_dataplane=%d\n", nic_is_dataplane(dp),
         nic_is_dataplane(plain));
  /* The glibc block's frees and unmaps go by nicmalloc unseen: it is not registered, and a post
   * copies it. */
  struct nic_region_ref ref;
  printf("register_plain_rc=%d\n", nic_register(plain, PLAIN_BYTES, NIC_REG_LOCAL, &ref));
  const int register_dp_rc = nic_register(dp, 3000, NIC_REG_LOCAL, &ref);
  printf("register_dp_rc=%d\n", register_dp_rc);
  if (register_dp_rc == 0) nic_unregister(&ref);
  const uint64_t copied_before = stats_now().bounce_bytes;
  struct nic_endpoint *ep = nic_sim_endpoint_create(on_receive, NULL, 0);
  struct nic_sga sga;
  if (!ep || nic_sga_init(&sga, 0)) return 1;
  /* a dataplane block, then the glibc block, each a message */
  int rc = nic_sga_add(&sga, dp, 3000);
  rc = rc ? rc : nic_sga_post(&sga, ep, on_done, NULL);
  rc = rc ? rc : nic_sga_add(&sga, plain, PLAIN_BYTES);
  rc = rc ? rc : nic_sga_post(&sga, ep, on_done, NULL);
  for (int i = 0; rc == 0 && posts_done < 2 && i < 100000; i++)
    nic_wait(10);
  printf("post_rc=%d\nposts_done=%d\nreceived_ok=%d\nreceived_bytes=%zu\n", rc, posts_done,
         received_ok, received_bytes);
  printf("copied_bytes=%llu\n", (unsigned long long)(stats_now().bounce_bytes - copied_before));
  nic_sga_reset(&sga);
  printf("destroy_rc=%d\n", nic_sim_endpoint_destroy(ep));
  const size_t live_before = stats_now().dataplane_live;
  nic_free(dp);
  free(plain);
  printf("freed_live_bytes=%zu\n", live_before - stats_now().dataplane_live);
  return 0;
}
