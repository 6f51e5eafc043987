/* Per-thread state, written by its own thread (the reaper only closes the inline dataplane path
 * of a thread behind on the chunk states: nic_threads_nudge), so the hot paths take no lock and
 * no atomic read-modify-write. Dataplane live bytes are not counted here but read from
 * mimalloc's pages when asked (dp_live.h). */
#ifndef NIC_THREAD_H
#define NIC_THREAD_H

#include "chunks.h"

#include <mimalloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#define NIC_CURSOR_PARKED NIC_CHUNK_SLOTS
/* Largest request of the inline dataplane path's first branch: mimalloc's small sizes, which
 * mi_heap_malloc_small serves without testing the size again. */
#define NIC_DP_SMALL_MAX MI_SMALL_SIZE_MAX

struct nic_thread {
  /* malloc of n bytes takes the control fast path when n - NIC_MIN_BLOCK < fast_span
   * (unsigned): from NIC_MIN_BLOCK bytes up to below nic_fast_limit (NICMALLOC_DP_MIN_SIZE, or
   * SIZE_MAX) once the thread is set up and outside any dataplane scope, else 0. One load and
   * one compare decide the route and that the request needs no raising to the minimum block;
   * smaller requests take a second test, off the common path. */
  size_t fast_span;
  /* nic_malloc's inline dataplane path, from dp_heap. Small requests (NIC_MIN_BLOCK bytes up
   * to NIC_DP_SMALL_MAX) take it when size - NIC_MIN_BLOCK < dp_small_span (unsigned, one
   * compare as for fast_span), the others when size < dp_fast_below (one more than
   * nic_dp_fast_max). Both are 0 unless the thread is set up, has a heap in its cursor chunk,
   * is not paused at the cap and has seen the latest chunk epoch; the reaper stores 0 to both
   * of a thread behind on the epoch, so that its next allocation catches up on the slow path
   * (nic_threads_nudge). Read and written with relaxed atomics for that reason. */
  size_t dp_small_span;
  size_t dp_fast_below;
  mi_heap_t *dp_heap; /* heaps[cursor], kept by nic_thread_refresh_fast */
  int scope_depth;
  /* Nonzero while nicmalloc's own code runs on this thread (nic_internal_enter): its blocks are
   * control memory whatever the scope or NICMALLOC_DP_MIN_SIZE say. A count, as calls nest. */
  int internal_depth;
  mi_heap_t *internal_heap; /* what that code allocates from (alloc.c), made on first use */
  /* Nonzero while this thread makes a thread of nicmalloc's own (nic_own_thread_create): what
   * that allocates outlives this thread, and gets a mapping of its own (alloc.c). */
  int lifetime_depth;
  int state; /* enum below */
  /* Chunk this thread allocates dataplane memory from first; NIC_CURSOR_PARKED when that chunk
   * stopped being live, so that the next allocation takes the slow path, which scans. */
  unsigned cursor;
  /* nic_chunk_epoch when this thread last looked at the chunk states; written by this thread,
   * read by the reaper (relaxed). */
  unsigned seen_epoch;
  /* This thread's heap in each chunk's arena, and a last entry that is always NULL: the heap
   * the parked cursor finds, which sends the inline path to the slow one. */
  mi_heap_t *heaps[NIC_CHUNK_SLOTS + 1];
  /* Every chunk was full at the cap (dp_heap.c): until this CLOCK_MONOTONIC time in ns, or
   * until nic_chunk_epoch moves from full_epoch, the slow path does not look again. 0: not. */
  uint64_t full_until_ns;
  unsigned full_epoch;
  /* The inline path found the current chunk full too: it stays off until this thread frees a
   * block there (which may make room) or the pause ends. paused_chunk is that chunk, whose
   * frees take the general path meanwhile (nic_chunk_watch_frees), or NIC_CURSOR_PARKED. */
  bool dp_fast_paused;
  unsigned paused_chunk;
  /* Thread exit (thread.c). exit_marked: the thread made a dataplane heap before its exit
   * began, and asked to be told when it begins. exit_round: the round of glibc's key
   * destructors the exit hook last ran in, known (exit_counted) only for such a thread.
   * exit_mark_due: a heap was made, and the ask is still to be made (nic_thread_mark_exit).
   * late_heaps: a heap was made since the hook last ran. */
  bool exit_marked, exit_mark_due, exit_counted, late_heaps;
  unsigned char exit_round;
  /* Whether the thread is on the thread list: only a thread whose exit hook is sure to run before
   * it dies is (thread.c: arm_exit_hooks). */
  bool listed;
  /* glibc's block of the key table holding the last key's value, when it came from nicmalloc's
   * pool (nic_thread_key_block); key_block_due while the thread sets that key. */
  bool key_block_due;
  void *key_block;
  /* Chunks (a bit each) the reaper asked this thread to decommit what mimalloc only marked in
   * its segments there, and NIC_ASK_CONTROL_TRIM (nudge.h): set by the reaper or malloc_trim,
   * taken by the thread. */
  uint64_t decommit_asked;
  /* Answers their budget cut short (nudge.c), on this thread only: the areas (bits as above)
   * whose pass goes on at its next answer, those asked again meanwhile (a pass from the start
   * follows), and where the passes stand: the control arena's, and the lowest pending chunk's. */
  uint64_t answer_pending, answer_again;
  uintptr_t control_next, dataplane_next;
  /* nic_wait's and nic_thread_event_fd's (nudge.h): an eventfd of the thread's (its descriptor
   * + 1; 0 none), made at its first wait or hand-out and closed once the thread left the list;
   * whether it blocks in nic_wait now; the epoll set nic_thread_event_fd handed out (+ 1; 0
   * none), which holds it; and whether an ask wrote to it since the thread last read it. An
   * ask writes to it while the thread waits or once the set was handed out, so that a thread
   * waiting for the NIC, in nic_wait or in the program's own poll, wakes to answer. */
  int wake_fd_plus1;
  int waiting;
  int thread_fd_plus1;
  int wake_unread;
  /* The thread's stack [stack_lo, stack_hi) while a cached registration may cover part of it
   * (nic_thread_stack_watched); 0 and 0 otherwise. */
  uintptr_t stack_lo, stack_hi;
  /* This block lies in the thread's stack, as glibc places a thread's static TLS: every thread
   * but the process's main one, whose TLS the loader maps apart (nic_thread_block_in). */
  bool block_on_stack;
  struct nic_thread *next, *prev;
};

