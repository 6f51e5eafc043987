/* Address space for mimalloc's memory. mimalloc 2.0.9 can only recognise its blocks below
 * 20 TiB (mi_is_in_heap_region: the reaper, the stats and the free check's fallback use it), and
 * maps large objects wherever the kernel likes. So nicmalloc reserves all heap memory
 * itself, inside that window: one control arena and the dataplane range. */
#ifndef NIC_VSPACE_H
#define NIC_VSPACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_VSPACE_LIMIT ((uintptr_t)20 << 40) /* mimalloc's MI_MAX_ADDRESS */
#define NIC_CONTROL_HINT ((uintptr_t)1 << 40)
#define NIC_DATAPLANE_HINT ((uintptr_t)16 << 40)

/* Reserves size bytes (PROT_NONE, no swap accounting) aligned to align, at or above hint and
 * ending below NIC_VSPACE_LIMIT. Returns NULL when no such place is free. */
void *nic_vspace_reserve(size_t size, size_t align, uintptr_t hint);

/* Gives mimalloc's default heap one big uncommitted arena and forbids it other OS memory, so
 * that every control block is recognisable. Returns false (after a warning) when the
 * reservation failed; mimalloc then maps memory itself and free checks cannot be strict.
 * use_commit_map: keep the commit map (commit_map.h) and let free trust it once proven; false
 * under NICMALLOC_FREE_CHECK=0, whose frees read nothing from the block (alloc_inline.h), and
 * then no interposed call updates a map nobody reads. */
bool nic_control_arena_init(bool use_commit_map);
/* True once the control arena is in place: a pointer mimalloc does not recognise is then
 * certainly not a block of ours. */
extern bool nic_free_check_strict;
/* Without the control arena mimalloc maps blocks over 1 GiB (it gives them no address hint)
 * wherever the kernel likes, above the 20 TiB its map covers. Such a pointer is taken on trust,
 * as the start-up warning says, once its page is known to be mapped, so that reading its
 * double-free key cannot fault: rejecting it would leak every such block and fail its realloc.
 * False with the arena in place, and below 20 TiB, where mimalloc's map is exact. */
bool nic_vspace_trusted_beyond_map(const void *p);
/* The control arena's range (0 when it could not be made). */
extern uintptr_t nic_control_base;
extern size_t nic_control_size;
/* Reservations refused (an address-space limit): the control arena's, the dataplane span's. */
extern uint64_t nic_vspace_refusals;
/* Bytes of address space reserved and held (the control arena, the dataplane range). */
extern uint64_t nic_vspace_reserved;
/* The process's mapped address space (VmSize: what RLIMIT_AS and mlockall's limit test count),
 * in bytes, or 0 when it cannot be read. */
uint64_t nic_vspace_mapped(void);
/* The soft address-space limit (RLIMIT_AS) in bytes; UINT64_MAX without one. */
uint64_t nic_vspace_soft_limit(void);
/* The same, with *room set to what it leaves unmapped (0 when the process is at or over it);
 * UINT64_MAX, room untouched, without a limit. Where VmSize cannot be read (no /proc) the room
 * is the largest mapping the limit lets through, found by trying, to within 64 MiB. */
uint64_t nic_vspace_limit(uint64_t *room);
/* nicmalloc's own part of it that holds no memory: the reservations and the tables made for them
 * (map.h; read-only zero pages until used). */
uint64_t nic_vspace_held(void);

#endif
