/* The decommit mimalloc 2.0.9 has delayed, done when the program asks for memory back.
 *
 * 2.0.9 marks a freed span for decommit after its delay (mi_option_decommit_delay, the purge
 * delay here) and decommits it only when the owning thread next takes a page from that segment,
 * frees another span there after the delay, or exits; each free meanwhile pushes the deadline
 * on by a millisecond. A thread that frees most of its blocks and then allocates elsewhere, or
 * not at all, keeps those spans committed, so their steps pinned, for good: after bench/frag's
 * random 90% shrink one span was decommitted in the whole run, on 4 KiB and huge pages alike.
 *
 * nic_collect, on the owning thread, does for each of its dataplane segments (malloc_trim for its
 * control segments too) what 2.0.9's
 * mi_segment_delayed_decommit(segment, force) does: its marked slices leave the segment's commit
 * mask and are decommitted through the heap's own decommit (steps.h), so mimalloc commits them
 * again before it reuses them. This writes mimalloc's segment header with 2.0.9's layout
 * (mi_layout.h), checked on a segment of our own first, and only on a segment whose cookie is
 * mimalloc's and whose owner is the calling thread: the thread mimalloc itself would do it on. */
#ifndef NIC_MI_DECOMMIT_H
#define NIC_MI_DECOMMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decommits the slices mimalloc marked for decommit in the calling thread's segments of
 * dataplane chunk index (mapped). Returns the bytes decommitted. Not on a hot path. */
size_t nic_mi_decommit_owned(unsigned index);
/* Calls fn on each normal segment of chunk index that the calling thread owns, once the layout
 * is known to be 2.0.9's (the same checks as the decommit's); returns the sum of its answers. */
size_t nic_mi_each_owned_segment(unsigned index, size_t (*fn)(uintptr_t segment, void *arg),
                                 void *arg);
/* The same over the control arena, where the commit map is trusted (commit_map.h). */
size_t nic_mi_each_owned_control_segment(size_t (*fn)(uintptr_t segment, void *arg), void *arg);
/* nic_mi_decommit_owned for the calling thread's control segments (malloc_trim), decommitted
 * as mimalloc does it there. */
size_t nic_mi_decommit_owned_control(void);

#endif
