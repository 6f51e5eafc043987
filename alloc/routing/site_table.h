/* Sites the LLVM pass emitted, switched on and off: NICMALLOC_SITES_OFF and NICMALLOC_SITE_TABLE
 * at start-up (see site_table.c), nic_site_set_enabled at any time. */
#ifndef NIC_SITE_TABLE_H
#define NIC_SITE_TABLE_H

#include "alloc.h"

#include <stdint.h>

/* DATAPLANE while the site is on (every site starts on), AUTO when it is off or unknown: off
 * undoes the pass's choice and nothing more, so the call is routed as the plain one it replaced
 * (scope, NICMALLOC_DP_MIN_SIZE, NICMALLOC_SITES), as in a build without the pass. */
enum nic_route nic_site_route(uint32_t site);

#endif
