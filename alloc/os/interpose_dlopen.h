/* The exported dlopen and dlmopen (interpose_dlopen.c). */
#ifndef NIC_INTERPOSE_DLOPEN_H
#define NIC_INTERPOSE_DLOPEN_H

/* Calls to dlopen and dlmopen so far, counted on entry (the load itself may not be done yet):
 * what names modules loaded after start-up (routing/profile_sites.c) tests to look for new
 * ones without walking the loaded objects on every allocation. */
extern unsigned long nic_dlopen_calls __attribute__((visibility("hidden")));

#endif
