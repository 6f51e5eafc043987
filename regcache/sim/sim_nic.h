/* The sim backend: a software NIC for laptops, CI and benchmarks.
 *
 * - It keeps a registration table and enforces it like hardware: at DMA time every SG entry must
 *   lie inside the registration its lkey names, else the post completes with -EFAULT and the
 *   receiver gets nothing.
 * - An engine thread performs each post's "DMA read" only after a delay drawn from a table, so
 *   a buffer freed or rewritten after post shows up as wrong bytes at the receiver.
 * - Every entry read also goes through a model of the NIC's translation cache (tcache_model.h).
 *
 * Posts are processed in post order (one queue, like a NIC send queue): a post's delay is a
 * lower bound, measured from its post, and a short delay never overtakes a long one before it.
 * Delays are slept (condition variable, timer slack 1 ns), not spun: on the 2-core dev VM a
 * DMA starts 3-20 us after it is due (late_ns in the stats says how much); a loaded machine
 * stretches delays, never shortens them. The modeled translation-cache misses are counted, not
 * slept. Completions run from poll() unless the endpoint asks for them on the engine thread.
 * After fork the child has no engine: use the sim in the parent only.
 *
 * Like a NIC, which holds the physical pages of what was posted, the engine reads the pages
 * whatever the CPU's protection of them (PROT_NONE, a fence's write protection), and pages that
 * leave the address space before their DMA (munmap, mremap, madvise(DONTNEED), a fixed mmap over
 * them, shmdt, dlclose: nic_sim_pages_leaving) are kept aside for the posts still to read them,
 * so the receiver gets the posted pages and never whatever is mapped there later. Memory that
 * went away unseen (a raw system call) completes its post with -EFAULT instead of a fault.
 *
 * Settings (read by nic_sim_config_from_env; a bad value gets one warning and the default):
 *   NICMALLOC_SIM_MAX_SGE=n        entries per post, 1..256 (default 32)
 *   NICMALLOC_SIM_DELAYS=file      one delay per line in us, '#' comments; or fixed:<us>
 *   NICMALLOC_SIM_SEED=n           seed for drawing from the table (default 1)
 *   NICMALLOC_SIM_TCACHE=preset    and the overrides listed in tcache_model.h
 *
 * Locking: one mutex guards the table, the queues, the model and the counters. post() holds it
 * for a lookup per entry and a queue append (~100 ns uncontended); the engine holds it for the
 * coverage checks and model updates of one post, never while copying bytes or calling back.
 * Enough for a sim; a real backend's post path takes no process-wide lock. */
#ifndef NIC_SIM_NIC_H
#define NIC_SIM_NIC_H

#include "backend.h"
#include "tcache_model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nic_sim_config {
  uint32_t max_sge;        /* caps.max_sge; 1..256 */
  uint32_t max_regions;    /* caps.max_regions; 1..65536 */
  size_t max_region_bytes; /* caps.max_region_bytes */
  const char *delays_path; /* delay table file; NULL = built-in table */
  int64_t fixed_delay_ns;  /* >= 0: every post waits exactly this (deterministic); < 0: table */
  uint64_t seed;           /* for drawing from the table */
  struct nic_tcache_params tcache;
  bool start_paused; /* the engine holds every post until nic_sim_pause(b, false) */
};

/* Defaults: 32 entries, 65536 regions of up to 1 GiB, built-in delays, seed 1, preset cx5. */
void nic_sim_config_defaults(struct nic_sim_config *c);
/* Defaults, then the NICMALLOC_SIM_* variables. Strings point into the environment. */
void nic_sim_config_from_env(struct nic_sim_config *c);
/* Opens a sim NIC with its engine thread. A delay file that cannot be read or parsed gets one
 * warning and the built-in table. NULL with errno (EINVAL for a bad config, ENOMEM, or
 * pthread_create's error). nic_backend_sim_open() is this with nic_sim_config_from_env. */
struct nic_backend *nic_sim_open(const struct nic_sim_config *c);
/* True when b is a sim backend (the functions below need one). */
bool nic_sim_is(const struct nic_backend *b);

