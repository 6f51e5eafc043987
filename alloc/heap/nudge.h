/* The reaper's nudge: freed dataplane pages go back without nic_collect.
 *
 * mimalloc 2.0.9 decommits a freed span only when its owning thread comes back to that segment
 * (mi_decommit.h), and only that thread may write the segment's masks. A program that shrinks
 * and never calls nic_collect or malloc_trim keeps those spans committed, so their steps
 * pinned. The reaper cannot do the decommit itself: it runs on its own thread.
 *
 * What the reaper watches: per live chunk, the bytes mimalloc holds committed there (the slice
 * map's committed bits, steps.c, eight slices a load) against the live bytes (dp_live.h), which
 * it reads on every pass already. Marked spans per segment would be the exact signal, but they sit
 * in headers of other threads' segments, which the reaper must not read (a segment may be freed,
 * its step given back, under the read). When committed minus live is at least an eighth of
 * what is committed (and 1 MiB) for the purge delay (the time mimalloc itself would have
 * waited), every thread is asked to decommit its marked spans in that chunk. Again only once
 * the live bytes fell, or the committed bytes rose, by as much since the last nudge: a chunk
 * whose gap is fragmentation (partly used pages, retired pages: nothing marked) is nudged once,
 * not on every pass, and again when more was freed.
 *
 * Where the thread answers: mimalloc's deferred-free hook (mi_register_deferred_free), which
 * 2.0.9 calls on the owner thread at the top of _mi_malloc_generic, for every heap of the thread
 * (control heap included), whenever a page's free list runs out: never on the fast path, but
 * every page's worth of allocations of a size, and at every first block of a size. The answer
 * (nudge.c) is the same as nic_collect's for that chunk: a normal collect of the thread's heap
 * there, the forced decommit of its own segments, and the free 4 KiB pages inside its pages
 * still in use given back (sub_pages.h), which after a shrink at random is most of what can go:
 * a chunk whose gap is such fragmentation gives it back at its first nudge. That pass reads the
 * free lists of every page, 100 ms over a heap of a million free blocks, inside an allocation of
 * the program's: so one answer reads at most a fixed number of list blocks (nudge.c), and the
 * pass goes on where it stopped at the thread's next answers. A thread also answers in nic_poll
 * (and so in nic_wait), outside its calls into mimalloc: a thread that serves the NIC and seldom
 * allocates polls all the more; one blocked in nic_wait is woken by the ask (an eventfd of its
 * own beside the backends' descriptors) and goes on polling without blocking until its pass is
 * done. A thread that does none of these again is not reached (nor one that waits in its own
 * poll on nic_event_fd): its spans stay committed until it exits (mimalloc then abandons its
 * segments and the reaper's abandoned visits free the empty ones) or calls nic_collect. */
#ifndef NIC_NUDGE_H
#define NIC_NUDGE_H

#include "chunks.h"

#include <stdint.h>

/* The same hook carries malloc_trim's request to every other thread: decommit what mimalloc only
 * marked in the thread's control segments and give back the free 4 KiB pages inside its control
 * pages in use (control_sub_pages.h), which only the owner may do; and in every live chunk what
 * nic_collect does there, as the reaper's nudge asks (without its wait: the program asked). A
 * thread answers at its next allocations that leave mimalloc's fast path, as it answers the
 * reaper. */
#define NIC_ASK_CONTROL_TRIM ((uint64_t)1 << 63)
_Static_assert(NIC_CHUNK_SLOTS < 63, "the control trim's bit is above every chunk's");

/* malloc_trim, after its own thread's share (nic_collect, nic_control_trim_owned): asks the
 * other threads for theirs. */
void nic_nudge_ask_trim(void);

/* On the calling thread, outside mimalloc and nicmalloc's own code (nic_poll): answers what it
 * was asked and has not answered yet, within the same bound as an answer in an allocation. */
void nic_nudge_answer_pending(void);
/* nic_wait, about to block: a descriptor that polls readable once the calling thread is asked
 * (-1: none, the wait is as it was), or -EAGAIN when an ask or a pass cut short waits for it
 * (poll again without blocking: each poll answers a bounded part). nic_nudge_wait_end after. */
int nic_nudge_wait_begin(void);
void nic_nudge_wait_end(void);
/* nic_thread_event_fd: an epoll set of the calling thread's eventfd and backends_fd (-1: none),
 * made once per thread and closed when it exits. From then on every ask writes to the eventfd,
 * and nic_nudge_answer_pending keeps the set readable while a pass is left and empties it once
 * the pass is done. The set's descriptor, or -errno (-ESRCH: the thread is setting up or
 * exiting). */
int nic_nudge_thread_event_fd(int backends_fd);

/* Hands mimalloc the hook (once; the dataplane's first use, with the reaper). */
void nic_nudge_install(void);
/* The reaper, once a pass, under its pass lock, with the live bytes of every chunk slot. */
void nic_nudge_pass(const int64_t live[NIC_CHUNK_SLOTS], uint64_t now_ms);

struct nic_nudge_totals {
  uint64_t asked;   /* chunks the reaper asked the threads to decommit in */
  uint64_t answers; /* heaps that answered (a thread's heap in an asked chunk) */
  uint64_t bytes;   /* bytes those answers decommitted or gave back inside pages in use */
};
void nic_nudge_totals(struct nic_nudge_totals *out);

#endif
