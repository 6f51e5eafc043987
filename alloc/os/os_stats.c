/* The os layer's fields of struct nic_stats (collected by alloc/api/stats.c through this). */
#include "os_stats.h"

#include "late_decommit.h"
#include "nicmalloc.h"
#include "smaps.h"
#include "vspace.h"

/* mimalloc commits control memory by making it writable; what the kernel holds is Rss. Read from
 * the kernel so that control malloc and free count nothing. */
static bool add_control(const struct nic_smaps_entry *e, void *arg) {
  struct nic_stats *s = arg;
  if (e->writable) s->control_committed += e->end - e->start;
  s->control_resident += e->rss_kb << 10;
  return true;
}

void nic_os_fill_stats(struct nic_stats *out) {
  out->control_committed = out->control_resident = 0;
  if (nic_control_size)
    nic_smaps_walk(nic_control_base, nic_control_base + nic_control_size, add_control, out);
  out->vspace_refusals = __atomic_load_n(&nic_vspace_refusals, __ATOMIC_RELAXED);
  struct nic_late_decommit_counts late;
  nic_late_decommit_counts(&late);
  out->control_decommits_waited = late.noted;
  out->control_decommits_reused = late.reused;
  out->control_decommits_late = late.dropped;
}
