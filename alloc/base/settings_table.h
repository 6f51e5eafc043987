/* Every NICMALLOC_* variable the runtime reads, declared once, with what it takes: settings.c
 * copies their values at start-up and turns them into typed values on first use; nothing else in
 * the runtime reads the environment for them or parses their text. README.md's settings table is
 * generated from this one (nicmalloc-settings --markdown; the settings_readme test compares).
 *
 * X(id, name, type, default, min, max, words, reach, help)
 *   id       NIC_S_<id> names the setting in code (settings.h)
 *   type     NIC_T_SIZE     digits with an optional K, M or G (binary; KiB and MB read too)
 *            NIC_T_POW2     a size that is a power of two
 *            NIC_T_COUNT    digits only
 *            NIC_T_MS       milliseconds, digits only
 *            NIC_T_BOOL     1, yes, on, true or 0, no, off, false
 *            NIC_T_CHOICE   one of words
 *            NIC_T_TEXT     a path, a name or arguments, kept as given; empty is unset
 *   default  the text the setting has when unset, parsed like a given value; "" for none (the
 *            module then decides, as a preset does for the sim translation cache)
 *   min/max  the range of a number (a value outside it is refused); for NIC_T_TEXT, of the
 *            number after a prefix of words
 *   words    "a|b|c": for NIC_T_CHOICE the values; for a number, words it takes besides
 *            numbers ("off"); for NIC_T_TEXT, prefixes of a number ("fixed:" then microseconds)
 *   reach    what the value can point the process at. NIC_REACH_FILE marks a setting that names
 *            a file, a plugin or arguments handed to another library; the others are numbers
 *            and choices. In secure execution every setting is ignored (settings.c says why).
 *   help     one line: the README's meaning column */
#ifndef NIC_SETTINGS_TABLE_H
#define NIC_SETTINGS_TABLE_H

