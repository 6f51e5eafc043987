/* The fork-lock registry: every lock of the runtime, held across fork() in one fixed order.
 *
 * A child of a multi-threaded process has only the thread that forked. A lock another thread
 * held at that moment stays held in the child forever, so the one fork handler (alloc/api/init.c
 * installs it) takes every lock below before fork, lets go of them in the parent, and makes
 * them anew in the child, where none of the parent's other threads exists. Then it runs the
 * child hooks (state a child must not inherit), in the same order, with every lock free.
 *
 * A lock registers itself next to its definition, in a static table the linker gathers
 * (section nic_forklocks): no malloc, no start-up order, and a lock cannot be forgotten by a
 * hand list elsewhere. This file includes nothing of regcache/ or safety/.
 *
 * ORDER. The prepare handler holds the locks of lower ranks while it waits for the next one,
 * so a lock must come before every lock its holders may wait for, directly or through a lock
 * or thread that is not on the list. Derived from the code (holder -> what it may wait for):
 *   files written aside        nothing: held only while a writer of the profile or the report
 *                              opens or closes a file, so that a child closes its copies
 *                              (alloc/base/file_aside.c)
 *   sim endpoints, endpoints   close an endpoint: the receivers' lock, then the backend's
 *                              close, which refuses while posts are out but frees what the
 *                              endpoint set up (receive buffers: blocks, cache slots), and
 *                              may run what its lock runs (everything below)
 *   fence report               the profile table (the blocks' sites), the log
 *   dataplane growth           the chunks lock, mmap/munmap of a chunk (the cache)
 *   chunks                     munmap (the cache)
 *   (hugetlb copy)             no lock: under the chunks lock, copies the hugetlb steps a child
 *                              must not share (alloc/heap/fork_hugetlb.c); straight system
 *                              calls, so it waits for no lock; in the child it puts the copy
 *                              in place as the locks are made anew, before every child hook
 *   registration cache         the backend's reg/dereg, which may free memory (a deferred
 *                              free) and allocate: a thread's first block (the thread list),
 *                              a huge block (the huge cache), a block mapped apart off the
 *                              main thread (mapped blocks). Fork waited for it holding those
 *                              three while a registration waited for one of them.
 *   threads, huge cache, mapped blocks, deferred, holds, receivers, fence detect, fence
 *   protect, pressure, profile table, shm attaches:
 *                              leaves (their holders take no other lock: pool memory is
 *                              mapped by system call, alloc/base/map.h, which the cache does
 *                              not see)
 * The hooks (no lock) come last: the backends' is before in-flight, whose frees must find the
 * backends marked the parent's and the write protection gone.
 *
 * EVERY LOCK of alloc/, regcache/ and safety/ and its decision:
 *   held across fork (on the list, ranks below): the descriptors of files written aside
 *     (alloc/base/file_aside.c), the sim endpoint list (safety/endpoint.c),
 *     the other endpoints' list (safety/endpoint_common.c), the fence report lock
 *     (safety/fence_report.c), the growth lock (alloc/heap/dp_heap.c), the chunks lock
 *     (alloc/heap/chunks.c), the registration caches (regcache/cache/rcache.c, one lock for
 *     all), the thread list (alloc/heap/thread.c), the huge-block cache
 *     (alloc/heap/huge_cache.c), the table of blocks nicmalloc maps itself
 *     (alloc/heap/mapped.c), the deferred-free table (safety/deferred.c), the hold table
 * (safety/hold.c), the receivers and held receive buffers (safety/receive.c), the detect records
 *     (safety/fence_detect.c), the protect spin lock (safety/fence_protect.c, taken with
 *     signals blocked as every holder does), the pressure model (safety/pressure.c), the
 *     profile table's spin lock (alloc/routing/profile_table.c), the System V attach table
 *     (alloc/os/interpose_shm.c), the control decommits that wait (alloc/os/late_decommit.c:
 *     since mimalloc commits, under any of the others, take it), the republication of free's
 *     fast spans (alloc/base/fast_spans.c: last, a leaf that watchers under any lock and the
 *     commit map, under the decommits' lock, take).
 *   not held, only reset in the child (a reset entry, or its module's child hook):
 *     - the reaper pass lock (alloc/heap/reaper.c): holding it would make fork wait for a whole
 *       pass, a visit of mimalloc's abandoned segments included; everything a pass changes
 *       is under the thread and chunks locks, which are held, and the reaper thread that
 *       holds it does not exist in the child.
 *     - the abandoned visits lock (alloc/heap/dp_heap.c), for the same reason: a visit is long,
 *       and the thread making it does not exist in the child.
 *     - the dataplane reservation flag (alloc/heap/chunks.c "reserving", by the chunks' hook), a
 *       try-lock: holding it would make a concurrent dataplane request fail; what it guards
 *       is published with one atomic store, so the child sees the reservation done or not
 *       done, then makes its own.
 *   not held, made anew in the child (its hook): the lock under which backends start
 *     (regcache/cache/backend.c). Its holder opens a backend (allocating, mapping, loading a
 *     plugin: the allocator's and the registration cache's locks), and the default backend is
 *     chosen under the registration cache's lock by a first registration, so it can come
 *     neither before nor after that lock. A start under way at fork makes the child the
 *     parent's, as a finished one does: the child has the opening thread's half-made state
 *     (DPDK's EAL, a plugin's dlopen), on which a start of its own crashed or aborted.
 *   not held, reset in the child with what it guards: the list of sims whose pending posts
 *     an unmap must look at (regcache/sim/sim_keep.c, a rwlock): a child's munmap would otherwise
 *     wait for a parent's sim; the child has no sim of its own, so the list is emptied. The same
 *     for the list of open uring backends that plain sends look at (regcache/uring/
 *     uring_progress.c, a rwlock), with its endpoint counts: the child's sends go straight out.
 *   not held, never touched by a child: the backends' own locks (regcache/sim/sim_nic.c,
 *     sim_dma.c, uring*.c, verbs.c, dpdk*.c, one per backend or endpoint). A child of a process
 *     with an open backend neither registers, posts nor polls (regcache/cache/backend.c), so it
 *     never takes them; holding them would make fork wait for the sim engine.
 *   pthread_once (alloc/heap/thread.c, safety/config.c, pressure.c,
 *     fence_protect.c, fence_threads.c): glibc restarts in the child an initialisation that a
 *     parent thread had under way (its fork generation), so nothing is needed.
 *   the start-up flags (alloc/base/config.c config_state, alloc/api/init.c init_state), once-only
 *     states others wait for: both are set before or right after the fork handler is
 *     installed (init's last step), so no fork that runs it finds the settings half read; a
 *     fork between that step and init_state's final store is not covered: its child would
 *     wait forever for init, unless the initialising thread itself forked.
 *   mimalloc's own state is mimalloc's; the locks above are the runtime's.
 */
