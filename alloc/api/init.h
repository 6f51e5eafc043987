#ifndef NIC_INIT_H
#define NIC_INIT_H

#include <stdbool.h>

void nic_global_init_slow(void);
bool nic_global_init_done(void);
/* Cheap after the first call. */
static inline void nic_global_init(void) {
  if (__builtin_expect(!nic_global_init_done(), 0)) nic_global_init_slow();
}

#endif
