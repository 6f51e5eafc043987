/* mimalloc commits a new segment whole (mi_option_eager_commit), except a thread's first one
 * when the process has other threads (mi_option_eager_commit_delay). Inside a dataplane chunk
 * every commit backs, prefaults and pins the steps it covers (steps.h), so an eager segment
 * pinned 32 MiB for the first 64-byte block whatever NICMALLOC_PIN_STEP said. Without
 * eager commit mimalloc commits a segment's slices as its pages take them (1 MiB at least,
 * MI_MINIMAL_COMMIT_SIZE), and a chunk pins the steps that hold blocks. The option is global
 * (mimalloc asks it once per segment, with no heap at hand): the control heap commits on demand
 * too, one mprotect per MiB of fresh pages instead of one per 32 MiB segment, which is what
 * mimalloc already does for every thread's first segment (bench/README.md, "First dataplane
 * allocation").
 * A user's MIMALLOC_EAGER_COMMIT wins, as MIMALLOC_DECOMMIT_DELAY does, except in secure
 * execution (os/mimalloc_options.c) and under
 * NICMALLOC_ON_PIN_FAIL=fail: mimalloc 2.0.9's arena commits an eager segment without looking
 * at the answer, so a segment whose steps could not be locked was handed out all the same (forty
 * 1 MiB dataplane blocks came back under an 8 MiB memlock limit, 32 MiB of them unpinned). On
 * demand, every commit is a page's, whose failure mimalloc passes on as ENOMEM. */
#include "config.h"
#include "log.h"
#include "settings.h"
#include "startup.h"

#include <mimalloc.h>
#include <stdlib.h>

static void commit_on_demand(void) {
  if (nic_secure_execution() || !getenv("MIMALLOC_EAGER_COMMIT")) {
    mi_option_disable(mi_option_eager_commit);
  } else if (nic_config()->on_pin_fail == NIC_PIN_FAIL_FAIL &&
             mi_option_is_enabled(mi_option_eager_commit)) {
    mi_option_disable(mi_option_eager_commit);
    nic_log_warn("MIMALLOC_EAGER_COMMIT is not followed under NICMALLOC_ON_PIN_FAIL=fail: "
                 "mimalloc hands out an eagerly committed segment whatever its commit said, so "
                 "dataplane blocks that could not be pinned would be handed out");
  }
}
/* Before the first dataplane segment, which comes after the dataplane range is reserved. */
NIC_STARTUP_STEP(commit_policy, NIC_START_DATAPLANE, commit_on_demand);
