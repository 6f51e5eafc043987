/* The fields of struct nic_stats (nicmalloc.h), declared once. The struct, the readable report
 * (nic_print_stats), the JSON form (nic_print_stats_json) and the README's table are all made
 * from this list, so a field added here appears in all four.
 *
 * X(group, name, type, unit, label, help)
 *   group  the report line that shows it (fields of one group are adjacent)
 *   name   the field (and the JSON key)
 *   type   its C type
 *   unit   bytes   bytes held now, or a size (the report shows MiB)
 *          bytes_total  bytes over the process lifetime (the report shows every byte)
 *          count   a number of things, now or over the process lifetime
 *          percent a percentage (may exceed 100)
 *          name    a string (JSON: a string)
 *          page_kind  enum nic_page_kind (the report and JSON show its name: nic_page_kind_name)
 *   label  how the report says it: '#' stands for the value
 *   help   one line for the README
 *
 * Versioning: fields are only ever appended at the end of the list, never removed, reordered or
 * retyped, so that a struct from an older header is a prefix of today's (see nic_get_stats). The
 * list of version 1 ends at log_lines_dropped (NIC_STATS_SIZE_V1 in nicmalloc.h). */
#ifndef NICMALLOC_STATS_FIELDS_H
#define NICMALLOC_STATS_FIELDS_H

