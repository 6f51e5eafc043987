/* The reaper's nudge (nudge.h). */
#include "nudge.h"

#include "config.h"
#include "control_sub_pages.h"
#include "late_decommit.h"
#include "mi_decommit.h"
#include "nocancel.h"
#include "sub_pages.h"
#include "sub_pages_scan.h"
#include "thread.h"

#include <errno.h>
#include <mimalloc.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* "Well above": a gap of at least this share of the committed bytes and this many bytes (a
 * few mimalloc pages: not worth a thread's walk). A chunk is nudged again only once its live
 * bytes fell, or its committed bytes rose, by as much since the last nudge. */
#define NUDGE_SHARE_SHIFT 3
#define NUDGE_MIN_BYTES ((int64_t)1 << 20)

/* Free-list blocks one answer reads at most (sub_pages_scan.h), a page whole: what it costs
 * the allocation it runs in. A pass over 940,000 free blocks took 100 ms in one answer; this
 * cuts it into answers of under half a millisecond (bench/trim_pause; twice the budget made
 * them 0.6-0.9 ms). */
#define ANSWER_BUDGET ((size_t)8192)

static uint64_t asked_total, answers_total, bytes_total;

/* Reaper only (pass lock). */
static struct {
  bool watched;            /* the chunk was live at the last pass */
  bool nudged;             /* asked since it went live: live and committed below are then set */
  int64_t live, committed; /* at the last nudge */
  uint64_t above_since;    /* when the gap was first seen worth a nudge; 0 = not */
} watch[NIC_CHUNK_SLOTS];

/* Bytes of the chunk's slices mimalloc holds committed: eight slice bytes a load. */
static int64_t committed_bytes(unsigned index) {
  const uint8_t *bytes = nic_chunk_slices(index);
  const size_t slices = (size_t)1 << (nic_dp.shift - NIC_SLICE_SHIFT);
  const uint64_t committed8 = 0x0101010101010101ull * NIC_DP_SLICE_COMMITTED;
  int64_t n = 0;
  for (size_t i = 0; i < slices; i += 8)
    n += __builtin_popcountll(__atomic_load_n((const nic_marks8 *)&bytes[i], __ATOMIC_RELAXED) &
                              committed8);
  return n << NIC_SLICE_SHIFT;
}

void nic_nudge_pass(const int64_t live[NIC_CHUNK_SLOTS], uint64_t now_ms) {
  const unsigned delay_ms = nic_config()->purge_delay_ms;
  uint64_t ask = 0;
  const unsigned slots = nic_chunk_slots_used();
  for (unsigned i = 0; i < NIC_CHUNK_SLOTS; i++) {
    if (i >= slots ||
        __atomic_load_n(&nic_chunk_at(i)->state, __ATOMIC_ACQUIRE) != NIC_CHUNK_LIVE) {
      watch[i].watched = false;
      continue;
    }
    const int64_t committed = committed_bytes(i);
    const int64_t gap = committed > live[i] ? committed - live[i] : 0;
    if (!watch[i].watched) {
      watch[i].watched = true;
      watch[i].nudged = false;
      watch[i].above_since = 0;
    }
    int64_t threshold = committed >> NUDGE_SHARE_SHIFT;
    if (threshold < NUDGE_MIN_BYTES) threshold = NUDGE_MIN_BYTES;
    /* Against the last nudge, not the gap: the answers and new frees may come between two
     * passes, so that the gap looks the same while more was freed. */
    const bool news = !watch[i].nudged || watch[i].live - live[i] >= threshold ||
                      committed - watch[i].committed >= threshold;
    if (gap < threshold || !news) {
      watch[i].above_since = 0;
    } else if (!watch[i].above_since) {
      watch[i].above_since = now_ms ? now_ms : 1;
    } else if (now_ms - watch[i].above_since >= delay_ms) {
      ask |= 1ull << i;
      watch[i].nudged = true;
      watch[i].live = live[i];
      watch[i].committed = committed;
      watch[i].above_since = 0;
    }
  }
  if (!ask) return;
  __atomic_add_fetch(&asked_total, (uint64_t)__builtin_popcountll(ask), __ATOMIC_RELAXED);
  nic_threads_ask_decommit(ask);
}

void nic_nudge_ask_trim(void) {
  nic_nudge_install(); /* a program that never used the dataplane has no hook yet */
  uint64_t ask = NIC_ASK_CONTROL_TRIM;
  const unsigned slots = nic_chunk_slots_used();
  for (unsigned i = 0; i < slots; i++)
    if (__atomic_load_n(&nic_chunk_at(i)->state, __ATOMIC_ACQUIRE) == NIC_CHUNK_LIVE)
      ask |= 1ull << i;
  nic_threads_ask_decommit(ask);
  /* This thread's own passes were just made whole (nic_collect, nic_control_trim_owned). */
  struct nic_thread *t = &nic_self;
  __atomic_fetch_and(&t->decommit_asked, ~ask, __ATOMIC_RELAXED);
  t->answer_pending &= ~ask;
  t->answer_again &= ~ask;
  t->control_next = t->dataplane_next = 0;
}