/* Receives each delivered message: the entries' bytes, read at DMA time, concatenated. Runs on
 * the engine thread; data is valid only during the call. It may call post, poll and reg, not
 * close. Returns 0, or -errno when it could not take the message, which is then not delivered:
 * the post completes with that error, as with one the NIC could not read. */
typedef int (*nic_sim_receive_fn)(void *arg, const void *data, size_t len);

enum {
  /* Completions of this endpoint's posts run on the engine thread right after the DMA read
   * instead of from poll(): for callers that never poll. done must then be thread-safe and
   * quick (it delays every later post) and must not close the backend. */
  NIC_SIM_EP_ENGINE_COMPLETIONS = 1u << 0,
};
/* receive may be NULL (messages are dropped after the DMA read). NULL with errno on failure. */
struct nic_endpoint *nic_sim_endpoint_open(struct nic_backend *b, nic_sim_receive_fn receive,
                                           void *arg);
struct nic_endpoint *nic_sim_endpoint_open_ex(struct nic_backend *b, nic_sim_receive_fn receive,
                                              void *arg, unsigned flags);
/* 0, or -EBUSY while posts to ep have not completed. close() of the backend frees the rest. */
int nic_sim_endpoint_close(struct nic_backend *b, struct nic_endpoint *ep);

/* Called by the engine right after it read entry index of a post (bytes: what it read, len of
 * them), before the receiver sees them; arg is the post's done argument. NULL = none. Set by
 * NICMALLOC_FENCE=detect (safety/fence_detect.c), to compare with what was posted. */
extern void (*nic_sim_read_hook)(void *arg, unsigned index, const void *bytes, size_t len);

/* The interposed mmap family calls this before [start, start+len) stops being the pages it was
 * (interpose*.c): every open sim copies aside the bytes its pending posts have there, which is
 * what the pages a NIC pinned would still hold, since no one can write them any more. Waits for
 * a DMA in progress that reads the range. One load when no post is waiting for its DMA. */
void nic_sim_pages_leaving(uintptr_t start, size_t len);

/* Test hook: while paused the engine performs no DMA; posts queue up (their delays still count
 * from post). Lets a test change a buffer between post and DMA without relying on timing. */
void nic_sim_pause(struct nic_backend *b, bool paused);

struct nic_sim_stats {
  uint64_t posts;             /* accepted by post() */
  uint64_t rejected;          /* post() returned -EINVAL */
  uint64_t delivered;         /* messages handed to receivers */
  uint64_t bytes;             /* bytes handed to receivers */
  uint64_t protection_errors; /* posts completed with -EFAULT: an entry no registration covers */
  uint64_t unreadable;        /* posts completed with -EFAULT: memory gone at DMA time */
  uint64_t refused;           /* posts completed with the -errno of a receiver that could not
                                 take their message */
  uint64_t kept_entries;      /* entries whose pages left before their DMA, read from a copy */
  uint64_t cancelled;         /* posts completed with -ECANCELED by close() */
  uint64_t completions;       /* done callbacks run, whatever the status */
  uint64_t in_flight;         /* posted, done not yet run */
  uint64_t delay_ns;          /* sum of the delays drawn for accepted posts */
  uint64_t late_ns;           /* sum of how long after its due time each DMA began (wake-up
                                 latency, the engine busy with earlier posts, pauses) */
  uint64_t regions;           /* live registrations */
  uint64_t registered_bytes;  /* their total length */
  uint64_t entries_needed;    /* MPT + MTT entries to hold every live region (model's page size) */
  uint64_t modeled_misses;    /* = tcache.misses */
  uint64_t modeled_ns;        /* = tcache.modeled_ns */
  struct nic_tcache_counters tcache;
  struct nic_tcache_params tcache_params;
  size_t delay_table_len;   /* entries in the delay table in use (1 = fixed) */
  bool delay_table_builtin; /* the built-in table is in use */
};
void nic_sim_get_stats(struct nic_backend *b, struct nic_sim_stats *out);

#ifdef __cplusplus
}
#endif
#endif
