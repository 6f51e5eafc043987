/* Registrations never pin a page that is write-protected for a DMA in flight. Registering pins
 * the pages for writing (io_uring's fixed buffers, a verbs MR with local write): to the kernel
 * that is a write, so under NICMALLOC_FENCE=protect with userfaultfd it waits for the page's
 * completion, inside io_uring_register and holding the ring's lock, which the completion's own
 * io_uring_enter needs (a stall until NICMALLOC_FENCE_TIMEOUT_MS lets the held writes through);
 * under mprotect it fails with EFAULT. The layer that protects pages installs a guard here: a
 * registration starts only on pages free of protection, and no page of it is protected until it
 * ends; a caller told -EAGAIN waits outside its locks and tries again. */
#include "backend.h"
#include "thread.h"

#include <errno.h>

static const struct nic_pin_guard *guard;

void nic_backend_pin_guard_set(const struct nic_pin_guard *g) {
  __atomic_store_n(&guard, g, __ATOMIC_RELEASE);
}

int nic_backend_reg(struct nic_backend *b, void *base, size_t len, unsigned access,
                    struct nic_registration *out) {
  const struct nic_pin_guard *g = __atomic_load_n(&guard, __ATOMIC_ACQUIRE);
  const uintptr_t start = (uintptr_t)base, end = start + len;
  if (g && !g->begin(start, end)) return -EAGAIN;
  nic_backend_call_enter(b);
  /* What a backend keeps for a registration (DPDK's extmem bookkeeping, an rdma-core MR) lives
   * as long as it, which can be longer than the thread that made it (thread.h). */
  nic_lifetime_begin();
  int rc = b->reg(b, base, len, access, out);
  nic_lifetime_end();
  nic_backend_call_leave();
  if (g) g->end(start, end);
  return rc;
}

bool nic_backend_reg_wait(void *base, size_t len) {
  const struct nic_pin_guard *g = __atomic_load_n(&guard, __ATOMIC_ACQUIRE);
  return !g || g->wait((uintptr_t)base, (uintptr_t)base + len);
}
