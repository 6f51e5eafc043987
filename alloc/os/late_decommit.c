#define _GNU_SOURCE
#include "late_decommit.h"

#include "bounded_lock.h"
#include "clock.h"
#include "commit_map.h"
#include "events.h"
#include "forklock.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A visit decommits a segment's free runs, a few ranges per segment; a full table makes the
 * next decommits immediate again, as without it. */
#define CAPACITY 1024
/* Ranges dropped per round of nic_late_decommit_run (its copy lives on the caller's stack). */
#define BATCH 128

struct noted {
  uintptr_t start, end;
  uint64_t due_ms;
  uint64_t id; /* a range changed since it was copied out is not dropped by that copy */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* The child inherits the noted ranges: the same pages, the same mimalloc state. */
NIC_FORKLOCK_MUTEX(late_decommits, NIC_FORK_LATE_DECOMMITS, &lock, NULL);

static struct noted table[CAPACITY];
static unsigned used;              /* entries of table in use, under the lock */
unsigned nic_late_decommits_noted; /* used, published for the unlocked look of forget */
static uint64_t next_id;
static nic_late_decommit_filter filter;
static unsigned delay_ms;
static uint64_t noted_total, reused_total, dropped_total;

void nic_late_decommit_enable(nic_late_decommit_filter f, unsigned delay) {
  pthread_mutex_lock(&lock);
  delay_ms = delay;
  __atomic_store_n(&filter, delay ? f : NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&lock);
}

static void publish(void) {
  __atomic_store_n(&nic_late_decommits_noted, used, __ATOMIC_RELEASE);
}

static void remove_at(unsigned i) {
  table[i] = table[--used];
}

__thread unsigned nic_late_decommit_armed __attribute__((tls_model("initial-exec")));

bool nic_late_decommit_note(void *addr, size_t len) {
  if (!nic_late_decommit_armed) return false;
  const nic_late_decommit_filter f = __atomic_load_n(&filter, __ATOMIC_ACQUIRE);
  if (!f || len == 0 || !f(addr, len)) return false;
  const uint64_t now = nic_now_ms();
  pthread_mutex_lock(&lock);
  const bool room = used < CAPACITY;
  if (room) {
    table[used++] =
        (struct noted){(uintptr_t)addr, (uintptr_t)addr + len, now + delay_ms, ++next_id};
    publish();
    noted_total++;
  }
  pthread_mutex_unlock(&lock);
  return room;
}

void nic_late_decommit_forget_slow(uintptr_t start, uintptr_t end) {
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < used;) {
    struct noted *n = &table[i];
    if (n->end <= start || end <= n->start) {
      i++;
      continue;
    }
    reused_total++;
    const bool head = n->start < start, tail = end < n->end;
    if (head && tail && used < CAPACITY) {
      /* A commit inside the range: both sides stay noted. */
      table[used++] = (struct noted){end, n->end, n->due_ms, ++next_id};
      n->end = start;
      n->id = ++next_id;
      i++;
    } else if (head) {
      /* (With a full table a split loses its tail: those pages stay until mimalloc reuses or
       * unmaps them.) */
      n->end = start;
      n->id = ++next_id;
      i++;
    } else if (tail) {
      n->start = end;
      n->id = ++next_id;
      i++;
    } else {
      remove_at(i); /* covered */
    }
  }
  publish();
  pthread_mutex_unlock(&lock);
}

static unsigned copy_due(struct noted *out, bool all) {
  const uint64_t now = nic_now_ms();
  unsigned n = 0;
  pthread_mutex_lock(&lock);
  for (unsigned i = 0; i < used && n < BATCH; i++)
    if (all || table[i].due_ms <= now) out[n++] = table[i];
  pthread_mutex_unlock(&lock);
  return n;
}

void nic_late_decommit_run(bool all) {
  if (__atomic_load_n(&nic_late_decommits_noted, __ATOMIC_ACQUIRE) == 0) return;
  struct noted due[BATCH];
  for (;;) {
    const unsigned n = copy_due(due, all);
    if (n == 0) return;
    /* Outside the lock: a watcher may unmap or protect memory itself. Telling one of pages that
     * then stay (the range was committed again meanwhile) only costs it a cached entry. */
    for (unsigned k = 0; k < n; k++)
      nic_publish_pages_leaving(due[k].start, due[k].end - due[k].start);
    unsigned dropped = 0;
    pthread_mutex_lock(&lock);
    for (unsigned k = 0; k < n; k++) {
      for (unsigned i = 0; i < used; i++) {
        if (table[i].id != due[k].id) continue;
        /* Under the lock: a commit of these pages waits for the drop, then backs them anew. */
        const size_t len = table[i].end - table[i].start;
        if (syscall(SYS_madvise, (void *)table[i].start, len, MADV_DONTNEED) == 0)
          nic_commit_map_note((void *)table[i].start, len, NIC_PAGES_DROPPED);
        remove_at(i);
        dropped++;
        break;
      }
    }
    dropped_total += dropped;
    publish();
    pthread_mutex_unlock(&lock);
    /* Every copied range was either dropped or changed (and is due again): stop when none was
     * dropped, so that a range committed again and again cannot keep this loop going. */
    if (dropped == 0 || n < BATCH) return;
  }
}

void nic_late_decommit_counts(struct nic_late_decommit_counts *out) {
  *out = (struct nic_late_decommit_counts){0};
  if (!nic_bounded_lock(&lock, "late decommits")) return;
  out->noted = noted_total;
  out->reused = reused_total;
  out->dropped = dropped_total;
  pthread_mutex_unlock(&lock);
}