/* The area's pass came to its end: done, or once more from the start if asked meanwhile. */
static void pass_ended(struct nic_thread *t, uint64_t bit) {
  if (t->answer_again & bit)
    t->answer_again &= ~bit;
  else
    t->answer_pending &= ~bit;
}

/* malloc_trim's share, as far as budget goes; false when it ran out. */
static bool answer_control(struct nic_thread *t, size_t *budget) {
  if (!t->control_next) {
    /* Without the abandoned visits' lock, as the chunks' collects below: the thread may hold it
     * (nic_collect_abandoned's visitor heap allocates). */
    mi_heap_collect(mi_heap_get_default(), false);
    nic_mi_decommit_owned_control();
  }
  struct nic_sub_pages_cursor c = {.next = t->control_next, .budget = *budget};
  nic_control_sub_pages_drop_owned(&c);
  *budget = c.budget;
  t->control_next = c.stopped ? c.next : 0;
  if (!c.stopped) pass_ended(t, NIC_ASK_CONTROL_TRIM);
  return !c.stopped;
}

/* nic_collect's work for chunk i, as far as budget goes; false when it ran out. */
static bool answer_chunk(struct nic_thread *t, unsigned i, size_t *budget) {
  const uint64_t bit = 1ull << i;
  if (!t->heaps[i] ||
      __atomic_load_n(&nic_chunk_at(i)->state, __ATOMIC_ACQUIRE) != NIC_CHUNK_LIVE) {
    t->answer_pending &= ~bit;
    t->answer_again &= ~bit;
    if (t->dataplane_next && nic_chunk_index((const void *)t->dataplane_next) == i)
      t->dataplane_next = 0; /* not the place to go on in the slot's next chunk */
    return true;
  }
  /* One cursor for the chunks: a pass another chunk's cut short starts again. */
  uintptr_t next = t->dataplane_next;
  if (next && nic_chunk_index((const void *)next) != i) next = 0;
  size_t bytes = 0;
  if (!next) {
    mi_heap_collect(t->heaps[i], false); /* pages freed from other threads, retired pages */
    bytes = nic_mi_decommit_owned(i);
    __atomic_add_fetch(&answers_total, 1, __ATOMIC_RELAXED);
  }
  /* Then the free 4 KiB pages inside pages in use, as nic_collect gives them back: after a
   * shrink at random nothing else goes, and a program run unmodified never calls it. */
  struct nic_sub_pages_cursor c = {.next = next, .budget = *budget};
  bytes += nic_sub_pages_drop_owned(i, &c);
  __atomic_add_fetch(&bytes_total, bytes, __ATOMIC_RELAXED);
  *budget = c.budget;
  t->dataplane_next = c.stopped ? c.next : 0;
  if (!c.stopped) pass_ended(t, bit);
  return !c.stopped;
}

/* On the owner thread: what nic_collect does for each asked chunk it has a heap in, and
 * malloc_trim's share, within ANSWER_BUDGET; the rest at its next answers. */
static void answer(struct nic_thread *t) {
  const uint64_t ask = __atomic_exchange_n(&t->decommit_asked, 0, __ATOMIC_ACQUIRE);
  /* Asked again while a pass goes on: pages it passed may have emptied since. */
  t->answer_again |= ask & t->answer_pending;
  t->answer_pending |= ask;
  size_t budget = ANSWER_BUDGET;
  if ((t->answer_pending & NIC_ASK_CONTROL_TRIM) && !answer_control(t, &budget)) return;
  for (uint64_t chunks = t->answer_pending & ~NIC_ASK_CONTROL_TRIM; chunks && budget;
       chunks &= chunks - 1)
    if (!answer_chunk(t, (unsigned)__builtin_ctzll(chunks), &budget)) return;
}

static bool asked(const struct nic_thread *t) {
  return (__atomic_load_n(&t->decommit_asked, __ATOMIC_RELAXED) | t->answer_pending) != 0;
}

/* Not while nicmalloc's own code runs on the thread, which may hold a lock the answer takes
 * (the dataplane's general path among it: armed for late decommits), nor while the thread sets
 * up or exits, when its heaps are being made or forgotten. */
static bool free_to_answer(const struct nic_thread *t) {
  return t->state == NIC_THREAD_READY && !t->internal_depth && !nic_late_decommit_armed;
}
static void answer_if_free_to(struct nic_thread *t) {
  if (free_to_answer(t)) answer(t);
}

/* mimalloc's deferred-free hook: the top of its generic allocation path, on the allocating
 * thread (nudge.h). */
