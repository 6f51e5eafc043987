/* send_order.h: the word the send family tests, and the hook behind it. */
#include "send_order.h"

unsigned nic_send_order_endpoints;
static int (*before_send)(int fd, int flags);

void nic_send_order_set(int (*before)(int fd, int flags)) {
  __atomic_store_n(&before_send, before, __ATOMIC_RELEASE);
}

void nic_send_order_watch(int delta) {
  __atomic_add_fetch(&nic_send_order_endpoints, (unsigned)delta, __ATOMIC_SEQ_CST);
}

int nic_send_order(int fd, int flags) {
  int (*before)(int, int) = __atomic_load_n(&before_send, __ATOMIC_ACQUIRE);
  return before ? before(fd, flags) : 0;
}
