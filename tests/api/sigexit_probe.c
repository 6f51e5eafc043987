/* nic_sigexit_probe <delay_us>: a SIGALRM handler calls exit(7) while the main thread loops on
 * dataplane allocations, posts and frees, so that the signal lands wherever the loop is, locks of
 * nicmalloc held or not. The report at exit (NICMALLOC_STATS) must then come without waiting for
 * a lock this thread holds. */
#include "nicmalloc.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static void on_alarm(int sig) {
  (void)sig;
  exit(7);
}

static void received(void *arg, void *data, size_t len) {
  (void)arg, (void)data, (void)len;
}

static void sent(void *arg, int status) {
  (void)arg, (void)status;
}

int main(int argc, char **argv) {
  struct nic_endpoint *ep = nic_sim_endpoint_create(received, NULL, 0);
  if (!ep) return 2;
  signal(SIGALRM, on_alarm);
  const long delay_us = argc > 1 ? atol(argv[1]) : 1000;
  struct itimerval when = {.it_value = {delay_us / 1000000, delay_us % 1000000}};
  setitimer(ITIMER_REAL, &when, NULL);
  void *kept[128] = {0};
  for (unsigned i = 0;; i++) {
    void *d = nic_malloc(1000 + i % 9000);
    if (!d) continue;
    memset(d, 0, 64);
    struct nic_sga sga;
    if (!nic_sga_init(&sga, 0) && !nic_sga_add(&sga, d, 64)) nic_sga_post(&sga, ep, sent, NULL);
    free(kept[i % 128]);
    kept[i % 128] = d;
    free(malloc(i % 5000));
    nic_poll(0);
  }
}
