#include "fast_spans.h"

#include "events.h"
#include "forklock.h"

#include <pthread.h>

size_t nic_fast_spans[NIC_FAST_SPANS];
bool nic_fast_spans_publishing;
static size_t true_spans[NIC_FAST_SPANS];

/* One republication at a time. Its holders take no other lock, and the commit map's distrust,
 * under the late decommits' lock, takes it: it is held across fork after that one, so no
 * republication is half done in a child. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
NIC_FORKLOCK_MUTEX(fast_spans, NIC_FORK_FAST_SPANS, &lock, NULL);

/* What each span depends on in the watch word: a free of either kind leaves its fast path
 * while the part of the word that concerns it is nonzero. */
static bool span_watched(enum nic_fast_span which, uint64_t watch) {
  return which == NIC_FAST_DATAPLANE ? (uint32_t)watch != 0 : watch != 0;
}

/* Why a watcher that added to the word is covered when it returns (every access here and in
 * nic_fast_spans_follow is sequentially consistent): a republication that read the word before
 * the addition raised the flag before that read, so the watcher either sees the flag and
 * republishes after it (the lock), reading its own addition, or sees what it stored, and
 * republishes unless that was 0 for every span that concerns it; every republication that
 * reads the word after the addition stores 0 there until the watcher takes its share away. */
static void republish_locked(void) {
  __atomic_store_n(&nic_fast_spans_publishing, true, __ATOMIC_SEQ_CST);
  const uint64_t watch = __atomic_load_n(&nic_free_watch, __ATOMIC_SEQ_CST);
  for (int s = 0; s < NIC_FAST_SPANS; s++)
    __atomic_store_n(&nic_fast_spans[s], span_watched(s, watch) ? 0 : true_spans[s],
                     __ATOMIC_SEQ_CST);
  __atomic_store_n(&nic_fast_spans_publishing, false, __ATOMIC_SEQ_CST);
}

void nic_fast_spans_republish(void) {
  pthread_mutex_lock(&lock);
  republish_locked();
  pthread_mutex_unlock(&lock);
}

void nic_fast_span_set(enum nic_fast_span which, size_t units_16) {
  pthread_mutex_lock(&lock);
  true_spans[which] = units_16;
  republish_locked();
  pthread_mutex_unlock(&lock);
}
