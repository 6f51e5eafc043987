/* Anonymous memory for the runtime's own tables and pools, by system call. Not through mmap,
 * munmap and mprotect: the runtime interposes those (alloc/os/interpose.c) to keep the
 * registration cache and the commit map right, and this memory is neither; going through them
 * from here would call a layer above, and take the cache's lock under whatever lock the table's
 * owner holds. Never malloc: tables and pools are made inside malloc and free. */
#ifndef NIC_MAP_H
#define NIC_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Zeroed pages with prot; with noreserve, no commit charge until written (MAP_NORESERVE).
 * NULL when the kernel refused. */
void *nic_map_anon(size_t bytes, int prot, bool noreserve);
void nic_unmap(void *p, size_t bytes);
/* Bytes mapped by nic_map_anon and not unmapped: the runtime's tables, mostly untouched. */
extern uint64_t nic_map_bytes;
/* Makes [p, p + bytes) of such memory readable and writable; false when the kernel refused. */
bool nic_map_writable(void *p, size_t bytes);

#endif
