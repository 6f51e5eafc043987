/* The os layer's fields of struct nic_stats (collected by alloc/api/stats.c through this). */
#include "os_stats.h"

#include "late_decommit.h"
#include "maps.h"
#include "nicmalloc.h"
#include "pin.h"
#include "vspace.h"

/* mimalloc commits control memory by making it writable; what the kernel holds of it, mincore
 * says. Read from the kernel so that control malloc and free count nothing. Not from smaps,
 * whose Rss would do: the kernel walks every mapping's page tables to write it, the dataplane
 * chunks' included, and a stats read took 25 ms with 1 GiB of dataplane memory backed. */
struct control_range {
  struct nic_stats *out;
  uintptr_t lo, hi;
};

static bool add_control(const struct nic_maps_entry *e, void *arg) {
  struct control_range *r = arg;
  if (!e->writable) return true;
  const uintptr_t a = e->start > r->lo ? e->start : r->lo, b = e->end < r->hi ? e->end : r->hi;
  r->out->control_committed += b - a;
  r->out->control_resident += nic_resident_bytes((void *)a, b - a, NULL);
  return true;
}

void nic_os_fill_stats(struct nic_stats *out) {
  out->control_committed = out->control_resident = 0;
  if (nic_control_size) {
    struct control_range r = {out, nic_control_base, nic_control_base + nic_control_size};
    nic_maps_walk(r.lo, r.hi, add_control, &r);
  }
  out->vspace_refusals = __atomic_load_n(&nic_vspace_refusals, __ATOMIC_RELAXED);
  struct nic_late_decommit_counts late;
  nic_late_decommit_counts(&late);
  out->control_decommits_waited = late.noted;
  out->control_decommits_reused = late.reused;
  out->control_decommits_late = late.dropped;
}
