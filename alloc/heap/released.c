#include "released.h"

#include <stdint.h>

static uintptr_t starts[NIC_RELEASED_KEPT];
static unsigned next;

void nic_released_note(const void *p) {
  const unsigned slot = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % NIC_RELEASED_KEPT;
  __atomic_store_n(&starts[slot], (uintptr_t)p, __ATOMIC_RELAXED);
}

/* Only a bad pointer's report asks: a scan of the ring. */
bool nic_released_lately(const void *p) {
  for (unsigned i = 0; i < NIC_RELEASED_KEPT; i++)
    if (__atomic_load_n(&starts[i], __ATOMIC_RELAXED) == (uintptr_t)p) return true;
  return false;
}