enum { NIC_THREAD_NEW = 0, NIC_THREAD_SETTING_UP, NIC_THREAD_READY, NIC_THREAD_EXITING };

extern __thread struct nic_thread nic_self __attribute__((tls_model("initial-exec")));

/* Sets the calling thread up (once). Returns false while setting up (re-entrant malloc from
 * inside the set-up) or after the thread has exited; callers then use the control heap. */
bool nic_thread_ready(void);
/* Recomputes nic_self.fast_span, and the inline dataplane path's limits and heap, after the
 * thread's state, scope, cursor, heaps or seen epoch changed. */
void nic_thread_refresh_fast(void);
/* What the fast paths take, set at start-up, copied by each thread when it refreshes. Cap on
 * fast_span: NICMALLOC_DP_MIN_SIZE's threshold, lowered by the control heap's tuning, profiling,
 * routing and detect's site records (each at its start-up step: startup.h). */
extern size_t nic_fast_limit;
/* Largest request the inline dataplane path takes (a chunk can hold far more; see dp_heap.c);
 * 0 until set-up, so that the inline path stays off. */
extern size_t nic_dp_fast_max;

/* Brackets nicmalloc's own work on the calling thread (statistics, backends, endpoints, posts,
 * its threads): what it allocates for itself must not become dataplane memory because the
 * caller is inside a dataplane scope or NICMALLOC_DP_MIN_SIZE is set, where it would map and pin
 * a chunk for bookkeeping. NIC_INTERNAL_SCOPE() at the top of a function covers every return. */
void nic_internal_enter(void);
void nic_internal_leave(void);
/* The calling thread's heap for nicmalloc's own blocks; NULL (use the default heap) while the
 * thread sets up or after its exit hook, when mimalloc may have deleted it. */
mi_heap_t *nic_internal_heap(void);
/* Around a call into the program from inside nicmalloc's work (a post's done, a receive
 * function, both run from nic_poll): what it allocates follows the program's own scope again.
 * nic_internal_resume takes what nic_internal_suspend returned. */
int nic_internal_suspend(void);
void nic_internal_resume(int depth);
static inline int nic_internal_scope_begin(void) {
  nic_internal_enter();
  return 0;
}
static inline void nic_internal_scope_end(int *unused) {
  (void)unused;
  nic_internal_leave();
}
#define NIC_INTERNAL_SCOPE()                                                                       \
  __attribute__((cleanup(nic_internal_scope_end))) int nic_internal_scope_ =                       \
      nic_internal_scope_begin()
/* glibc's block of 32 keys' values (struct pthread_key_data: a sequence number and the value). */
#define NIC_KEY_BLOCK_BYTES 512
/* While the calling thread sets its exit key: a zeroed block of the pool for glibc's calloc of the
 * key table's block (size at most NIC_KEY_BLOCK_BYTES), which then outlives the thread's heap;
 * else NULL. */
void *nic_thread_key_block(size_t size);
/* Whether p is that block, freed by glibc after the thread's last round of key destructors. */
static inline bool nic_thread_is_key_block(const void *p) {
  return p == nic_self.key_block;
}
void nic_thread_key_block_free(void);
/* t (the calling thread's nic_self) made a dataplane heap. */
void nic_thread_made_heap(struct nic_thread *t);
/* Where no lock of nicmalloc's is held, once t->exit_mark_due. */
void nic_thread_mark_exit(struct nic_thread *t);
/* After a dataplane allocation of t past its exit hook: gives up the heaps mimalloc made for it
 * since, as its end would, unless a later round of key destructors is sure to (thread.c). */
