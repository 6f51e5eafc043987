/* Internal to the sim backend: the state sim_nic.c (table, post, poll, close) shares with
 * sim_dma.c (the engine thread). Not for other modules: use sim_nic.h. */
#ifndef NIC_SIM_DMA_H
#define NIC_SIM_DMA_H

#include "pool.h"
#include "sim_delays.h"
#include "sim_nic.h"

#include <pthread.h>

#define SIM_NO_SLOT UINT32_MAX

/* One registration slot. lkey = generation << 16 | slot index, as hardware keys carry an index
 * and a variant: a stale lkey fails the lookup until its slot has been reused 65535 times. */
struct sim_reg {
  uint32_t lkey;     /* 0 = free */
  uint32_t inflight; /* entries of posts not yet completed that name this lkey */
  uint16_t gen;
  uintptr_t base;
  size_t len;
  unsigned access;
  uint32_t next_free;
};

struct nic_endpoint {
  struct nic_endpoint *next; /* first: a closed one's is the pool's free link */
  struct sim_nic *sim;       /* NULL once closed: its memory stays the sim's (endpoint_pool) */
  nic_sim_receive_fn receive;
  void *arg;
  unsigned flags;
  uint64_t inflight;
};

/* One post. Items are recycled through a free list, so steady-state posting does not allocate. */
struct sim_work {
  struct sim_work *next;
  struct nic_endpoint *ep;
  nic_completion_fn done;
  void *arg;
  uint64_t due_ns;
  int status;
  unsigned n;
  bool ahead;     /* its DMA has not finished: counted in sim_dma_ahead */
  void **kept;    /* per entry: NULL (read the memory), its bytes kept aside, or SIM_KEEP_FAILED */
  uint32_t *held; /* per entry: the slot whose inflight count it holds, or SIM_NO_SLOT */
  struct nic_sge sge[];
};

struct sim_queue {
  struct sim_work *head, *tail;
};

struct sim_nic {
  struct nic_backend b; /* first: b.priv points back here */
  pthread_mutex_t lock;
  pthread_cond_t wake; /* the engine waits on it (CLOCK_MONOTONIC) */
  pthread_t thread;
  bool stop, paused;
  struct sim_queue pending;   /* waiting for their DMA, in post order */
  struct sim_queue completed; /* DMA done, waiting for poll() */
  int work_efd;               /* readable while completed is not empty: the backend's event_fd */
  bool work_signalled;        /* written since poll() last emptied completed */
  struct nic_pool work;       /* sim_work items with room for max_sge entries; under lock */
  uint64_t last_due;
  struct sim_reg *regs;
  size_t regs_bytes;
  uint32_t free_slot, unused_slot; /* free list of returned slots; first never-used slot */
  /* The first key generation of every slot: another process's sim (a fork child's) hands out
   * other keys for the same slots, as a NIC does to another process, so that a key one of them
   * made and the other was handed is refused rather than taken for one of its own. */
  uint16_t first_gen;
  struct nic_endpoint *endpoints;
  /* Endpoints open and closed. A closed one's memory stays mapped until the sim closes, so that
   * a post or close on it, a program's error, is refused (-EINVAL) instead of faulting on an
   * unmapped page. Under lock. */
  struct nic_pool endpoint_pool;
  struct nic_sim_delays delays;
  struct nic_tcache *tcache;
  struct nic_sim_stats st;
  char *msg; /* the engine's message buffer */
  size_t msg_cap;
  int mem_fd;                  /* /proc/self/mem, or -1: reads what the CPU may not (sim_read) */
  struct sim_work *performing; /* the post whose bytes the engine is reading, lock dropped */
  pthread_cond_t dma_done;     /* broadcast when performing is cleared */
  struct sim_nic *next_sim;    /* the list sim_keep.c walks when pages leave */
};

/* kept[i] when the bytes could not be kept (no memory, or unreadable): the entry fails. */
#define SIM_KEEP_FAILED ((void *)1)

/* Every s->lock is taken through these: a thread holding one is known (sim_keep.c must not
 * wait for a sim from inside that sim's own bookkeeping, whose frees may unmap). */
void sim_lock(struct sim_nic *s);
void sim_unlock(struct sim_nic *s);

/* The backend's own state (this struct, the slots, endpoints, work items, the engine's message
 * buffer) lives in pages of its own, never in heap pages: under NICMALLOC_FENCE=protect a heap
 * page may also hold a program's block in flight, and a write of ours there, made under the
 * lock or on the engine thread, would either wait for a completion that needs the lock or
 * release the page while the NIC reads it. (A heap page can hold both once a thread that
 * allocated our state has exited: mimalloc hands its pages to other threads' heaps.) Zeroed;
 * NULL when nothing could be mapped. */
void *sim_map(size_t len);
void sim_unmap(void *p, size_t len);
/* The slot for lkey, or NULL. Lock held. */
struct sim_reg *sim_lookup(struct sim_nic *s, uint32_t lkey);
/* Drops the inflight counts w holds (on its registrations and endpoint). Lock held. */
void sim_release(struct sim_nic *s, struct sim_work *w);
/* Lock held: releases w, runs its done with the lock dropped, recycles w. */
void sim_complete(struct sim_nic *s, struct sim_work *w);
void sim_queue_push(struct sim_queue *q, struct sim_work *w);
struct sim_work *sim_queue_pop(struct sim_queue *q);

/* Copies len bytes at src as a NIC would read them: whatever the CPU's protection of the pages
 * (PROT_NONE, write-protected by a fence), and without a fault when they are gone. 0, or -EFAULT
 * when some byte is not mapped at all. Any thread; no lock needed. */
int sim_read(struct sim_nic *s, void *dst, const void *src, size_t len);

/* sim_keep.c: open sims are listed so that pages leaving the address space (nic_sim_pages_leaving)
 * can be kept for the posts that still have to read them. */
void sim_keep_track(struct sim_nic *s);
void sim_keep_untrack(struct sim_nic *s);
/* Lock held. w enters (sim_post) or leaves (its DMA done, or cancelled) the posts still to read. */
void sim_keep_ahead(struct sim_work *w, bool ahead);
/* Lock held. Frees what was kept for w. */
void sim_keep_drop(struct sim_work *w);

/* Start and stop the engine thread. */
int sim_dma_start(struct sim_nic *s);
void sim_dma_stop(struct sim_nic *s);

#endif
