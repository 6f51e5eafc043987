/* An address-space limit lowered while the program runs, under nicmalloc's reservations: see
 * as_limit.c. */
#ifndef NIC_AS_LIMIT_H
#define NIC_AS_LIMIT_H

/* A mapping just failed (errno as it left it, kept): says why, once, when the limit the program
 * lowered is what our reservations put it over. */
void nic_as_limit_mapping_refused(void);

#endif
