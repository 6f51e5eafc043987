/* NICMALLOC_SITES_OFF and NICMALLOC_SITE_TABLE: see site_table.c. */
#ifndef NIC_SITE_TABLE_H
#define NIC_SITE_TABLE_H

/* Switches off the sites the environment names. Called once at start-up. */
void nic_site_table_apply(void);

#endif