/* clang-format off */
#define NIC_STATS_FIELDS(X) \
  X("control heap", control_committed, size_t, bytes, "# committed", "control-heap bytes mimalloc has made usable (read from the kernel, so that control malloc and free count nothing)") \
  X("control heap", control_resident, size_t, bytes, "# resident", "of those, bytes in RAM") \
  X("huge blocks", huge_hits, uint64_t, count, "# requests over 16 MiB reused a freed block", "control requests over 16 MiB served from the huge-block cache (NICMALLOC_HUGE_CACHE_BYTES)") \
  X("huge blocks", huge_misses, uint64_t, count, "# did not", "control requests over 16 MiB the huge-block cache could not serve") \
  X("huge blocks", huge_cached_blocks, uint32_t, count, "# cached", "freed blocks over 16 MiB kept committed for reuse now") \
  X("huge blocks", huge_cached_bytes, size_t, bytes, "# cached", "their bytes") \
  X("huge blocks", huge_purged, uint64_t, count, "# given back", "cached blocks given back to mimalloc (NICMALLOC_PURGE_DELAY_MS)") \
  X("dataplane", dataplane_live, size_t, bytes, "live #", "usable bytes of live dataplane blocks (an aligned block's whole mimalloc block), read from mimalloc's pages when asked: exact while no program thread allocates or frees dataplane memory meanwhile (the reaper's visits of exited threads' segments are waited for)") \
  X("dataplane", dataplane_in_use, size_t, bytes, "in mimalloc segments #", "chunk bytes held by mimalloc segments (32 MiB granularity)") \
  X("dataplane", dataplane_pinned, size_t, bytes, "pinned #", "bytes of chunk steps in memory and locked now: a step faulted in whole less the pages given back inside it (dataplane_dropped); a step locked as it is touched (NICMALLOC_DP_POPULATE=register, before its first registration) the pages it holds") \
  X("dataplane", dataplane_mapped, size_t, bytes, "mapped #", "bytes of chunks currently mapped (pinned or not)") \
  X("dataplane", dataplane_reserved, size_t, bytes, "reserved #", "virtual bytes reserved for all chunks") \
  X("chunks", chunks_live, uint32_t, count, "# live", "chunks mapped now") \
  X("chunks", chunks_draining, uint32_t, count, "# draining", "empty chunks waiting for their threads to let go") \
  X("chunks", chunks_max, uint32_t, count, "# max", "cap on chunks: as many as the dataplane range holds once reserved (at the first dataplane request), before that as many as it would take now (NICMALLOC_MAX_CHUNKS, fewer under an address-space limit as /proc/self/status tells; without /proc, NICMALLOC_MAX_CHUNKS); 0 while no chunk could be reserved (tried again)") \
  X("chunks", chunk_size, size_t, bytes, "# each", "bytes of one chunk (NICMALLOC_CHUNK_SIZE)") \
  X("chunks", chunks_created, uint64_t, count, "# created", "chunks mapped over the process lifetime") \
  X("chunks", chunks_released, uint64_t, count, "# released", "chunks released over the process lifetime") \
  X("chunks", page_kind, enum nic_page_kind, page_kind, "page kind #", "page kind of the most recently backed chunk step") \
  X("fallbacks", page_fallbacks, uint64_t, count, "# smaller page kind", "chunk steps that got a smaller page kind than asked for") \
  X("fallbacks", pin_failures, uint64_t, count, "# not pinned", "chunk steps that could not be locked in memory: each step once until it is locked, however often it is asked for again (a chunk refused because its first step could not be is counted here, not in chunk_refusals)") \
  X("fallbacks", dataplane_fallbacks, uint64_t, count, "# dataplane requests served by control", "dataplane requests served from the control heap") \
  X("fallbacks", dataplane_failures, uint64_t, count, "# failed", "dataplane requests that returned NULL (ENOMEM)") \
  X("fallbacks", chunk_refusals, uint64_t, count, "# chunks refused", "chunks the kernel would not map or back with memory, or mimalloc would not take as an arena") \
  X("fallbacks", vspace_refusals, uint64_t, count, "# address-space reservations refused", "address-space reservations refused (an address-space limit: the control arena's, the dataplane span's)") \
  X("registration", backend, const char *, name, "backend #", "registration backends started, joined by '+' (\"sim+uring\"), or \"none\" while none was needed") \
  X("registration", rcache_regions, uint32_t, count, "# cached regions", "registration-cache regions (memory outside the chunks) held now") \
  X("registration", rcache_bytes, size_t, bytes, "# cached", "their bytes") \
  X("registration", rcache_hits, uint64_t, count, "# hits", "registration-cache lookups that found a region") \
  X("registration", rcache_misses, uint64_t, count, "# misses", "registration-cache lookups that registered a region") \
  X("registration", rcache_evictions, uint64_t, count, "# evictions", "regions evicted to make room") \
  X("registration", rcache_invalidations, uint64_t, count, "# invalidations", "regions dropped because their memory was unmapped or changed") \
  X("safety", inflight_posts, uint64_t, count, "# posts in flight", "posted messages whose completion has not run") \
  X("safety", inflight_entries, uint64_t, count, "# entries in flight", "their scatter-gather entries") \
  X("safety", deferred_frees, uint64_t, count, "# frees deferred", "frees deferred because a page of the block was in flight or held (nic_hold, or a live remote key: nic_register with remote access)") \
  X("safety", deferred_pending, uint64_t, count, "# pending", "of those, not released yet") \
  X("safety", holds, uint64_t, count, "# holds", "nic_hold references outstanding") \
  X("safety", bounce_bytes, uint64_t, bytes_total, "# bytes copied to bounce areas", "bytes copied into bounce areas") \
  X("receive", recv_messages, uint64_t, count, "# messages", "messages handed to receive functions (nic_endpoint_receive)") \
  X("receive", recv_bytes, uint64_t, bytes_total, "# bytes received", "their bytes") \
  X("receive", recv_held_buffers, uint64_t, count, "# buffers held", "receive buffers kept from the NIC by a nic_hold now") \
  X("receive", recv_held_bytes, uint64_t, bytes, "# held", "their bytes") \
  X("receive", recv_stalls, uint64_t, count, "# stalls", "times an endpoint stopped receiving because every buffer of it was held") \
  X("fence", fence_waits, uint64_t, count, "# waits", "nic_fence_write / realloc calls that had to wait") \
  X("fence", fence_timeouts, uint64_t, count, "# timed out", "of those, gave up after NICMALLOC_FENCE_TIMEOUT_MS") \
  X("fence", fence_held_writes, uint64_t, count, "# writes held", "NICMALLOC_FENCE=protect: writes held until their page's DMA completed") \
  X("fence", fence_writers_held, uint64_t, count, "# writers held now", "protect: writers held now") \
  X("fence", fence_bypasses, uint64_t, count, "# let through", "protect: writes let through unheld (by a thread the NIC or the completions need, or after NICMALLOC_FENCE_TIMEOUT_MS)") \
  X("fence", fence_unprotected, uint64_t, count, "# entries unprotected", "protect: entries that could not be protected (memory outside nicmalloc's heaps, or the kernel refused)") \
  X("fence", fence_mismatches, uint64_t, count, "# written while posted", "NICMALLOC_FENCE=detect: entries found written while posted") \
  X("NIC cache", nic_regions, uint64_t, count, "# regions", "registrations alive with the default backend: chunk steps, cache regions, and those of a request of its own (remote access, a range across steps, memory the cache does not keep)") \
  X("NIC cache", nic_entries_needed, uint64_t, count, "# entries needed", "MPT + MTT entries the NIC needs to hold all of them") \
  X("NIC cache", nic_working_set, uint64_t, count, "working set #", "distinct MPT and MTT entries among the last ones posts looked up (the window: 4 x the capacity of them)") \
  X("NIC cache", nic_cache_capacity, uint32_t, count, "capacity #", "entries the NIC caches (NICMALLOC_SIM_TCACHE*)") \
  X("NIC cache", nic_pressure_pct, uint32_t, percent, "pressure #", "working set / capacity, rounded up; above 100 the NIC thrashes, and small entries that need a new registration are copied until it is under 90") \
  X("NIC cache", nic_modeled_misses, uint64_t, count, "# modeled misses", "modeled translation misses of everything posted") \
  X("NIC cache", pressure_copies, uint64_t, count, "# small entries copied under pressure", "small entries copied instead of registered under pressure") \
  X("sent", sent_dataplane_bytes, uint64_t, bytes_total, "# from dataplane memory", "bytes handed to the network (interposed send/sendto/sendmsg/sendmmsg, write/writev on sockets) from dataplane memory; counted in every mode") \
  X("sent", sent_other_bytes, uint64_t, bytes_total, "# from elsewhere", "bytes handed to the network from other memory") \
  X("routed sites", sites_routed, uint64_t, count, "# sites", "profile-guided sites loaded (NICMALLOC_SITES)") \
  X("routed sites", sites_routed_allocs, uint64_t, count, "# allocations routed", "allocations routed to dataplane memory by a site") \
  X("routed sites", sites_routed_bytes, uint64_t, bytes_total, "# bytes routed", "bytes routed to dataplane memory by a site") \
  X("routed sites", sites_over_budget, uint64_t, count, "# over budget", "allocations refused by a site's budget (NICMALLOC_SITES_BUDGET)") \
  X("errors", invalid_frees, uint64_t, count, "# invalid frees", "free/realloc of pointers nicmalloc did not allocate") \
  X("errors", double_frees, uint64_t, count, "# double frees", "free, realloc or malloc_usable_size of a freed block") \
  X("errors", sga_errors, uint64_t, count, "calls that returned an error: # sga", "nic_sga_init/add/post calls that returned an error (each kind is said once on stderr)") \
  X("errors", registration_errors, uint64_t, count, "# registration", "nic_register/unregister calls that returned an error, and nic_translate calls given no result pointer (its answers about the range, -NIC_ENOTDP, -NIC_ECROSS and -NIC_ERANGE, are not counted: nic_register asks it first and counts its own)") \
  X("errors", hold_errors, uint64_t, count, "# hold", "nic_hold/release calls that returned an error") \
  X("errors", endpoint_errors, uint64_t, count, "# endpoint", "endpoint constructors and destroys that returned an error") \
  X("errors", other_api_errors, uint64_t, count, "# other", "other calls that returned an error (nic_fence_write's bad ranges, nic_get_stats, nic_posix_memalign_site)") \
  X("messages", log_lines_dropped, uint64_t, count, "# lines not written", "lines for a stderr the program has closed or reused for another file: not written (NICMALLOC_STATS, unless NICMALLOC_STATS_FILE takes the report, keeps a copy of the start-up stderr for them instead)") \
  X("steps", pin_step, size_t, bytes, "# each", "bytes of one step: the unit a chunk is backed, pinned and registered in (NICMALLOC_PIN_STEP)") \
  X("steps", steps_pinned, uint32_t, count, "# pinned", "steps of mapped chunks backed and locked in memory now (dataplane_pinned is their bytes in memory)") \
  X("steps", steps_backed, uint64_t, count, "# backed", "steps backed (mapped with memory and locked) over the process lifetime") \
  X("steps", dataplane_backed, size_t, bytes, "backed #", "bytes of steps backed now, pinned or not, whether in memory yet or not (less dataplane_dropped)") \
  X("steps", steps_released, uint64_t, count, "# released", "steps given back to the OS inside live chunks (empty of mimalloc's commits for NICMALLOC_RELEASE_DELAY_MS) over the process lifetime") \
  X("steps", dataplane_dropped, size_t, bytes, "dropped #", "bytes given back to the OS inside steps that stay backed (free pages mimalloc decommitted, where no registration holds the step's pages); not in dataplane_pinned or dataplane_backed") \
  X("receive cap", recv_capped, uint64_t, count, "# capped", "messages that waited because the held bytes reached NICMALLOC_RECV_HELD_MAX") \
  X("receive cap", recv_waiting, uint64_t, count, "# waiting", "messages waiting now for the held bytes to fall under the cap") \
  X("receive cap", recv_capped_dropped, uint64_t, count, "# dropped at close", "waiting messages given back undelivered because their endpoint was destroyed") \
  X("peaks", dataplane_live_peak, size_t, bytes, "live #", "largest dataplane_live seen, by the reaper at each pass (every 10 ms to 1 s) and by each stats read, which keeps it: a lower bound that never goes down") \
  X("peaks", dataplane_pinned_peak, size_t, bytes, "pinned #", "largest dataplane_pinned over the process lifetime, as sampled once per reaper pass and at each read (a lower bound that never goes down)") \
  X("control decommits", control_decommits_waited, uint64_t, count, "# waited", "decommits of control segments that exited threads abandoned, made by a visiting heap that could not take them (a dataplane heap's, or a forced collection's), held back for NICMALLOC_PURGE_DELAY_MS instead of made at once (only once the dataplane is in use)") \
  X("control decommits", control_decommits_reused, uint64_t, count, "# reused", "of those, ranges (or parts) that mimalloc committed again, or unmapped, before the delay ran out: committed again, their pages were still there, with no fault") \
  X("control decommits", control_decommits_late, uint64_t, count, "# made late", "ranges given back to the OS after the delay (or by nic_collect and malloc_trim)") \
  X("nudges", dataplane_nudges, uint64_t, count, "# chunks asked", "times the reaper asked the threads to decommit what mimalloc had only marked for decommit in a chunk whose committed bytes stayed well above its live bytes for NICMALLOC_PURGE_DELAY_MS (no nic_collect needed)") \
  X("nudges", dataplane_nudge_answers, uint64_t, count, "# answers", "a thread's heap in an asked chunk that began to do so, on the thread's next pass through mimalloc's generic allocation path or its next `nic_poll` (a thread that does neither again never answers; a large heap's answer goes on over the following ones)") \
  X("nudges", dataplane_nudged_bytes, uint64_t, bytes_total, "# bytes decommitted", "bytes those answers decommitted or gave back inside pages in use") \
  X("control blocks", control_live, size_t, bytes, "live #", "usable bytes of live control blocks, every thread's, read from mimalloc's page headers when asked (a block another thread freed counts until its owner takes the free back; freed huge blocks the cache keeps do not count); control_committed where the headers cannot be read") \
  X("fence releases", fence_release_errors, uint64_t, count, "# refused", "protect: releases of write-protected pages the kernel refused (mprotect splitting a mapping once the process has vm.max_map_count of them): those pages stay protected, and are released at a later completion or when a write faults there; said once") \
  X("sim receive", recv_no_buffer, uint64_t, count, "# dropped for want of a buffer", "messages to a sim endpoint (nic_sim_endpoint_create) dropped because no dataplane memory could be had for their receive buffer: not handed to its receive function, and their post completes with -ENOMEM") \
  X("backend starts", backend_start_refusals, uint64_t, count, "# refused for now", "backend starts refused for a shortage that may pass (EMFILE, ENFILE, ENOMEM, EAGAIN): tried again after 1 s, doubling up to 60 s; a backend NICMALLOC_BACKEND names is not replaced meanwhile") \
  X("verbs completions", verbs_completion_errors, uint64_t, count, "# in error", "work completions in error the verbs backend reaped from its endpoints' CQs, sends and receives (a protection or length error, retries exhausted, the flushes of a QP gone to error; not the flushes of the receives an endpoint's destroy takes back); each status is said once on stderr") \
  X("dpdk receive", dpdk_recv_dropped, uint64_t, count, "# dropped", "packets the dpdk backend's receiver took from a port and dropped because no buffer of their length could be had for a packet in scattered segments (said once): not handed to the receive function; when the packet was a post of this process (net_ring hands the receiver the sender's mbufs), that post completes with -ENOMEM")
/* clang-format on */

#endif /* NICMALLOC_STATS_FIELDS_H */
