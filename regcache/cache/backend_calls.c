/* Which backends the calling thread is inside of. A backend may allocate, free or unmap memory
 * inside its reg and dereg while it holds its own locks (DPDK's extmem calls do, under DPDK's
 * memory lock and the backend's), and a free or an unmap of memory a cached region covers
 * invalidates that region at once, from inside the call: when the region is the same backend's,
 * its deregistration would enter the backend again and wait on a lock its own thread holds. The
 * registration cache asks nic_backend_in_call first and defers such a deregistration (the region
 * is out of its table already, so nothing can use it meanwhile) until the thread's outermost
 * backend call returns (nic_rcache_retry_deferred).
 *
 * A registration runs under nicmalloc's locks (a step's under the chunks' lock) and a backend's
 * may reach cancellation points (rdma-core writes its commands to the device's descriptor): a
 * cancel pending on the thread waits until the outermost call returns. */
#include "backend.h"
#include "nocancel.h"
#include "rcache.h"
#include "thread.h"

#define NESTING_RECORDED 8 /* deeper nesting is counted, not recorded: never seen */

static __thread const struct nic_backend *in_call[NESTING_RECORDED]
    __attribute__((tls_model("initial-exec")));
static __thread unsigned depth __attribute__((tls_model("initial-exec")));
static __thread int cancel_before __attribute__((tls_model("initial-exec")));

void nic_backend_call_enter(const struct nic_backend *b) {
  nic_internal_enter();
  if (depth == 0) cancel_before = nic_cancel_off();
  if (depth < NESTING_RECORDED) in_call[depth] = b;
  depth++;
}

void nic_backend_call_leave(void) {
  if (--depth == 0) {
    nic_rcache_retry_deferred();
    nic_cancel_restore(cancel_before);
  }
  nic_internal_leave();
}

bool nic_backend_in_call(const struct nic_backend *b) {
  for (unsigned i = 0; i < depth && i < NESTING_RECORDED; i++)
    if (in_call[i] == b) return true;
  return false;
}

int nic_backend_dereg(struct nic_backend *b, struct nic_registration *reg) {
  nic_backend_call_enter(b);
  int rc = b->dereg(b, reg);
  nic_backend_call_leave();
  return rc;
}
