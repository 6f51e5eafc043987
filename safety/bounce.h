/* Bounce areas: pinned, registered dataplane slabs (control slabs through the registration
 * cache when the chunk cannot be registered) that small entries (and entries that cannot be
 * registered) are copied into. An array owns a chain of slabs; at post the chain moves to
 * the message and is freed by its completion, so nothing is reused while the NIC reads it. */
#ifndef NIC_BOUNCE_H
#define NIC_BOUNCE_H

#include <stddef.h>
#include <stdint.h>

#define NIC_SGA_BOUNCE 3u /* struct nic_sga_entry.kind of a copied entry */

/* Room for len bytes at the end of the newest slab of *chain, or in a new slab pushed on it.
 * Sets the registration's lkey and handle. NULL (-errno in *err) when no slab could be made
 * or registered. */
void *nic_bounce_take(void **chain, size_t len, uint32_t *lkey, uint64_t *handle, int *err);
/* Where a chain stands, so that an entry that failed after taking room gives it back: the
 * array is then as it was (nic_sga_add's promise), and retries do not grow it. */
struct nic_bounce_mark {
  void *head;
  size_t used;
};
struct nic_bounce_mark nic_bounce_mark(void *chain);
/* Frees the slabs pushed since mark and gives back the room taken in its newest one. */
void nic_bounce_rewind(void **chain, struct nic_bounce_mark mark);
/* Copies [p, p+len), and [q, q+qlen) after it when qlen, into room taken from *chain (as
 * nic_bounce_take), counted in bounce_bytes: *e becomes that copy, a NIC_SGA_BOUNCE entry of
 * the slab's registration. 0, or the -errno of nic_bounce_take (*e untouched). */
struct nic_sga_entry;
int nic_bounce_copy(void **chain, const void *p, size_t len, const void *q, size_t qlen,
                    struct nic_sga_entry *e);
/* Frees every slab of the chain and drops their registrations. */
void nic_bounce_free(void *chain);

#endif
