/* Decommits of control segments that exited threads abandoned wait for the purge delay once the
 * dataplane is in use (abandoned_decommit.c, alloc/os/late_decommit.h). */
#ifndef NIC_ABANDONED_DECOMMIT_H
#define NIC_ABANDONED_DECOMMIT_H

void nic_abandoned_decommits_wait(void);

#endif
