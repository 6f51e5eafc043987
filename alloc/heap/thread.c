#include "thread.h"

#include "block.h"
#include "dp_heap.h"

#include "events.h"
#include "forklock.h"
#include "log.h"
#include "nocancel.h"
#include "pool.h"
#include "reaper.h"
#include "startup.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/single_threaded.h>
#include <unistd.h>

__thread struct nic_thread nic_self __attribute__((tls_model("initial-exec")));

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nic_thread *threads;
static struct nic_pool key_blocks = NIC_POOL_INIT(NIC_KEY_BLOCK_BYTES); /* under threads_lock */
size_t nic_fast_limit = SIZE_MAX;
size_t nic_dp_fast_max;

/* The exit hooks' keys (arm_exit_hooks). A thread on the list lives in its own TLS there, which
 * glibc unmaps or gives to the next thread once it has died: a hook must take it off first,
 * under threads_lock, which every walk of the list holds, so that no walk reaches a dead thread.
 * A thread with no hook sure to run is left off the list. */
static pthread_key_t exit_key, last_exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static pthread_once_t last_exit_key_once = PTHREAD_ONCE_INIT;
static bool exit_key_made, last_exit_key_made;

/* glibc runs key destructors in rounds (at most PTHREAD_DESTRUCTOR_ITERATIONS, fewer when a
 * round sets nothing), and mimalloc's key, made at its load before ours, runs first in each: by
 * the time this hook runs, mimalloc may have deleted this thread's arena heaps. So the hook
 * forgets the heaps. Its first call also unlinks the thread: from then on (EXITING) each
 * dataplane allocation takes the slow path (alloc_late, dp_heap.c), and a thread that dies
 * linked cannot be left behind for a new thread to find at the same address.
 *
 * A later destructor's dataplane allocation makes heaps anew, which mimalloc abandons from its
 * key's destructor in the next round. A heap made in glibc's last round was never abandoned, and
 * its segments, owned by a dead thread, were neither freed nor reused: a thread that allocated in
 * every round kept a 32 MiB segment, and 96 of them filled 48 chunks of 64 MiB. Abandoning at
 * once after each late allocation (mi_thread_done) costs about 55 us, a visit of mimalloc's
 * abandoned segments each time. So the hook counts the rounds, for threads that made dataplane
 * heaps before their exit began: such a thread asks glibc for a call before the key destructors
 * (__cxa_thread_atexit_impl, which runs C++ thread_local destructors; exit_begins), and then the
 * hook sets itself again each round, which costs those threads glibc's walk over the keys up to
 * the last round. A late heap is then abandoned at once only in the last round; one made before
 * the hook in the last round (by a key of lower index than ours), by the hook itself. Other
 * threads (a thread's first dataplane heap made in its exit) abandon after every late
 * allocation. */
static void abandon_heaps(struct nic_thread *t) {
  mi_thread_done();
  memset(t->heaps, 0, sizeof t->heaps);
  t->cursor = 0;
  t->dp_heap = NULL;
  t->late_heaps = false;
}

/* nic_thread_stack_watched. Outside the thread list's lock: a registration cache's lock comes
 * before it (alloc/base/forklock.h). Later key destructors that register the stack again get
 * registrations of their own, never cached (EXITING). */
static void stack_leaves(struct nic_thread *t) {
  const uintptr_t lo = t->stack_lo, hi = t->stack_hi;
  t->stack_lo = t->stack_hi = 0;
  if (hi > lo) nic_publish_pages_leaving(lo, hi - lo);
}

bool nic_thread_stack_watched(uintptr_t lo, uintptr_t hi) {
  struct nic_thread *t = &nic_self;
  if (t->state != NIC_THREAD_READY || !t->listed) return false;
  t->stack_lo = lo;
  t->stack_hi = hi;
  return true;
}

/* The calling thread's own block counts too unless its exit is sure to drop its stack's regions
 * (nic_thread_stack_watched): where its stack's bounds could not be learnt, nothing did. */
bool nic_thread_block_in(uintptr_t lo, uintptr_t hi) {
  bool found = false;
  const struct nic_thread *self = &nic_self;
  if (self->stack_hi <= self->stack_lo && !nic_on_main_thread() && (uintptr_t)self >= lo &&
      (uintptr_t)self < hi)
    return true; /* set up or not, listed or not */
  pthread_mutex_lock(&threads_lock);
  for (const struct nic_thread *t = threads; t && !found; t = t->next)
    found = t != self && t->block_on_stack && (uintptr_t)t >= lo && (uintptr_t)t < hi;
  pthread_mutex_unlock(&threads_lock);
  return found;
}