static void on_deferred_free(bool force, unsigned long long heartbeat, void *arg) {
  (void)heartbeat;
  (void)arg;
  struct nic_thread *t = &nic_self;
  if (__builtin_expect(!asked(t), 1)) return;
  /* Forced calls come from collections (mi_collect(true), mimalloc's process and thread
   * teardown), not from an allocation: no answer there, at exit least of all. */
  if (force) return;
  answer_if_free_to(t);
}

/* The thread's eventfd, made at its first use: its descriptor, or -1 when none is left. */
static int wake_fd(struct nic_thread *t) {
  if (!t->wake_fd_plus1) {
    const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) return -1;
    t->wake_fd_plus1 = fd + 1;
  }
  return t->wake_fd_plus1 - 1;
}

/* Empties the eventfd (nonblocking: 0 fails with EAGAIN, nobody asked). This and wake_again run in
 * nic_poll, which is no cancellation point, and acts on no cancel (nocancel.h). */
static void wake_read(const struct nic_thread *t) {
  const int err = errno;
  if (nic_eventfd_take_nocancel(t->wake_fd_plus1 - 1) < 0) errno = err;
}

/* Makes the thread's set poll readable again (nic_thread_event_fd): a pass is left. A new write
 * is also a new edge, for a program that polls the set edge-triggered. */
static void wake_again(const struct nic_thread *t) {
  const int err = errno;
  nic_eventfd_signal_nocancel(t->wake_fd_plus1 - 1); /* a full counter: readable all the same */
  errno = err;
}

/* With the set handed out, every ask wrote to the eventfd before it set wake_unread: cleared
 * first, then the eventfd read, then the asks looked at, so a write this read missed leaves
 * wake_unread set for the next poll, and an ask whose write it took is seen here. The set stays
 * readable while a pass is left, and polls empty once it is done. */
void nic_nudge_answer_pending(void) {
  struct nic_thread *t = &nic_self;
  if (__builtin_expect(!asked(t) && !__atomic_load_n(&t->wake_unread, __ATOMIC_RELAXED), 1)) return;
  const bool handed = __atomic_load_n(&t->thread_fd_plus1, __ATOMIC_RELAXED) != 0;
  if (handed) {
    __atomic_store_n(&t->wake_unread, 0, __ATOMIC_SEQ_CST);
    wake_read(t);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  }
  if (asked(t)) answer_if_free_to(t);
  if (handed && asked(t)) wake_again(t);
}

int nic_nudge_thread_event_fd(int backends_fd) {
  struct nic_thread *t = &nic_self;
  if (t->thread_fd_plus1) return t->thread_fd_plus1 - 1;
  if (t->state != NIC_THREAD_READY) return -ESRCH;
  if (wake_fd(t) < 0) return -errno;
  const int set = epoll_create1(EPOLL_CLOEXEC);
  if (set < 0) return -errno;
  struct epoll_event ready = {.events = EPOLLIN};
  if (epoll_ctl(set, EPOLL_CTL_ADD, t->wake_fd_plus1 - 1, &ready) ||
      (backends_fd >= 0 && epoll_ctl(set, EPOLL_CTL_ADD, backends_fd, &ready))) {
    const int err = errno;
    nic_close_nocancel(set); /* nic_thread_event_fd is no cancellation point */
    return -err;
  }
  __atomic_store_n(&t->thread_fd_plus1, set + 1, __ATOMIC_SEQ_CST);
  if (asked(t)) wake_again(t); /* asked before the asks began to write */
  return set;
}

int nic_nudge_wait_begin(void) {
  struct nic_thread *t = &nic_self;
  if (t->state != NIC_THREAD_READY) return -1;
  if (wake_fd(t) < 0) return -1; /* no descriptor left: the wait is as it was */
  __atomic_store_n(&t->waiting, 1, __ATOMIC_SEQ_CST);
  if (asked(t) && free_to_answer(t)) {
    __atomic_store_n(&t->waiting, 0, __ATOMIC_RELAXED);
    return -EAGAIN;
  }
  return t->wake_fd_plus1 - 1;
}

void nic_nudge_wait_end(void) {
  struct nic_thread *t = &nic_self;
  if (!__atomic_load_n(&t->waiting, __ATOMIC_RELAXED)) return;
  __atomic_store_n(&t->waiting, 0, __ATOMIC_RELAXED);
  if (!__atomic_load_n(&t->thread_fd_plus1, __ATOMIC_RELAXED)) wake_read(t);
}

void nic_nudge_install(void) {
  mi_register_deferred_free(on_deferred_free, NULL);
}

void nic_nudge_totals(struct nic_nudge_totals *out) {
  out->asked = __atomic_load_n(&asked_total, __ATOMIC_RELAXED);
  out->answers = __atomic_load_n(&answers_total, __ATOMIC_RELAXED);
  out->bytes = __atomic_load_n(&bytes_total, __ATOMIC_RELAXED);
}
