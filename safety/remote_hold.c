/* The registration cache's guard for registrations with remote access (rcache.h): a peer with
 * the key reads or writes their pages whenever it likes, with no post to wait for, so the pages
 * are held as nic_hold holds one (the high half of their page counts). A free of any block
 * touching them is deferred (deferred.c), and the block is not handed out again under the key,
 * until the registration is off the NIC: deregistered by its nic_unregister, or revoked when the
 * pages left. */
#include "pagecount.h"
#include "rcache.h"
#include "receive.h"
#include "safety.h"

static bool hold(uintptr_t start, uintptr_t end) {
  return nic_pc_add(start, end, NIC_PC_HOLD);
}

static void unhold(uintptr_t start, uintptr_t end) {
  nic_pc_sub(start, end, NIC_PC_HOLD);
}

static void unheld(void) {
  nic_safety_retry_deferred();
  nic_receive_retry_held(); /* a receive buffer under the key waited too */
}

static const struct nic_rcache_page_guard guard = {
    .hold = hold, .unhold = unhold, .unheld = unheld};

/* Before any registration: one made without the guard would hold nothing. */
__attribute__((constructor)) static void install(void) {
  nic_rcache_page_guard_set(&guard);
}