static void on_thread_exit(void *arg) {
  struct nic_thread *t = arg;
  nic_dp_unpause(t); /* its paused chunk's frees go back to their fast path */
  if (t->exit_counted && ++t->exit_round >= PTHREAD_DESTRUCTOR_ITERATIONS && t->late_heaps)
    abandon_heaps(t);
  memset(t->heaps, 0, sizeof t->heaps);
  t->internal_heap = NULL;
  t->cursor = 0;
  t->dp_heap = NULL;
  t->late_heaps = false;
  if (t->exit_counted && t->exit_round < PTHREAD_DESTRUCTOR_ITERATIONS)
    pthread_setspecific(exit_key, t);
  if (t->state != NIC_THREAD_READY) return;
  pthread_mutex_lock(&threads_lock);
  if (t->listed) {
    if (t->prev)
      t->prev->next = t->next;
    else
      threads = t->next;
    if (t->next) t->next->prev = t->prev;
    t->next = t->prev = NULL;
    t->listed = false;
  }
  t->state = NIC_THREAD_EXITING;
  pthread_mutex_unlock(&threads_lock);
  stack_leaves(t);
  nic_thread_close_wake(t); /* off the list: no ask writes to it now */
  t->fast_span = 0;
  __atomic_store_n(&t->dp_small_span, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&t->dp_fast_below, 0, __ATOMIC_RELAXED);
}

extern void *__dso_handle;
int __cxa_thread_atexit_impl(void (*fn)(void *), void *arg, void *dso);

static void exit_begins(void *arg) {
  struct nic_thread *t = arg;
  t->exit_counted = true;
  t->exit_round = 0;
}

void nic_thread_made_heap(struct nic_thread *t) {
  if (t->state == NIC_THREAD_EXITING)
    t->late_heaps = true;
  else if (!t->exit_marked)
    t->exit_mark_due = true;
}

/* Not where the heap is made: glibc takes its loader lock for the call, which a thread in
 * dlopen holds while a constructor allocates, maybe waiting for a lock of ours (grow_lock). */
void nic_thread_mark_exit(struct nic_thread *t) {
  t->exit_mark_due = false;
  if (t->exit_marked) return;
  t->exit_marked = true;
  NIC_INTERNAL_SCOPE(); /* glibc allocates the call's record */
  if (__cxa_thread_atexit_impl(exit_begins, t, &__dso_handle)) t->exit_marked = false;
}

void nic_thread_after_late_alloc(struct nic_thread *t) {
  if (!t->late_heaps) return;
  if (t->exit_counted && t->exit_round < PTHREAD_DESTRUCTOR_ITERATIONS) return;
  abandon_heaps(t);
}

/* nicmalloc's own threads that run their function (nic_own_threads_live). Counted by the thread
 * itself, once the kernel counts it and before it leaves, so the kernel's count never falls short
 * of ours: a look in between takes a thread of ours for the program's, never the other way. */
static int own_live;
static __thread bool own_thread __attribute__((tls_model("initial-exec")));

struct own_start {
  void *(*fn)(void *);
  void *arg;
  const char *name;
  int taken; /* a futex word: the new thread has read fn and arg */
};

static void own_thread_ends(void *unused) {
  (void)unused;
  __atomic_sub_fetch(&own_live, 1, __ATOMIC_RELEASE);
}

