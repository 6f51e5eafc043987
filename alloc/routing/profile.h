/* Profile-guided dataplane sites for binaries nobody can recompile (README: NICMALLOC_PROFILE,
 * NICMALLOC_SITES). A site is a short chain of return addresses above malloc; profiling samples
 * allocations by bytes, remembers which site made each sampled block, and counts the bytes that
 * reach a sink (interposed send calls) from each site; routing sends the allocations of the sites
 * a profile names to dataplane memory, within a per-site budget. All of it is off (and costs the
 * malloc fast path nothing) unless one of the two settings is given. */
#ifndef NIC_PROFILE_H
#define NIC_PROFILE_H

#include "alloc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NIC_PROF_FRAMES 4 /* return addresses per site */

/* NIC_PROF_FENCE: NICMALLOC_FENCE=detect records the site of blocks it may report. */
enum { NIC_PROF_SAMPLE = 1, NIC_PROF_ROUTE = 2, NIC_PROF_FENCE = 4 };
/* What profile.c does; set in the constructor, after the files are read. */
extern int nic_profile_flags;
/* NICMALLOC_FENCE=detect (safety/fence_detect.c, at start-up): record the sites of blocks of
 * min_size bytes and more, about one per mean bytes (0: all), for its mismatch reports. */
void nic_profile_record_sites(size_t min_size, double mean);

/* The allocation router (core/alloc.h) while profiling or routing: samples, routes, records. */
void *nic_profile_alloc(size_t size, size_t alignment, bool zero, enum nic_route route,
                        const void *caller);
extern bool nic_profile_tracking;

/* Reads the files and arms the hooks; from the library constructor. */
void nic_profile_start(void);
/* Writes the profile; from the library destructor. */
void nic_profile_finish(void);

/* Sinks (profile_sink.c): bytes handed to the network, counted in every mode. */
void nic_sink_range(const void *p, size_t len);
struct nic_sink_totals {
  uint64_t dataplane, other;
};
void nic_sink_totals(struct nic_sink_totals *out);

/* From the reaper's passes: writes the profile every few seconds (profile_write.c). */
void nic_profile_tick(void);

/* profile_write.c: the profile file, shared by every process of a run. */
void nic_profile_file_start(const char *path);
void nic_profile_file_write(void);
void nic_profile_file_tick(void);

/* profile_stack.c: the site of the current call. Returns the number of frames (0: none). */
unsigned nic_prof_capture(uintptr_t frames[NIC_PROF_FRAMES]);
/* The same, walking only as far as the first want frames (at most NIC_PROF_FRAMES) need. */
unsigned nic_prof_capture_n(uintptr_t *frames, unsigned want);
/* True for an address in this library's code. */
bool nic_prof_own(uintptr_t addr);
uint64_t nic_prof_hash(const uintptr_t *frames, unsigned n);
/* Module path and load bias of the loaded object holding addr; false if none. */
bool nic_prof_module_of(uintptr_t addr, char *path, size_t cap, uintptr_t *bias);
/* A loaded object's path: its name, or for the main program /proc/self/exe's target (read
 * once). */
struct dl_phdr_info;
const char *nic_prof_object_name(const struct dl_phdr_info *info);

/* profile_modules.c: the modules a NICMALLOC_SITES profile names, by base name. Interning is for
 * the constructor only; scans need the caller's lock (one scanner at a time). */
/* The module's id, or -1 when the table is full: past this many modules, or this many bytes of
 * their base names. */
#define NIC_PROF_MODULES_MAX 512
#define NIC_PROF_MODULE_NAMES_BYTES (64u << 10)
int nic_prof_module_intern(const char *path);
/* Notes the load bias of every named module loaded now; returns how many were found new, and in
 * *loads the loader's count of objects loaded so far. */
unsigned nic_prof_modules_scan(unsigned long long *loads);
/* True, with its load bias, once a scan has found the module loaded. */
bool nic_prof_module_loaded(int id, uintptr_t *bias);
const char *nic_prof_module_name(int id);
/* Finds this library's frames and loads libunwind (unwind.h); false when it cannot be loaded,
 * and nic_prof_capture then returns 0. From the constructor only: it allocates. */
bool nic_prof_stack_init(void);

/* profile_table.c: sampled blocks and profiled sites. Thread-safe. */
struct nic_prof_site {
  uint64_t hash;
  uintptr_t frames[NIC_PROF_FRAMES];
  unsigned nframes;
  uint64_t sampled, sent;
  double est_allocs, est_bytes, est_sent;
  double est_sent_blocks; /* bytes of the site's blocks that reached a sink, scaled */
};
/* Anonymous memory, touched as used: the profiler's tables never come from malloc. */
void *nic_prof_map(size_t bytes);
bool nic_prof_table_init(void);
void nic_prof_table_sample(void *p, size_t usable, double weight, const uintptr_t *frames,
                           unsigned n);
void nic_prof_table_forget(void *p);
/* For NICMALLOC_FENCE=detect: records p's site without counting it as a profile sample, and
 * finds the recorded block (either kind) holding p. */
void nic_prof_table_record(void *p, size_t usable, const uintptr_t *frames, unsigned n);
bool nic_prof_table_block_at(const void *p, uintptr_t *start, uintptr_t *end, uintptr_t *frames,
                             unsigned *n);
/* Credits len bytes sent from address p to the site of the sampled block holding it. */
void nic_prof_table_sent(const void *p, size_t len);
/* Copies out the sites; returns how many. */
unsigned nic_prof_table_sites(struct nic_prof_site *out, unsigned cap);
uint64_t nic_prof_table_dropped(void);

/* profile_sites.c: routing. */
bool nic_sites_load(const char *path);
/* The route for an allocation of size bytes from the current call site; caller is where the
 * program's call returns to, or 0 when not known. */
enum nic_route nic_sites_route(size_t size, uintptr_t caller);
struct nic_sites_totals {
  uint64_t sites, routed_allocs, routed_bytes, over_budget;
};
void nic_sites_totals(struct nic_sites_totals *out);
/* At exit: warns about sending sites of this program whose module never loaded. */
void nic_sites_finish(void);

#endif
