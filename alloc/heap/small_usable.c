/* mi_good_size is mimalloc's public answer to "how much will I get for n bytes"; each entry is
 * checked once against a real block, so a mimalloc whose two answers disagreed would only make
 * the dataplane path ask mi_usable_size as before, never count wrong. A size's entry serves every
 * request that rounds to the same 8 bytes: mimalloc's size classes are multiples of 8. */
#include "small_usable.h"
#include "startup.h"

uint32_t nic_small_usable[NIC_SMALL_USABLE_MAX / 8 + 1];

static void small_usable_init(void) {
  for (size_t i = 1; i <= NIC_SMALL_USABLE_MAX / 8; i++) {
    const size_t size = i * 8;
    const size_t good = mi_good_size(size);
    /* The smallest and largest request of the 8-byte step must land in the same class. */
    void *low = mi_malloc(size - 7), *high = mi_malloc(size);
    if (low && high && mi_usable_size(low) == good && mi_usable_size(high) == good &&
        mi_good_size(size - 7) == good)
      nic_small_usable[i] = (uint32_t)good;
    mi_free(low);
    mi_free(high);
  }
}
/* After the control arena: it allocates. */
NIC_STARTUP_STEP(small_usable, NIC_START_SMALL_USABLE, small_usable_init);