#ifndef NIC_FORKLOCK_H
#define NIC_FORKLOCK_H

#include <pthread.h>
#include <stdbool.h>

/* The order: lower ranks are taken first. One entry per rank. */
enum nic_fork_rank {
  NIC_FORK_ASIDE_FILES,
  NIC_FORK_SIM_ENDPOINTS,
  NIC_FORK_ENDPOINTS,
  NIC_FORK_FENCE_REPORT,
  NIC_FORK_REAPER_PASS,
  NIC_FORK_ABANDONED_VISITS, /* reset only (heap/dp_heap.c) */
  NIC_FORK_DP_GROW,
  NIC_FORK_CHUNKS,
  NIC_FORK_HUGETLB_COPY, /* no lock: hugetlb steps copied for the child (heap/fork_hugetlb.c) */
  NIC_FORK_RCACHE,
  NIC_FORK_THREADS,
  NIC_FORK_HUGE_CACHE,
  NIC_FORK_MAPPED,
  NIC_FORK_DEFERRED,
  NIC_FORK_HOLDS,
  NIC_FORK_RECEIVERS,
  NIC_FORK_FENCE_DETECT,
  NIC_FORK_FENCE_PROTECT,
  NIC_FORK_PRESSURE,
  NIC_FORK_PROFILE_TABLE,
  NIC_FORK_SHM_ATTACHES,
  NIC_FORK_LATE_DECOMMITS,
  NIC_FORK_FAST_SPANS,
  NIC_FORK_SIM_KEEP,   /* reset only: the parent's sims are not the child's */
  NIC_FORK_URING_OPEN, /* reset only: the parent's endpoints hold no plain send of the child */
  /* Child hooks without a lock of their own. */
  NIC_FORK_REAPER_THREAD, /* the reaper is gone: start it again on need */
  NIC_FORK_PROFILE_SINK,  /* the child's profile counts start from zero */
  NIC_FORK_PROFILE_FILE,  /* and so does what it has written of the profile */
  NIC_FORK_BACKEND,       /* the backends are the parent's (their start lock made anew) */
  NIC_FORK_INFLIGHT,      /* the parent's posts are void in the child (safety/inflight_fork.c) */
  NIC_FORK_FENCE_THREADS, /* protect's threads are gone: started again by the child's posts */
  NIC_FORK_EXIT_REPORT,   /* a child reports none while its parent runs (api/exit_report.c) */
  NIC_FORK_RANKS
};

struct nic_forklock {
  unsigned rank;
  const char *name;
  pthread_mutex_t *mutex; /* a pthread mutex, or NULL */
  bool recursive;
  /* Locks that are not pthread mutexes: take, let go in the parent, make free in the child. */
  void (*acquire)(void);
  void (*release)(void);
  void (*reset)(void);
  /* In the child, once every lock is free again: state the child must not inherit. */
  void (*child)(void);
};

#define NIC_FORKLOCK_ENTRY_(id)                                                                    \
  static const struct nic_forklock nic_forklock_##id                                               \
      __attribute__((used, section("nic_forklocks"), aligned(sizeof(void *))))

/* A pthread mutex; child may be NULL. */
#define NIC_FORKLOCK_MUTEX(id, rank_, mutex_, child_)                                              \
  NIC_FORKLOCK_ENTRY_(id) = {.rank = (rank_), .name = #id, .mutex = (mutex_), .child = (child_)}
/* A mutex made with PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP. */
#define NIC_FORKLOCK_RECURSIVE(id, rank_, mutex_, child_)                                          \
  NIC_FORKLOCK_ENTRY_(id) = {                                                                      \
      .rank = (rank_), .name = #id, .mutex = (mutex_), .recursive = true, .child = (child_)}
/* Any other lock. */
#define NIC_FORKLOCK_CUSTOM(id, rank_, acquire_, release_, reset_, child_)                         \
  NIC_FORKLOCK_ENTRY_(id) = {.rank = (rank_),                                                      \
                             .name = #id,                                                          \
                             .acquire = (acquire_),                                                \
                             .release = (release_),                                                \
                             .reset = (reset_),                                                    \
                             .child = (child_)}
/* No lock: only a child hook. */
#define NIC_FORK_CHILD(id, rank_, child_)                                                          \
  NIC_FORKLOCK_ENTRY_(id) = {.rank = (rank_), .name = #id, .child = (child_)}

/* The fork handlers (pthread_atfork, alloc/api/init.c). */
void nic_forklock_prepare(void);
void nic_forklock_parent(void);
void nic_forklock_child(void);

#endif
