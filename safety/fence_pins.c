/* protect and the writes nicmalloc makes on its own into pages beside posted blocks. A
 * registration pins its pages for writing (io_uring fixed buffers, verbs MRs), which the kernel
 * does as a write. On a page protected for a DMA in flight that write waits for the completion
 * (userfaultfd) inside io_uring_register, holding the ring's lock the completion's
 * io_uring_enter needs, so both wait until NICMALLOC_FENCE_TIMEOUT_MS and the program's held
 * writes then go through; or it fails with EFAULT (mprotect). So the pin guard
 * (regcache/cache/pin_guard.c) starts a registration only on pages that are not protected and
 * keeps posts from protecting them until it ends; a registration that meets protected pages
 * waits here, with no lock held that a completion takes, polling as nic_fence_write does. The
 * pass that gives back free 4 KiB pages inside mimalloc pages in use gets the same guard for the
 * free lists it rewrites, and passes over a page it refuses. */
#define _GNU_SOURCE
#include "backend.h"
#include "clock.h"
#include "fence.h"
#include "log.h"
#include "nocancel.h"
#include "sub_pages_scan.h"

#include <sched.h>

static bool pin_wait(uintptr_t start, uintptr_t end) {
  const uint64_t deadline = nic_now_ms() + nic_safety_config()->fence_timeout_ms;
  for (unsigned round = 0;; round++) {
    if (!nic_fence_any_marked(start, end) && !nic_fence_pins_full()) return true;
    if (nic_now_ms() >= deadline) {
      /* Else a program whose registrations all wait here only sees them refused (and their
       * entries copied), one timeout after another, with nothing said. */
      nic_log_warn_once("NICMALLOC_FENCE=protect: a registration of %#lx-%#lx waited %u ms "
                        "(NICMALLOC_FENCE_TIMEOUT_MS) for pages a post in flight keeps protected, "
                        "and is refused (nic_sga_add copies what it can)",
                        (unsigned long)start, (unsigned long)end,
                        nic_safety_config()->fence_timeout_ms);
      return false;
    }
    nic_backends_poll(NIC_POLL_COMPLETIONS_ONLY); /* the completions that release the pages */
    if (round < 64)
      sched_yield();
    else
      nic_pause_nocancel(20000);
  }
}

static const struct nic_pin_guard guard = {
    .begin = nic_fence_pin_begin, .end = nic_fence_pin_end, .wait = pin_wait};

/* The pass that gives back free 4 KiB pages inside mimalloc pages in use rewrites their free
 * lists, in blocks beside the program's: it passes over a page with a protected 4 KiB page,
 * and keeps posts from protecting one while it writes (heap/sub_pages_scan.h). */
static const struct nic_sub_pages_guard sweep_guard = {.begin = nic_fence_pin_begin,
                                                       .end = nic_fence_pin_end};

void nic_fence_pins_install(void) {
  nic_backend_pin_guard_set(&guard);
  nic_sub_pages_guard_set(&sweep_guard);
}

/* Under NICMALLOC_FENCE=protect from the start, before any registration: one that began before
 * the guard was there is not known to the first post, which could protect its pages. */
__attribute__((constructor)) static void install_at_start(void) {
  if (nic_safety_config()->fence == NIC_FENCE_PROTECT) nic_fence_pins_install();
}
