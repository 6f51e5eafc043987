/* Arenas mimalloc made before nicmalloc started. MIMALLOC_RESERVE_OS_MEMORY and
 * MIMALLOC_RESERVE_HUGE_OS_PAGES make mimalloc reserve one as it loads (its constructor runs
 * before ours), wherever the kernel puts it, above the 20 TiB its segment map covers; its
 * default heap then takes segments there before the control arena. No free could find those
 * blocks ours: every free of the program was refused (leaked, with an error line each). So their
 * free space is taken, by blocks that are never freed nor touched, before the control arena is
 * made, and the program's blocks all come from the control arena; one warning says the
 * reservation is held unused. */
#ifndef NIC_FOREIGN_ARENAS_H
#define NIC_FOREIGN_ARENAS_H

#include <stddef.h>

/* Fills every arena mimalloc has now; returns the bytes of arena reserved before us. */
size_t nic_foreign_arenas_fill(void);

#endif
