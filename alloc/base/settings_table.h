/* Every NICMALLOC_* variable the runtime reads, declared once. settings.c copies their values at
 * start-up; nothing else in the runtime reads the environment for them.
 *
 * X(name, reach): reach says what the value can point the process at. NIC_REACH_FILE marks a
 * setting that names a file, a plugin or arguments handed to another library; the others are
 * numbers and choices. In secure execution every setting is ignored (settings.c says why). */
#ifndef NIC_SETTINGS_TABLE_H
#define NIC_SETTINGS_TABLE_H

#define NIC_SETTINGS(X)                                                                            \
  X("NICMALLOC_BACKEND", NIC_REACH_VALUE)                                                          \
  X("NICMALLOC_CHUNK_SIZE", NIC_REACH_VALUE)                                                       \
  X("NICMALLOC_COPY_THRESHOLD", NIC_REACH_VALUE)                                                   \
  X("NICMALLOC_DPDK_EAL_ARGS", NIC_REACH_FILE)                                                     \
  X("NICMALLOC_DPDK_VDEV", NIC_REACH_FILE)                                                         \
  X("NICMALLOC_DP_MIN_SIZE", NIC_REACH_VALUE)                                                      \
  X("NICMALLOC_FENCE", NIC_REACH_VALUE)                                                            \
  X("NICMALLOC_FENCE_DETECT_SAMPLE", NIC_REACH_VALUE)                                              \
  X("NICMALLOC_FENCE_PROTECT", NIC_REACH_VALUE)                                                    \
  X("NICMALLOC_FENCE_TIMEOUT_MS", NIC_REACH_VALUE)                                                 \
  X("NICMALLOC_FREE_CHECK", NIC_REACH_VALUE)                                                       \
  X("NICMALLOC_HUGE_CACHE_BYTES", NIC_REACH_VALUE)                                                 \
  X("NICMALLOC_KEEP_CHUNKS", NIC_REACH_VALUE)                                                      \
  X("NICMALLOC_MAX_CHUNKS", NIC_REACH_VALUE)                                                       \
  X("NICMALLOC_ON_PIN_FAIL", NIC_REACH_VALUE)                                                      \
  X("NICMALLOC_PAGE_KIND", NIC_REACH_VALUE)                                                        \
  X("NICMALLOC_PROFILE", NIC_REACH_FILE)                                                           \
  X("NICMALLOC_PROFILE_RUN", NIC_REACH_FILE)                                                       \
  X("NICMALLOC_PROFILE_SAMPLE", NIC_REACH_VALUE)                                                   \
  X("NICMALLOC_PURGE_DELAY_MS", NIC_REACH_VALUE)                                                   \
  X("NICMALLOC_RCACHE_MAX_BYTES", NIC_REACH_VALUE)                                                 \
  X("NICMALLOC_RCACHE_MAX_REGIONS", NIC_REACH_VALUE)                                               \
  X("NICMALLOC_REALLOC_INFLIGHT", NIC_REACH_VALUE)                                                 \
  X("NICMALLOC_RELEASE_DELAY_MS", NIC_REACH_VALUE)                                                 \
  X("NICMALLOC_SIM_DELAYS", NIC_REACH_FILE)                                                        \
  X("NICMALLOC_SIM_MAX_SGE", NIC_REACH_VALUE)                                                      \
  X("NICMALLOC_SIM_MISS_NS", NIC_REACH_VALUE)                                                      \
  X("NICMALLOC_SIM_SEED", NIC_REACH_VALUE)                                                         \
  X("NICMALLOC_SIM_TCACHE", NIC_REACH_VALUE)                                                       \
  X("NICMALLOC_SIM_TCACHE_ENTRIES", NIC_REACH_VALUE)                                               \
  X("NICMALLOC_SIM_TCACHE_PAGE", NIC_REACH_VALUE)                                                  \
  X("NICMALLOC_SIM_TCACHE_WINDOW", NIC_REACH_VALUE)                                                \
  X("NICMALLOC_SITES", NIC_REACH_FILE)                                                             \
  X("NICMALLOC_SITES_BUDGET", NIC_REACH_VALUE)                                                     \
  X("NICMALLOC_SITES_HEADROOM", NIC_REACH_VALUE)                                                   \
  X("NICMALLOC_SITES_MIN_SIZE", NIC_REACH_VALUE)                                                   \
  X("NICMALLOC_SITES_OFF", NIC_REACH_FILE)                                                         \
  X("NICMALLOC_SITE_TABLE", NIC_REACH_FILE)                                                        \
  X("NICMALLOC_STATS", NIC_REACH_VALUE)                                                            \
  X("NICMALLOC_URING_ENTRIES", NIC_REACH_VALUE)                                                    \
  X("NICMALLOC_VERBOSE", NIC_REACH_VALUE)                                                          \
  X("NICMALLOC_VERBS_DEVICE", NIC_REACH_VALUE)                                                     \
  X("NICMALLOC_VERBS_ODP", NIC_REACH_VALUE)

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