void nic_thread_after_late_alloc(struct nic_thread *t);
/* pthread_create for nicmalloc's own threads (the reaper, the backends' progress threads, the
 * fence's), the new thread starting with the signal mask given (NULL: every signal blocked;
 * the program's signals are for its own threads). glibc allocates the
 * new thread's TLS table (its DTV) in the calling thread, and keeps it as long as the thread
 * and its cached stack. In the caller's mimalloc heap that block outlives a caller that exits,
 * whose segment is then left to mimalloc's abandoned list, and mimalloc 2.0.9 walks that list
 * up to 1024 times at every later thread exit of the process (src/segment.c,
 * _mi_abandoned_collect, which visits the same segments again and again): measured, a thread's
 * start and exit took 150 us instead of 40 once the first dataplane allocation (which starts
 * the reaper) had come from a thread that exited. So what the creation allocates on a thread
 * other than the main one is mapped apart, as blocks nicmalloc maps itself (mapped.h). The thread
 * is counted while it runs (nic_own_threads_live), and the reaper started with it, which ends the
 * process once these are all that is left (last_thread.h). The thread names itself name (at most
 * 15 characters, kept as long as the thread starts). Returns pthread_create's answer. */
int nic_own_thread_create(pthread_t *thread, const char *name, void *(*fn)(void *), void *arg,
                          const sigset_t *mask);
/* How many threads nic_own_thread_create made are alive: at most as many as the kernel counts,
 * never more. */
unsigned nic_own_threads_live(void);
/* Every signal but the faults a thread causes itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP):
 * the mask of threads that keep the program's handlers off but run code whose faults must reach
 * theirs (completions writing a page the mprotect fence holds; DPDK's EAL catching SIGBUS as it
 * maps hugepages). A blocked fault would kill the process instead. */
void nic_signals_but_faults(sigset_t *set);
/* Whether the calling thread is the process's main thread, whose heap lasts as long as the
 * process (after fork, the thread that forked). */
static inline bool nic_on_main_thread(void) {
  return syscall(SYS_gettid) == getpid();
}
/* Around other work whose few allocations live as long as the process, for the same reason: the
 * opening of a built-in backend (a handful of blocks), a backend's registration (what it keeps
 * for it), a plugin backend's endpoint (a port's queue, a queue pair). A plugin's open, which makes
 * thousands, is not mapped block by block: it runs on a thread that lasts
 * (regcache/cache/lasting_thread.h). Calls nest. */
static inline void nic_lifetime_begin(void) {
  nic_self.lifetime_depth++;
}
static inline void nic_lifetime_end(void) {
  nic_self.lifetime_depth--;
}
static inline int nic_lifetime_scope_begin(void) {
  nic_lifetime_begin();
  return 0;
}
static inline void nic_lifetime_scope_end(int *unused) {
  (void)unused;
  nic_lifetime_end();
}
/* nic_lifetime_begin until the end of the enclosing block. */
#define NIC_LIFETIME_SCOPE()                                                                       \
  __attribute__((cleanup(nic_lifetime_scope_end))) int nic_lifetime_scope_ =                       \
      nic_lifetime_scope_begin()
/* Closes the inline dataplane path of every registered thread that has not seen chunk epoch
 * epoch, so that its next dataplane allocation takes the slow path, which catches up (collects
 * its heaps in draining chunks, moves its cursor off chunks that are not live). For progress
 * only: nothing depends on when the thread gets there (reaper.c says why releasing is safe). */
void nic_threads_nudge(unsigned epoch);
/* Asks every registered thread to decommit, on its next pass through mimalloc's generic
 * allocation path, what mimalloc only marked in its segments of the chunks (a bit each): the
 * reaper's nudge (nudge.h). */
void nic_threads_ask_decommit(uint64_t chunks);
/* The calling thread's stack is [lo, hi), and a registration cache is about to keep a
 * registration of some of it. glibc unmaps a thread's stack after the thread is gone, or gives
 * it to the next thread, by calls of its own that nobody sees, and maps the next thread's stack
 * the same way: so the exit hook says the stack's pages leave (events.h), as a munmap of them
 * would, before the thread dies. false when no hook is sure to run (the thread not set up, its
 * hooks not armed, or its exit begun): then nothing of the stack may be cached. Never
 * allocates, takes no lock. */
bool nic_thread_stack_watched(uintptr_t lo, uintptr_t hi);
/* Whether the thread block (nic_self, in the static TLS that glibc puts at the top of a thread's
 * stack, a stack of its own or one the program gave) of a listed thread other than the caller
 * and the main thread lies in [lo, hi): a mapping that holds it is that thread's stack. Takes
 * the thread list's lock, never allocates. */
bool nic_thread_block_in(uintptr_t lo, uintptr_t hi);
/* Closes t's eventfd and its handed-out set (thread exit, and every thread in a fork child, where
 * they are the parent's threads' copies). */
void nic_thread_close_wake(struct nic_thread *t);

#endif