static void *own_thread_main(void *start) {
  struct own_start *s = start;
  void *(*fn)(void *) = s->fn;
  void *arg = s->arg;
  /* Named by itself: pthread_setname_np from another thread writes /proc/self/task/<tid>/comm,
   * and the /proc entries that leaves made reaping a child of fork that started a thread of ours
   * cost milliseconds (a shell's command substitution under NICMALLOC_DP_MIN_SIZE: 3.9 s for 500
   * against 0.8 s named this way). */
  prctl(PR_SET_NAME, s->name);
  __atomic_add_fetch(&own_live, 1, __ATOMIC_RELEASE);
  own_thread = true;
  __atomic_store_n(&s->taken, 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, &s->taken, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  void *result;
  pthread_cleanup_push(own_thread_ends, NULL);
  result = fn(arg);
  pthread_cleanup_pop(1);
  return result;
}

int nic_own_thread_create(pthread_t *thread, const char *name, void *(*fn)(void *), void *arg,
                          const sigset_t *mask) {
  NIC_INTERNAL_SCOPE();
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, mask ? mask : &all, &old); /* the new thread inherits it */
  struct own_start start = {fn, arg, name, 0};
  nic_lifetime_begin();
  const int rc = pthread_create(thread, NULL, own_thread_main, &start);
  nic_lifetime_end();
  /* start lives on this stack: the raw futex wait is no cancellation point */
  while (rc == 0 && !__atomic_load_n(&start.taken, __ATOMIC_ACQUIRE))
    syscall(SYS_futex, &start.taken, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  /* The reaper is what sees the program's threads all gone (last_thread.h): it runs while any
   * thread of ours does, or a program that only made an endpoint would never end. Made first,
   * its own creation comes here again and finds it started. */
  if (rc == 0) nic_reaper_start();
  return rc;
}

unsigned nic_own_threads_live(void) {
  const int n = __atomic_load_n(&own_live, __ATOMIC_ACQUIRE);
  return n > 0 ? (unsigned)n : 0;
}

void nic_signals_but_faults(sigset_t *set) {
  static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
  sigfillset(set);
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
    sigdelset(set, faults[i]);
}

static void make_exit_key(void) {
  exit_key_made = pthread_key_create(&exit_key, on_thread_exit) == 0;
}

/* A thread whose set-up came inside its exit, after exit_key's turn in that round of key
 * destructors (on_thread_exit has not run): it is ended here as there. mimalloc's own key, of
 * lower index, may have had its last turn already, so its heaps are given up here too. */
static void on_thread_exit_last(void *arg) {
  struct nic_thread *t = arg;
  if (t->state != NIC_THREAD_READY) return;
  abandon_heaps(t);
  on_thread_exit(t);
}

/* glibc takes the lowest free index: to be given the last one, every other must be held for a
 * moment. Those taken here are given back at once, so that a key another thread makes meanwhile
 * finds a free index (a higher one than it would have had) but for the instant between the last
 * index taken and the first given back (for the whole search where the program holds the last
 * index already: none is found then). The bits say which keys are held here: another thread's
 * must not be deleted. Under the thread list's lock, which fork takes: a child forked meanwhile
 * would keep every key held here, with no one to give them back. */
static void make_last_exit_key(void) {
  uint64_t held[PTHREAD_KEYS_MAX / 64] = {0};
  pthread_key_t key;
  pthread_mutex_lock(&threads_lock);
  while (pthread_key_create(&key, on_thread_exit_last) == 0) {
    if (key == PTHREAD_KEYS_MAX - 1) {
      last_exit_key = key;
      last_exit_key_made = true;
      break;
    }
    held[key / 64] |= (uint64_t)1 << (key % 64);
  }
  for (unsigned k = 0; k < PTHREAD_KEYS_MAX - 1; k++)
    if (held[k / 64] & ((uint64_t)1 << (k % 64))) pthread_key_delete(k);
  pthread_mutex_unlock(&threads_lock);
}

/* Whether a hook will run before the thread dies, whenever its set-up comes. glibc runs key
 * destructors in rounds (at most PTHREAD_DESTRUCTOR_ITERATIONS), each a walk of the keys in index
 * order; a key set during the walk is seen in the same round only if its index is higher than
 * that of the key whose destructor set it, else in the next round, and after the last round in
 * none. exit_key, made at the first set-up, has a lower index than the program's keys (and a
 * higher one than mimalloc's, whose destructor must come first: on_thread_exit). A thread whose
 * first allocation came from a program's key destructor in the last round armed it too late and
 * died on the list: malloc_trim's walk then wrote into its unmapped stack, or into the next
 * thread's TLS, zeroed on the same cached stack, which cut or looped the list. A set-up cannot
 * tell that it runs inside that round, so a thread also arms last_exit_key, the last index of
 * glibc's table, which every round reaches after every other key. That index is searched for once,
 * at the first set-up while another thread exists (0.24 ms: each pthread_key_create scans from
 * index 0). Before, while the process has never had a second thread, exit_key is enough: a thread
 * alone is either not in its exit yet (the first round will see the key) or its end ends the
 * process. */
static bool arm_exit_hooks(struct nic_thread *t) {
  pthread_once(&exit_key_once, make_exit_key);
  const bool first = exit_key_made && pthread_setspecific(exit_key, t) == 0;
  if (__libc_single_threaded) return first;
  pthread_once(&last_exit_key_once, make_last_exit_key);
  if (!last_exit_key_made) return false;
  /* glibc's table of a thread's key values is made of blocks of 32 keys; the first lies in the
   * thread's descriptor, the others are calloc'd by the thread's first pthread_setspecific in
   * them and freed after the last round. In the thread's heap that block outlived mimalloc's own
   * key destructor, which then left the thread's segment on its abandoned list, walked at every
   * later thread exit: a thread's start and exit took 76 us instead of 25. It comes from a pool
   * (nic_thread_key_block), as the lifetime scope sends it there. */
  NIC_LIFETIME_SCOPE();
  t->key_block_due = true;
  const bool armed = pthread_setspecific(last_exit_key, t) == 0;
  t->key_block_due = false;
  return armed;
}

void *nic_thread_key_block(size_t size) {
  struct nic_thread *t = &nic_self;
  if (!t->key_block_due || t->key_block || size > NIC_KEY_BLOCK_BYTES) return NULL;
  pthread_mutex_lock(&threads_lock);
  void *block = nic_pool_get(&key_blocks);
  pthread_mutex_unlock(&threads_lock);
  if (block) memset(block, 0, NIC_KEY_BLOCK_BYTES);
  t->key_block = block;
  return block;
}

void nic_thread_key_block_free(void) {
  struct nic_thread *t = &nic_self;
  pthread_mutex_lock(&threads_lock);
  nic_pool_put(&key_blocks, t->key_block);
  pthread_mutex_unlock(&threads_lock);
  t->key_block = NULL;
}

static int unlisted_said;

bool nic_thread_ready(void) {
  struct nic_thread *t = &nic_self;
  if (__builtin_expect(t->state == NIC_THREAD_READY, 1)) return true;
  if (t->state != NIC_THREAD_NEW) return false;
  nic_startup();
  if (!nic_started()) return false; /* allocation from inside the start-up itself */
  t->state = NIC_THREAD_SETTING_UP;
  t->block_on_stack = !nic_on_main_thread();
  /* pthread_once and pthread_setspecific may allocate; the state makes that re-entry take the
   * control heap. Armed before the thread is linked: the hook finds it linked or not at all. */
  if (arm_exit_hooks(t)) {
    pthread_mutex_lock(&threads_lock);
    t->next = threads;
    t->prev = NULL;
    if (threads) threads->prev = t;
    threads = t;
    t->listed = true;
    pthread_mutex_unlock(&threads_lock);
  } else if (nic_first_time(&unlisted_said)) {
    nic_log_info("a thread could not arm its exit hooks (pthread key %d taken, no key at all, or "
                 "no memory for the key's value): such threads are not put on nicmalloc's thread "
                 "list, and neither malloc_trim nor the reaper ask them to give memory back",
                 PTHREAD_KEYS_MAX - 1);
  }
  t->state = NIC_THREAD_READY;
  nic_thread_refresh_fast();
  return true;
}

void nic_thread_refresh_fast(void) {
  struct nic_thread *t = &nic_self;
  const bool ready = t->state == NIC_THREAD_READY;
  /* nic_fast_limit (thread.h). Inside nicmalloc's own code every allocation
   * takes the slow path, to its own heap (alloc.c). */
  const bool fast = ready && t->scope_depth == 0 && t->internal_depth == 0;
  t->fast_span = fast && nic_fast_limit > NIC_MIN_BLOCK ? nic_fast_limit - NIC_MIN_BLOCK : 0;
  /* The parked cursor's heap is NULL. A thread behind on the chunk states catches up on the
   * slow path first: its cursor chunk may have stopped being live. */
  t->dp_heap = t->heaps[t->cursor];
  const bool dp_fast = ready && !t->dp_fast_paused && t->dp_heap &&
                       __atomic_load_n(&t->seen_epoch, __ATOMIC_RELAXED) ==
                           __atomic_load_n(&nic_chunk_epoch, __ATOMIC_ACQUIRE);
  const size_t small_max = nic_dp_fast_max < NIC_DP_SMALL_MAX ? nic_dp_fast_max : NIC_DP_SMALL_MAX;
  const size_t small_span = small_max >= NIC_MIN_BLOCK ? small_max - NIC_MIN_BLOCK + 1 : 0;
  __atomic_store_n(&t->dp_small_span, dp_fast ? small_span : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&t->dp_fast_below, dp_fast ? nic_dp_fast_max + 1 : 0, __ATOMIC_RELAXED);
}

void nic_internal_enter(void) {
  nic_self.internal_depth++;
  nic_thread_refresh_fast();
}

mi_heap_t *nic_internal_heap(void) {
  struct nic_thread *t = &nic_self;
  if (t->state != NIC_THREAD_READY) return NULL;
  if (!t->internal_heap) t->internal_heap = mi_heap_new();
  return t->internal_heap;
}

void nic_internal_leave(void) {
  if (nic_self.internal_depth > 0) nic_self.internal_depth--;
  nic_thread_refresh_fast();
}

int nic_internal_suspend(void) {
  const int depth = nic_self.internal_depth;
  if (depth) {
    nic_self.internal_depth = 0;
    nic_thread_refresh_fast();
  }
  return depth;
}

void nic_internal_resume(int depth) {
  if (!depth) return;
  nic_self.internal_depth = depth;
  nic_thread_refresh_fast();
}

/* A thread that stores its own limits between the load of its seen epoch here and the store
 * below keeps them open with a stale epoch; the next pass closes them again. */
void nic_threads_nudge(unsigned epoch) {
  pthread_mutex_lock(&threads_lock);
  for (struct nic_thread *t = threads; t; t = t->next) {
    if (__atomic_load_n(&t->seen_epoch, __ATOMIC_RELAXED) == epoch) continue;
    __atomic_store_n(&t->dp_small_span, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&t->dp_fast_below, 0, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&threads_lock);
}

/* Whether set is still the epoll set that holds wake: one the program closed against the rule
 * (nicmalloc closes it) may be a number of the program's again, which is not ours to close. */
static bool still_ours(int set, int wake) {
  struct epoll_event ev = {.events = EPOLLIN};
  const int err = errno;
  if (epoll_ctl(set, EPOLL_CTL_ADD, wake, &ev) == 0) { /* another set: put back as it was */
    epoll_ctl(set, EPOLL_CTL_DEL, wake, NULL);
    return false;
  }
  const bool ours = errno == EEXIST;
  errno = err;
  return ours;
}

/* In a key destructor, or in a fork child with the parent's cancel pending: no cancellation point
 * (nocancel.h). */
void nic_thread_close_wake(struct nic_thread *t) {
  if (t->thread_fd_plus1 && still_ours(t->thread_fd_plus1 - 1, t->wake_fd_plus1 - 1))
    nic_close_nocancel(t->thread_fd_plus1 - 1);
  if (t->wake_fd_plus1) nic_close_nocancel(t->wake_fd_plus1 - 1);
  __atomic_store_n(&t->thread_fd_plus1, 0, __ATOMIC_RELAXED);
  t->wake_fd_plus1 = 0;
  t->waiting = 0;
  t->wake_unread = 0;
}

/* The ask before the look at waiting (or at the handed-out set), each sequentially consistent,
 * as the waiter sets waiting (or hands the set out) before it looks for an ask
 * (nic_nudge_wait_begin, nic_nudge_thread_event_fd): one of the two sees the other. The write
 * before wake_unread, which the thread clears before it reads the eventfd (nudge.c): every
 * write is read by a later poll of the thread's. The write is no cancellation point (nocancel.h):
 * glibc's, reached from malloc_trim with a cancel pending, unwound the caller with the list's lock
 * held, and every later thread exit and fork waited for it. A full counter fails the write, and
 * the thread wakes all the same. */
void nic_threads_ask_decommit(uint64_t chunks) {
  pthread_mutex_lock(&threads_lock);
  for (struct nic_thread *t = threads; t; t = t->next) {
    __atomic_fetch_or(&t->decommit_asked, chunks, __ATOMIC_SEQ_CST);
    const bool handed = __atomic_load_n(&t->thread_fd_plus1, __ATOMIC_SEQ_CST) != 0;
    if (!handed && !__atomic_load_n(&t->waiting, __ATOMIC_SEQ_CST)) continue;
    if (t->wake_fd_plus1) nic_eventfd_signal_nocancel(t->wake_fd_plus1 - 1);
    if (handed) __atomic_store_n(&t->wake_unread, 1, __ATOMIC_SEQ_CST);
  }
  pthread_mutex_unlock(&threads_lock);
}

/* In a fork child only the forking thread survives. */
static void after_fork_child(void) {
  struct nic_thread *self = &nic_self;
  /* The threads' nic_wait eventfds are the parent's threads' (an ask of the parent's would wake
   * this one through its copy); the list is whole here, held across the fork. */
  for (struct nic_thread *t = threads; t; t = t->next)
    nic_thread_close_wake(t);
  if (!self->listed) nic_thread_close_wake(self);
  /* The other threads are gone; their blocks live on in the child, in mimalloc's pages. */
  threads = NULL;
  own_live = own_thread ? 1 : 0;
  if (self->state == NIC_THREAD_READY && self->listed) {
    self->next = self->prev = NULL;
    threads = self;
  }
}
NIC_FORKLOCK_MUTEX(threads, NIC_FORK_THREADS, &threads_lock, after_fork_child);