#define NIC_SETTINGS(X)                                                                            \
  X(CHUNK_SIZE, "NICMALLOC_CHUNK_SIZE", NIC_T_POW2, "1G", 32ull << 20, 1ull << 30, "",             \
    NIC_REACH_VALUE,                                                                               \
    "size of each dataplane chunk: a power of two from `32M` to `1G` (1 GiB is io_uring's"         \
    " largest fixed buffer)")                                                                      \
  X(PIN_STEP, "NICMALLOC_PIN_STEP", NIC_T_POW2, "4M", 2ull << 20, 1ull << 30, "", NIC_REACH_VALUE, \
    "unit in which a dataplane chunk is backed, pinned and registered: a power of "                \
    "two from `2M` to `1G`, at most the chunk size (a larger one warns and the default is "        \
    "used). A chunk is reserved whole, but a step is "                                             \
    "backed only when mimalloc first commits in it, and each step is its own registration on "     \
    "every backend (a posted range across steps goes as one entry per step). The default is "      \
    "measured (bench/README.md, \"Pin step\"): the first dataplane allocation locks 4 MiB "        \
    "(`RLIMIT_MEMLOCK` counts the step; only its touched pages are in memory until it is "         \
    "registered: `NICMALLOC_DP_POPULATE`), "                                                       \
    "peak pinned/live is within 1% of 2 MiB steps' and 4-6% under 32 MiB steps', 8 MiB of "        \
    "`RLIMIT_MEMLOCK` locks two steps, 48 chunks of 1 GiB fit io_uring's 16384 fixed buffers, "    \
    "and the NIC's translation cache needs 1.4x the entries per GiB of 32 MiB steps (with 2 MiB "  \
    "pages; with 4 KiB pages the step's share is negligible)")                                     \
  X(MAX_CHUNKS, "NICMALLOC_MAX_CHUNKS", NIC_T_COUNT, "48", 1, 48, "", NIC_REACH_VALUE,             \
    "cap on dataplane chunks (1–48; mimalloc allows 64 arenas per process; under an "            \
    "address-space limit as many as fit in half of what it leaves). A chunk not in use costs "     \
    "address space only, and each thread with dataplane blocks takes 32 MiB of it, so the "        \
    "default is the cap: 1536 such threads at once with 1 GiB chunks. A thread that"               \
    " found every chunk full at the cap does not search again for 1 ms (or until a chunk "         \
    "changes state): its dataplane requests get the `NICMALLOC_ON_PIN_FAIL` policy at "            \
    "once, except that after each dataplane free of its own one request tries its current"         \
    " chunk, so its own frees are reused")                                                         \
  X(PAGE_KIND, "NICMALLOC_PAGE_KIND", NIC_T_CHOICE, "auto", 0, 0, "auto|1g|2m|thp|4k",             \
    NIC_REACH_VALUE,                                                                               \
    "largest page kind to try: `1g`, `2m` (hugetlb), `thp`, `4k` (held under THP mode `always` "   \
    "too); each falls back to the "                                                                \
    "next, and the fallback is counted (`page_fallbacks`). It is a warning only when a "           \
    "kind is named here; under `auto` it is said with `NICMALLOC_VERBOSE=1`. `1g` also makes "     \
    "the pin step 1 GiB (or the chunk) unless `NICMALLOC_PIN_STEP` is set. Under "                 \
    "`NICMALLOC_FENCE=protect`, `auto` starts at `thp`: the kernel write-protects a hugetlb "      \
    "page only whole, so every write into a hugepage being sent would wait")                       \
  X(DP_POPULATE, "NICMALLOC_DP_POPULATE", NIC_T_CHOICE, "register", 0, 0, "register|commit",       \
    NIC_REACH_VALUE,                                                                               \
    "when a pin step's pages (4 KiB or transparent huge pages) are faulted in: `register` "        \
    "(locked as the program first touches them, in 4 KiB pages whatever the system's THP mode, "   \
    "the whole step faulted in before its first "                                                  \
    "registration with any backend, so the NIC never meets a missing page; a program that never "  \
    "hands memory to the NIC keeps only what it touched) or `commit` (the whole step faulted in "  \
    "and locked when mimalloc first commits in it: no page fault on a dataplane block's first "    \
    "touch). hugetlb steps are always faulted in when mapped")                                     \
  X(ON_PIN_FAIL, "NICMALLOC_ON_PIN_FAIL", NIC_T_CHOICE, "fallback", 0, 0, "fallback|fail",         \
    NIC_REACH_VALUE,                                                                               \
    "when a chunk cannot be pinned or no chunk can hold a request: `fallback` (unpinned "          \
    "chunk, else control heap) or `fail` (ENOMEM). A refused pin under `fail`, a chunk "           \
    "the kernel will not map or mimalloc will not take as an arena, is tried again after "         \
    "1 s, doubling to 60 s. Each cause is said once: a warning under `fail` (the setting "         \
    "refuses requests), else with `NICMALLOC_VERBOSE=1` only, as every fallback nicmalloc"         \
    " takes on its own is counted in `nic_get_stats` and kept off stderr. Under `fail` a "         \
    "user's `MIMALLOC_EAGER_COMMIT` is not followed (one warning): mimalloc hands out an "         \
    "eagerly committed segment whatever its commit said")                                          \
  X(DP_MIN_SIZE, "NICMALLOC_DP_MIN_SIZE", NIC_T_SIZE, "0", 0, UINT64_MAX, "", NIC_REACH_VALUE,     \
    "route every malloc of at least this many bytes to dataplane memory; `0`: off")                \
  X(RELEASE_DELAY_MS, "NICMALLOC_RELEASE_DELAY_MS", NIC_T_MS, "1000", 0, 3600000, "",              \
    NIC_REACH_VALUE, "how long a chunk must stay empty before it is released to the OS")           \
  X(PURGE_DELAY_MS, "NICMALLOC_PURGE_DELAY_MS", NIC_T_MS, "250", 0, 3600000, "", NIC_REACH_VALUE,  \
    "how long freed control-heap memory stays committed for reuse before it goes back to "         \
    "the OS: mimalloc's decommit delay (its own default, 25 ms, made a program that frees"         \
    " and reallocates megabytes fault every page in again; `MIMALLOC_DECOMMIT_DELAY`, if "         \
    "set, wins) and the age at which the reaper frees cached huge blocks")                         \
  X(HUGE_CACHE_BYTES, "NICMALLOC_HUGE_CACHE_BYTES", NIC_T_SIZE, "128M", 0, UINT64_MAX, "",         \
    NIC_REACH_VALUE,                                                                               \
    "freed control blocks over 16 MiB kept for reuse, at most (0: off; new blocks then "           \
    "also keep their requested size, see \"Large control memory\"). mimalloc 2.0.9 unmaps"         \
    " such blocks on free, so each new one faults in every page")                                  \
  X(KEEP_CHUNKS, "NICMALLOC_KEEP_CHUNKS", NIC_T_COUNT, "1", 0, 48, "", NIC_REACH_VALUE,            \
    "empty chunks kept mapped as a reserve, so bursts do not map and pin anew")                    \
  X(FREE_CHECK, "NICMALLOC_FREE_CHECK", NIC_T_BOOL, "1", 0, 1, "", NIC_REACH_VALUE,                \
    "check every pointer given to free (invalid and double frees are reported and "                \
    "ignored); `0` skips the check, for a program that trips it on purpose: free's fast path "     \
    "then tests only that a control block lies in the control arena and reads nothing from it "    \
    "(as many instructions per control pair, but no read of the block's memory)")                  \
  X(BACKEND, "NICMALLOC_BACKEND", NIC_T_CHOICE, "auto", 0, 0, "auto|sim|uring|verbs|dpdk",         \
    NIC_REACH_VALUE,                                                                               \
    "default registration backend (each endpoint starts its own): `sim`, `uring`, `verbs`, "       \
    "`dpdk`; `auto` = the first an endpoint started, else verbs if a device exists, else uring, "  \
    "else sim")                                                                                    \
  X(RCACHE_MAX_REGIONS, "NICMALLOC_RCACHE_MAX_REGIONS", NIC_T_COUNT, "1024", 1, 1ull << 20, "",    \
    NIC_REACH_VALUE,                                                                               \
    "registration-cache regions before one not used lately is evicted (CLOCK); at most three "     \
    "quarters of what the backend holds (dpdk: 48 of its 64 extmem areas)")                        \
  X(RCACHE_MAX_BYTES, "NICMALLOC_RCACHE_MAX_BYTES", NIC_T_SIZE, "4G", 4096, UINT64_MAX, "",        \
    NIC_REACH_VALUE, "registration-cache bytes before eviction")                                   \
  X(SIM_TCACHE, "NICMALLOC_SIM_TCACHE", NIC_T_CHOICE, "cx5", 0, 0,                                 \
    "tiny|cx4|cx5|cx6dx|bluefield2", NIC_REACH_VALUE,                                              \
    "sim NIC translation-cache preset: `tiny`, `cx4`, `cx5`, `cx6dx`, `bluefield2` "               \
    "(numbers and their sources in `regcache/model/tcache_model.c`)")                              \
  X(SIM_TCACHE_ENTRIES, "NICMALLOC_SIM_TCACHE_ENTRIES", NIC_T_SIZE, "", 1, 1ull << 24, "",         \
    NIC_REACH_VALUE, "sim translation-cache capacity in entries, overriding the preset's")         \
  X(SIM_TCACHE_PAGE, "NICMALLOC_SIM_TCACHE_PAGE", NIC_T_POW2, "", 4096, 1ull << 30, "",            \
    NIC_REACH_VALUE,                                                                               \
    "sim translation-cache page size (`4K`, `2M`, `1G` or any power of two between), "             \
    "overriding the preset's")                                                                     \
  X(SIM_TCACHE_WINDOW, "NICMALLOC_SIM_TCACHE_WINDOW", NIC_T_SIZE, "", 0, 1ull << 26, "",           \
    NIC_REACH_VALUE,                                                                               \
    "sim translation-cache working-set window in entries looked up (an access's MPT entries "      \
    "and every page it spans), overriding the preset's 4 x the capacity: a window not well over "  \
    "the capacity cannot show the cache overcommitted. 0: the sim keeps no working set (the "      \
    "pressure figures still use 4 x the capacity)")                                                \
  X(SIM_MISS_NS, "NICMALLOC_SIM_MISS_NS", NIC_T_SIZE, "", 0, 1000000000, "", NIC_REACH_VALUE,      \
    "sim translation-cache miss penalty in nanoseconds, overriding the preset's")                  \
  X(SIM_DELAYS, "NICMALLOC_SIM_DELAYS", NIC_T_TEXT, "", 0, 10000000, "fixed:", NIC_REACH_FILE,     \
    "sim DMA delays: a file of microseconds, one per line, or `fixed:<us>`; unset: a "             \
    "built-in table")                                                                              \
  X(SIM_SEED, "NICMALLOC_SIM_SEED", NIC_T_COUNT, "1", 0, UINT64_MAX, "", NIC_REACH_VALUE,          \
    "seed for drawing sim delays")                                                                 \
  X(SIM_MAX_SGE, "NICMALLOC_SIM_MAX_SGE", NIC_T_COUNT, "32", 1, 256, "", NIC_REACH_VALUE,          \
    "sim entries per post")                                                                        \
  X(URING_ENTRIES, "NICMALLOC_URING_ENTRIES", NIC_T_COUNT, "256", 1, 32768, "", NIC_REACH_VALUE,   \
    "io_uring queue depth")                                                                        \
  X(RECV_BUFFERS, "NICMALLOC_RECV_BUFFERS", NIC_T_COUNT, "32", 1, 32768, "", NIC_REACH_VALUE,      \
    "io_uring: receive buffers per receiving endpoint (`nic_endpoint_receive`), carved from "      \
    "one dataplane block; while the program holds them all the endpoint stops receiving and "      \
    "its transport pushes back. The default, 32 of the default size, is 2 MiB per endpoint")       \
  X(RECV_BUFFER_SIZE, "NICMALLOC_RECV_BUFFER_SIZE", NIC_T_SIZE, "64K", 4096, 16ull << 20, "",      \
    NIC_REACH_VALUE,                                                                               \
    "io_uring: bytes of each receive buffer, rounded up to whole 4 KiB pages (so that a "          \
    "`nic_hold` on one buffer never keeps its neighbour). 64 KiB takes any UDP datagram whole "    \
    "(65507 bytes at most over IPv4, 65527 over IPv6); a longer datagram is dropped, counted "     \
    "and said once, never handed out cut")                                                         \
  X(RECV_HELD_MAX, "NICMALLOC_RECV_HELD_MAX", NIC_T_SIZE, "256M", 64ull << 10, UINT64_MAX, "",     \
    NIC_REACH_VALUE,                                                                               \
    "bytes of received messages the program may hold (`nic_hold`) at once, over all endpoints "    \
    "of io_uring, verbs and dpdk (not sim: the sim's held messages count in `recv_held_bytes` "    \
    "but not toward the cap, and never wait). Past it a message is not handed over: it waits, in " \
    "its receive buffer, until releases bring the held bytes under the cap; its endpoint runs "    \
    "out of buffers and its transport pushes back (never copied out: holds keep their "            \
    "addresses). The default, 256 MiB, is the default buffers of 128 endpoints")                   \
  X(VERBS_DEVICE, "NICMALLOC_VERBS_DEVICE", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_VALUE,             \
    "RDMA device name; unset: the first device")                                                   \
  X(VERBS_ODP, "NICMALLOC_VERBS_ODP", NIC_T_BOOL, "0", 0, 1, "", NIC_REACH_VALUE,                  \
    "on-demand paging instead of pinning, when the device supports it for RC sends")               \
  X(VERBS_ASYNC_EVENTS, "NICMALLOC_VERBS_ASYNC_EVENTS", NIC_T_BOOL, "0", 0, 1, "",                 \
    NIC_REACH_VALUE,                                                                               \
    "who reads the verbs device context's asynchronous events (`ibv_get_async_event`; the "        \
    "program creates its queue pairs on that context): `0`, the program (nicmalloc neither reads " \
    "them nor changes the descriptor's flags; a queue pair in error shows as its posts' and "      \
    "receives' completions in error, counted in `verbs_completion_errors`, each status said "      \
    "once); `1`, nicmalloc: `nic_poll` reads every one without waiting for one (the descriptor's " \
    "flags unchanged), says a CQ or queue pair in error or a failed device once and drops the "    \
    "rest (COMM_EST, SRQ_LIMIT_REACHED, port events), so the program must not read them")          \
  X(DPDK_VDEV, "NICMALLOC_DPDK_VDEV", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                    \
    "for the EAL nicmalloc starts when the application has none: `;`-separated vdevs "             \
    "(e.g. `net_ring0`), each passed as `--vdev` and the vdev: two of the 62 EAL arguments "       \
    "(`NICMALLOC_DPDK_EAL_ARGS`)")                                                                 \
  X(DPDK_EAL_ARGS, "NICMALLOC_DPDK_EAL_ARGS", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,            \
    "for the EAL nicmalloc starts when the application has none: EAL arguments, split at "         \
    "blanks, replacing the defaults (`--no-huge -m 256 --no-pci --no-shconf --no-telemetry "       \
    "--log-level=notice --lcores=0@(CPUS)`, CPUS every CPU the process may run on, so that EAL "   \
    "pins no thread). At most 62 words, counting `NICMALLOC_DPDK_VDEV`'s two a vdev: past "        \
    "that EAL is not started, and the dpdk backend does not open and says so once")                \
  X(PROFILE, "NICMALLOC_PROFILE", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                        \
    "write a site profile to this file at exit, and every 5 s while the process runs (so "         \
    "a daemon stopped by SIGTERM or SIGKILL loses at most the last 5 s): allocation sites"         \
    " (4 return addresses as module+offset), bytes each sent through interposed "                  \
    "`send`/`sendto`/`sendmsg`/`sendmmsg` (and `write`/`writev` on sockets) from memory "          \
    "that was not dataplane or that `NICMALLOC_SITES` routed in the same run (so a run "           \
    "with both on one file keeps its routed sites), sampled and estimated allocations; "           \
    "format in `alloc/routing/profile.c`. Every malloc takes the slow path while set. "            \
    "Every process of a run (the first one to profile and all it forks or execs: a "               \
    "wrapper such as `timeout`, a shell, the program) adds to the one file, under a lock;"         \
    " the first sets `NICMALLOC_PROFILE_RUN` for its descendants, and a process of "               \
    "another run replaces the file. A relative path is taken from the directory the "              \
    "process started in; a path that cannot be written is reported at start-up. The file "         \
    "is never rewritten in place: a new one is written next to it and renamed over it, so"         \
    " it always holds a complete profile. Refused, with one warning: a path that is a "            \
    "symbolic link, a file of another user than the process's effective uid, a directory "         \
    "on the way owned by another user than root or that uid, or writable by group or "             \
    "others without the sticky bit (`/tmp` is fine); so is, at start-up, a file name that "        \
    "could have more than 233 bytes with `%u` at 10 digits (the new file's name adds 22). "        \
    "`%u` in the file name stands for the"                                                         \
    " effective uid when the file is written: a daemon whose workers drop privileges "             \
    "(nginx: master root, workers `www-data`) is profiled with a name such as "                    \
    "`/tmp/nginx.%u.profile`, which gives `nginx.0.profile` for the master and "                   \
    "`nginx.33.profile` for the workers (the directory must let the worker user create "           \
    "files: a sticky one such as `/tmp`; a directory owned by the worker user is refused "         \
    "for the root master); route with the workers' file "                                          \
    "(`NICMALLOC_SITES=/tmp/nginx.33.profile`). A writer killed while writing may leave a"         \
    " `.NAME.*.tmp` file, removed by a later writer after a minute")                               \
  X(PROFILE_RUN, "NICMALLOC_PROFILE_RUN", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                \
    "set by the first process of a `NICMALLOC_PROFILE` run for those it forks or execs: "          \
    "the run they add to (not set by hand)")                                                       \
  X(PROFILE_SAMPLE, "NICMALLOC_PROFILE_SAMPLE", NIC_T_SIZE, "64K", 1, 1ull << 40, "",              \
    NIC_REACH_VALUE,                                                                               \
    "mean bytes between sampled allocations (exponential, so a block of s bytes is "               \
    "sampled with probability 1-e^(-s/mean)); lower it (`512`) for a program that sends "          \
    "from a few small long-lived buffers, such as redis")                                          \
  X(SITES, "NICMALLOC_SITES", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                            \
    "a profile from `NICMALLOC_PROFILE`: allocations from its sites that sent bytes are "          \
    "dataplane. A missing or bad file, or one in which nothing was sent, warns once and runs "     \
    "unrouted; a process that loads none of its sending sites' modules (a wrapper such as "        \
    "`timeout` or a shell in the profiled run) routes nothing without a word "                     \
    "(`NICMALLOC_VERBOSE=1` says so). Sites in a library the program loads later with `dlopen` "   \
    "are routed from its load on; a sending site whose library the program never loaded "          \
    "(renamed, or not used in this run) is named in one warning at exit")                          \
  X(SITES_SAID, "NICMALLOC_SITES_SAID", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                  \
    "set by the first process of a run that warned about its `NICMALLOC_SITES` file, for "         \
    "those it forks or execs: they say the same only with `NICMALLOC_VERBOSE=1` (not set by "      \
    "hand)")                                                                                       \
  X(SITES_MIN_SIZE, "NICMALLOC_SITES_MIN_SIZE", NIC_T_SIZE, "256", 0, UINT64_MAX, "",              \
    NIC_REACH_VALUE, "smaller requests are never routed and keep the fast path")                   \
  X(SITES_BUDGET, "NICMALLOC_SITES_BUDGET", NIC_T_SIZE, "1G", 0, UINT64_MAX, "", NIC_REACH_VALUE,  \
    "bytes each routed site may route over the run; past it, control heap and one warning")        \
  X(SITES_HEADROOM, "NICMALLOC_SITES_HEADROOM", NIC_T_COUNT, "2", 0, 1000, "", NIC_REACH_VALUE,    \
    "lowers a site's budget to this many times the bytes of its blocks the profile saw "           \
    "reach the network (at least 1 MiB); `0` keeps `NICMALLOC_SITES_BUDGET` alone")                \
  X(COPY_THRESHOLD, "NICMALLOC_COPY_THRESHOLD", NIC_T_SIZE, "512", 0, 1ull << 20, "",              \
    NIC_REACH_VALUE,                                                                               \
    "scatter-gather entries shorter than this are copied into a registered bounce buffer "         \
    "instead of registered")                                                                       \
  X(FENCE, "NICMALLOC_FENCE", NIC_T_CHOICE, "wait", 0, 0, "off|wait|protect|detect",               \
    NIC_REACH_VALUE,                                                                               \
    "`off`; `wait`: `nic_fence_write` returns once no DMA in flight overlaps the range; "          \
    "`protect`: posted pages are write-protected until their DMA completes, so a writer "          \
    "is held without any call; `detect`: a checksum at post, compared with what the NIC "          \
    "read, and a report naming the allocation site on mismatch (design and costs in "              \
    "`safety/README.md`)")                                                                         \
  X(FENCE_PROTECT, "NICMALLOC_FENCE_PROTECT", NIC_T_CHOICE, "auto", 0, 0, "auto|uffd|mprotect",    \
    NIC_REACH_VALUE,                                                                               \
    "how `protect` works: `uffd` (userfaultfd write-protect; kernel writes wait too, but for "     \
    "a process that may handle user-mode faults only: `EFAULT`), `mprotect` (SIGSEGV handler; "    \
    "system calls writing posted memory get `EFAULT`), `auto` = uffd, else mprotect")              \
  X(FENCE_DETECT_SAMPLE, "NICMALLOC_FENCE_DETECT_SAMPLE", NIC_T_SIZE, "0", 0, 1ull << 40, "off",   \
    NIC_REACH_VALUE,                                                                               \
    "`detect` records allocation sites of blocks of at least `NICMALLOC_COPY_THRESHOLD` "          \
    "bytes, about one per this many bytes; `0` every one, `off` none")                             \
  X(FENCE_TIMEOUT_MS, "NICMALLOC_FENCE_TIMEOUT_MS", NIC_T_MS, "5000", 1, 3600000, "",              \
    NIC_REACH_VALUE,                                                                               \
    "how long `nic_fence_write` waits before it returns `-ETIMEDOUT` (said once, all counted); "   \
    "under `protect`, how long a writer is held before it is let through (said once, all counted " \
    "in `fence_bypasses`)")                                                                        \
  X(REALLOC_INFLIGHT, "NICMALLOC_REALLOC_INFLIGHT", NIC_T_CHOICE, "move", 0, 0, "move|wait",       \
    NIC_REACH_VALUE,                                                                               \
    "realloc of a block the NIC is still reading: `move` (copy to a new block, free the "          \
    "old one when the DMA is done) or `wait`")                                                     \
  X(SITE_TABLE, "NICMALLOC_SITE_TABLE", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                  \
    "the JSON-lines site table the LLVM pass wrote (`NICMALLOC_SITE_TABLE_OUT` at build "          \
    "time)")                                                                                       \
  X(SITES_OFF, "NICMALLOC_SITES_OFF", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                    \
    "comma list of sites to switch off: site ids, or `file:line` / function names looked "         \
    "up in `NICMALLOC_SITE_TABLE`. A switched-off site allocates as the plain call it "            \
    "replaced: control heap, unless a dataplane scope or `NICMALLOC_DP_MIN_SIZE` applies")         \
  X(STATS, "NICMALLOC_STATS", NIC_T_CHOICE, "0", 0, 0, "0|no|off|false|1|yes|on|true|json",        \
    NIC_REACH_VALUE,                                                                               \
    "`1` prints a readable report to stderr at exit, `json` the same figures as one JSON "         \
    "object (`nic_print_stats_json`). Like every nicmalloc line, it goes "                         \
    "to fd 2 while that is still the stderr the process started with (or what the program"         \
    " put there with `dup2`): a program that closes stderr (coreutils do) and opens a "            \
    "file, which then gets fd 2, never finds our lines in it. By default nicmalloc holds "         \
    "no descriptor of its own, and such lines are dropped (counted as `log_lines_dropped`"         \
    " in `nic_get_stats`); with `1` or `json` it keeps a close-on-exec copy of the start-up "      \
    "stderr (at fd 256, or half the descriptor limit when that is 512 or less) so that the "       \
    "report still reaches it (not with `NICMALLOC_STATS_FILE`, which takes the report). A child "  \
    "of `fork` that exits while its parent runs prints "                                           \
    "none (its figures are mostly its parent's, whose report comes at its own exit); one "         \
    "that outlives its parent (a daemon) prints its own, and so does a child that execs a "        \
    "program under nicmalloc, a process of its own. The setting reaches every program the "        \
    "process runs: under a build tool (`cmake`, `configure`) each compiler it runs prints "        \
    "its report into the output the tool reads and checks; `NICMALLOC_STATS_FILE` writes "         \
    "the reports to files instead and leaves stderr alone. The report at exit is best-effort: it " \
    "never waits more than a few milliseconds for a lock of nicmalloc's, and none for one its "    \
    "own thread holds (`exit()` from a signal handler that interrupted an allocation or a post, "  \
    "or another thread stopped holding one), and goes without the figures that lock guards: "      \
    "they read 0, and the report ends with `some figures unavailable: a lock was held at exit "    \
    "(<lock>)` (JSON: an `\"unavailable\"` member); with `NICMALLOC_STATS_FILE`, when the file's " \
    "own lock is the one held, no report is written and one line on stderr says so. "              \
    "`nic_get_stats` and `nic_print_stats` called by the program wait for the locks as before. "   \
    "A process that ends by `_exit` or `quick_exit` runs no exit handler and writes no report")    \
  X(STATS_FILE, "NICMALLOC_STATS_FILE", NIC_T_TEXT, "", 0, 0, "", NIC_REACH_FILE,                  \
    "write the report at exit to this file instead of stderr: readable, or JSON under "            \
    "`NICMALLOC_STATS=json`. Set alone, it turns the report on (readable); "                       \
    "`NICMALLOC_STATS=0` turns it off. `%p` in the file name stands for the process id and "       \
    "`%u` for the effective uid when the file is written, `%%` for a percent sign: with "          \
    "`/tmp/stats.%p` each process of a run (a build tool and every compiler it runs, a "           \
    "shell and its commands) writes a file of its own. No report goes to stderr then, and no "     \
    "copy of stderr is kept. The file is written as `NICMALLOC_PROFILE`'s is: a relative path "    \
    "is taken from the directory the process started in, a new file is written next to it "        \
    "and renamed over it (so it holds a whole report), and a path that is a symbolic link, "       \
    "a file of another user or in a directory another user could change is refused, with "         \
    "one warning; so is a path that cannot be written, or a file name that could have more "       \
    "than 233 bytes with `%p` and `%u` at 10 digits (the new file's name adds 22), at "            \
    "start-up, or a write that fails at exit. A child of `fork` that exits while its parent runs " \
    "writes none, as for stderr")                                                                  \
  X(VERBOSE, "NICMALLOC_VERBOSE", NIC_T_BOOL, "0", 0, 1, "", NIC_REACH_VALUE,                      \
    "`1` prints a line per chunk mapped and released, and once each fallback taken "               \
    "without a warning: smaller pages, unpinned chunks, no address space for the control "         \
    "arena or the chunks (ulimit -v), a chunk refused, a request sent to the control heap")

/* Variables of the project's build tools (the LLVM pass, the scripts), which a program under the
 * runtime may well inherit: known, so not reported as misspellings, but never read here. */
#define NIC_TOOL_VARIABLES(X)                                                                      \
  X("NICMALLOC_ANALYSIS_BUDGET")                                                                   \
  X("NICMALLOC_BENCH_RESIDENT")                                                                    \
  X("NICMALLOC_BUILD_DIR")                                                                         \
  X("NICMALLOC_PASS_STATS")                                                                        \
  X("NICMALLOC_RUNTIME_LIB")                                                                       \
  X("NICMALLOC_SINK_FILE")                                                                         \
  X("NICMALLOC_SITE_TABLE_OUT")

#endif
