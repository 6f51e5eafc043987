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
 * A user's MIMALLOC_EAGER_COMMIT wins, as MIMALLOC_DECOMMIT_DELAY does. */
#include "startup.h"

#include <mimalloc.h>
#include <stdlib.h>

static void commit_on_demand(void) {
  if (!getenv("MIMALLOC_EAGER_COMMIT")) mi_option_disable(mi_option_eager_commit);
}
/* Before the first dataplane segment, which comes after the dataplane range is reserved. */
NIC_STARTUP_STEP(commit_policy, NIC_START_DATAPLANE, commit_on_demand);
